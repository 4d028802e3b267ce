"""The variational EM's partitions as Dask actors (``pip install -e ".[dask]"``).

Each partition lives in one :class:`ldhmm.inference.distributed.workers.PartitionWorker`, created as a
Dask actor on a worker of the cluster (placed round-robin) and kept there for the whole fit: its
sequences (read there from their Parquet files when the input is a partitioned directory) and
its per-sequence variational state never travel. A round sends the same small arguments to every
actor (the parameters: O(K V) numbers) and gathers each partition's sums; the driver
(:meth:`ldhmm.inference.em.VariationalEM.fit_backend`) reduces them in partition order, so the
numbers are those of :class:`ldhmm.inference.distributed.workers.LocalBackend` on the same partitions,
whatever the number of Dask workers or threads.

A lost worker (its process died): each of its partitions is rebuilt on a live worker from its
data and the current parameters, cold-started (its sequences lose their warm state and the
best-of-starts of the fit's first E-step), the event is recorded in ``recoveries``, and the round
is completed. The ELBO may dip at that iteration (the driver's monotonicity is not guaranteed
there). Exact recovery would need a checkpoint of every partition's state each iteration, i.e.
as much I/O per iteration as the state itself (about 1.7 KB per sequence at K = 8): the cold
rebuild costs nothing until a worker is lost, and EM recovers the lost ground in a few
iterations (docs/distributed.md).
"""

from __future__ import annotations

import itertools
import time
import uuid

from distributed import Client, LocalCluster

from .workers import PartitionWorker, Recovery

__all__ = ["DaskBackend", "connect"]


class DaskBackend:
    """Partition workers as Dask actors.

    Parameters
    ----------
    client : distributed.Client
    partitions : list
        One item per partition: a :class:`ldhmm.data.PartitionSpec` (read on the worker), or a
        pair (sequences, database positions).
    worker_options : dict
        Keyword arguments of :class:`PartitionWorker` (guide, n_symbols, sparse, bucket_cells,
        e_step_max_iter, e_step_tol).
    """

    def __init__(self, client: Client, partitions: list, worker_options: dict):
        self.client = client
        self.partitions = list(partitions)
        self.options = dict(worker_options)
        self.recoveries: list[Recovery] = []
        self._run = uuid.uuid4().hex[:8]
        self._last_e_step = None
        addresses = self._alive()
        if not addresses:
            raise RuntimeError("the Dask cluster has no workers")
        cycle = itertools.cycle(addresses)
        self.actors = [self._start(i, next(cycle)) for i in range(len(self.partitions))]

    @property
    def n_partitions(self) -> int:
        return len(self.actors)

    @property
    def states(self):
        """Per-sequence state stays on the workers."""
        return None

    def _alive(self) -> list[str]:
        return sorted(self.client.scheduler_info()["workers"])

    def _start(self, i: int, address: str):
        data = self.partitions[i]
        kwargs = dict(self.options)
        if isinstance(data, tuple):
            data, kwargs["index"] = data
        # The actor handle binds to the *current* client when it arrives here: make that this
        # backend's client, not whichever other client a caller may have made current.
        with self.client.as_current():
            future = self.client.submit(
                PartitionWorker,
                data,
                actor=True,
                workers=[address],
                allow_other_workers=False,
                key=f"ldhmm-partition-{self._run}-{i}-{len(self.recoveries)}",
                **kwargs,
            )
            return future.result()

    def _lost(self, i: int, wait: float = 30.0) -> bool:
        """Whether partition i's worker has left the cluster (the scheduler may take a moment
        to notice a dead process: poll up to ``wait`` seconds)."""
        deadline = time.monotonic() + wait
        while True:
            if self.actors[i]._address not in self._alive():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)

    def call(self, method: str, *args, iteration: int = 0, step: str = "") -> list:
        """``method(*args)`` on every partition's actor, results in partition order; a
        partition whose worker died is rebuilt (cold) on a live worker and the call redone."""
        if method == "e_step":
            self._last_e_step = args
        futures = []
        for actor in self.actors:
            try:
                futures.append(getattr(actor, method)(*args))
            except Exception as err:  # noqa: BLE001 - Dask refuses a call to an actor it knows lost
                futures.append(err)
        results = []
        for i, future in enumerate(futures):
            try:
                if isinstance(future, Exception):
                    raise future
                results.append(future.result())
            except Exception as err:  # noqa: BLE001 - only a lost worker is recovered, below
                if not self._lost(i):
                    raise
                self._recover(i, iteration, step, err)
                results.append(self._replay(i, method, args))
        return results

    def call_each(self, method: str, arguments: list) -> list:
        """``method(*arguments[i])`` on partition i's actor (each call on the worker that holds
        the partition; a lost one is rebuilt and the call redone); results in partition order."""
        futures = [getattr(actor, method)(*args) for actor, args in zip(self.actors, arguments)]
        results = []
        for i, future in enumerate(futures):
            try:
                results.append(future.result())
            except Exception as err:  # noqa: BLE001 - only a lost worker is recovered, below
                if not self._lost(i):
                    raise
                self._recover(i, 0, method, err)
                results.append(getattr(self.actors[i], method)(*arguments[i]).result())
        return results

    def _recover(self, i: int, iteration: int, step: str, err: Exception) -> None:
        alive = self._alive()
        if not alive:
            raise RuntimeError(f"every Dask worker is gone (partition {i}): {err}") from err
        self.recoveries.append(Recovery(iteration, step, i, f"{type(err).__name__}: {err}"[:200]))
        self.actors[i] = self._start(i, alive[i % len(alive)])

    def _replay(self, i: int, method: str, args):
        actor = self.actors[i]
        if method not in ("e_step", "reset", "size", "symbol_counts") and self._last_e_step is not None:
            # a rebuilt partition has no state yet: its E-step at this iteration's parameters
            actor.e_step(*self._last_e_step).result()
        return getattr(actor, method)(*args).result()


def connect(scheduler: str | None = None, n_workers: int | None = None, threads_per_worker: int = 1):
    """A Dask client: to the scheduler at ``scheduler`` (a cluster started by hand:
    ``dask scheduler`` and ``dask worker ADDRESS --nthreads 1``), or to a new LocalCluster of
    ``n_workers`` processes on this machine. Returns (client, cluster or None); close both."""
    if scheduler:
        return Client(scheduler), None
    cluster = LocalCluster(
        n_workers=int(n_workers or 2),
        threads_per_worker=threads_per_worker,
        processes=True,
        dashboard_address=None,
        silence_logs=40,
    )
    return Client(cluster), cluster
