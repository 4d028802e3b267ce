"""The variational EM's partitions as Dask actors (``pip install -e ".[dask]"``).

Each partition lives in one :class:`ldhmm.inference.distributed.workers.PartitionWorker`, created as a
Dask actor on a worker of the cluster and kept there for the whole fit: its sequences (read there
from their Parquet files when the input is a partitioned directory) and its per-sequence
variational state never travel. Every worker must run the driver's version of ldhmm (checked
first, :func:`check_versions`), and all workers must compute the same bits: the same numerical
libraries with the same CPU kernels (:func:`check_arithmetic`; an AVX2 and an AVX-512 worker
differ in the last bits, which EM grows, so the fit's numbers would depend on where each
partition lands); a driver unlike its workers is said in one line (it computes the M-steps, so
the numbers are those of any such cluster, not of a fit on the driver alone:
:func:`driver_differences`). The partitions are placed by size (the largest first, each on
the worker with the least tokens per byte of memory limit so far) and started at once. A round
sends the same small arguments to every actor (the parameters: O(K V) numbers) and gathers each
partition's sums; the driver (:meth:`ldhmm.inference.em.VariationalEM.fit_backend`) reduces them in
partition order, so the numbers are those of
:class:`ldhmm.inference.distributed.workers.LocalBackend` on the same partitions, whatever the number
of Dask workers or threads.

A lost worker (its process died) is recovered exactly. The backend keeps a journal of the calls
that changed the partitions' state since the last ``reset`` (the guide, and each E-step's
parameters and starts: O(K V) numbers per iteration). Each partition the lost worker held is
rebuilt on a live worker that computes the same bits (a worker that joins with other kernels,
or whose kernels cannot be read, is not used, said once) from its data, the journal is replayed
on it (its E-steps are deterministic functions of the parameters, the starts and the previous
state), and the call of the interrupted round is redone there. The partition then holds the
state it held before the loss, bit for bit, and the round's results are those of the unkilled
run: the fit ends where the unkilled run ends. A worker lost while the partitions are being
started (before the first round) is recovered the same way, with nothing to replay: its
partitions, started or not, are started again on live workers. The loss is reported when it
happens (one line: the worker, its partitions, what is replayed) and recorded in
``recoveries``. A lost scheduler is a :class:`ClusterLostError` (one line).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import os
import sys
import time
import uuid
from collections import Counter

from distributed import Client, LocalCluster
from distributed.comm import connect as comm_connect

from ...data.terminal_text import without_credentials
from .arithmetic import arithmetic_identity, identity_differences
from .workers import PartitionWorker, Recovery

__all__ = [
    "ClusterLostError",
    "DaskBackend",
    "check_arithmetic",
    "check_versions",
    "cluster_shape",
    "connect",
    "cpu_cores",
    "driver_differences",
    "installed_version",
    "placement",
    "scheduler_workers",
]

# The calls that change a partition's state: replayed, in order, on a rebuilt partition.
_JOURNALED = ("set_guide", "set_state_arrays", "e_step")
# A partition rebuilt this many times within one round means the cluster cannot hold it.
_MAX_RECOVERIES_PER_ROUND = 8
# How long to wait for an actor's answer before asking whether its worker is still there.
_POLL_SECONDS = 2.0
# The ``step`` of a loss while the partitions are being started (``Recovery.step``; iteration 0).
START_UP = "start-up"


class ClusterLostError(RuntimeError):
    """The Dask scheduler (and with it the cluster) is gone: the fit cannot go on."""


class WorkerLostError(RuntimeError):
    """A worker left the cluster while a call to one of its actors waited for its answer."""


def scheduler_workers(client: Client) -> dict:
    """The scheduler's workers now (address -> its info), asked of the scheduler itself.

    Not ``client.scheduler_info()["workers"]``: that returns the client's cached identity, which
    the client's periodic refresh (every ``distributed.client.scheduler-info-interval``) rewrites
    *without* workers; a refresh that lands between the method's own fetch and its return makes
    every worker look gone (it ended fits with "worker left the cluster" on a quiet machine)."""
    try:
        info = client.sync(client.scheduler.identity, n_workers=-1)
    except TypeError:  # distributed before identity(n_workers=...): it always lists every worker
        info = client.sync(client.scheduler.identity)
    return dict(info["workers"])


def placement(sizes: list[int], capacities: dict[str, float]) -> list[str]:
    """Which worker holds each partition: the largest partition first, each on the worker whose
    load (tokens placed, including this one) per unit of capacity is least (ties: the first
    worker in ``capacities``' order).

    Parameters
    ----------
    sizes : list of int
        Tokens of each partition.
    capacities : dict
        Worker address -> capacity (its memory limit; any positive number).

    Returns
    -------
    list of str, one address per partition.
    """
    addresses = list(capacities)
    load = dict.fromkeys(addresses, 0)
    where = [""] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        best = min(addresses, key=lambda a: ((load[a] + sizes[i]) / capacities[a], addresses.index(a)))
        load[best] += sizes[i]
        where[i] = best
    return where


def _partition_tokens(data) -> int:
    """Tokens of a partition: a PartitionSpec's count, or the shipped sequences' lengths."""
    if isinstance(data, tuple):
        return int(sum(len(s) for s in data[0]))
    return int(getattr(data, "n_tokens", 0))


def _print_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


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
    notify : callable, optional
        ``notify(line)`` when a worker is lost or left out, and when the workers compute with
        other kernels than this driver (default: the line on stderr).
    worker_class : type, optional
        The partitions' class, in place of :attr:`worker_class` (the contextual models'
        :class:`ldhmm.inference.distributed.context_partition.ContextPartitionWorker`); its state
        changes only in the calls named in ``_JOURNALED``.
    """

    #: The class of each partition's actor (a benchmark may subclass it, e.g. to slow a worker).
    worker_class = PartitionWorker
    #: Refuse workers that compute other bits (:func:`check_arithmetic`). Set False on a cluster
    #: of mixed machines to fit anyway: the numbers then depend on the placement of partitions.
    same_arithmetic = True

    def __init__(
        self, client: Client, partitions: list, worker_options: dict, notify=None, worker_class=None
    ):
        if worker_class is not None:
            self.worker_class = worker_class
        self.client = client
        self.partitions = list(partitions)
        self.options = dict(worker_options)
        self.notify = notify if notify is not None else _print_line
        self.recoveries: list[Recovery] = []
        self._run = uuid.uuid4().hex[:8]
        self._generation = 0
        self._journal: list[tuple[str, list, int]] = []
        capacities = self._capacities()
        if not capacities:
            raise RuntimeError("the Dask cluster has no workers")
        check_versions(client)
        # Each worker's identity, all the same: a worker joining later with another is not used.
        self._identities: dict[str, dict] = check_arithmetic(client) if self.same_arithmetic else {}
        self._identity = next(iter(self._identities.values()), None)
        differences = driver_differences(self._identity)
        if differences:  # reproducible on the cluster, but not the bits of a fit on this machine
            how = "; ".join(differences)
            self.notify(
                f"ldhmm: the Dask workers compute with other kernels than this driver ({how}): the fit's "
                f"numbers may differ in the last bits from a fit on this machine alone"
            )
        self._excluded: set[str] = set()
        if self._identity is not None:  # a worker that did not answer is not placed on
            capacities = {a: c for a, c in capacities.items() if a in self._identities}
        # Where each partition lives (its actor's worker), kept beside the actors so that a loss
        # before a partition's actor has answered names its partitions too.
        self._where = placement([_partition_tokens(p) for p in self.partitions], capacities)
        self.actors: list = [None] * len(self.partitions)
        self._start_up()

    @property
    def n_partitions(self) -> int:
        return len(self.actors)

    @property
    def states(self):
        """Per-sequence state stays on the workers."""
        return None

    @property
    def address(self) -> str:
        """The scheduler's address."""
        return str(getattr(self.client.scheduler, "address", "?"))

    def _capacities(self) -> dict[str, float]:
        """Live workers (sorted by address) -> memory limit (1 where none is set)."""
        lost = f"lost the Dask scheduler {self.address} (the client is {self.client.status})"
        if self.client.status != "running":  # its actors, and so the partitions' state, went with it
            raise ClusterLostError(lost)
        try:
            workers = scheduler_workers(self.client)
        except Exception as err:  # noqa: BLE001 - the client cannot reach its scheduler
            raise ClusterLostError(f"{lost}: {type(err).__name__}: {err}") from err
        return {a: float(workers[a].get("memory_limit") or 1) for a in sorted(workers)}

    def _alive(self) -> list[str]:
        return list(self._capacities())

    def _start_up(self) -> None:
        """Every partition started at once on its worker (``self._where``). A worker lost before
        all have answered is recovered as in a round: its partitions, answered or not, are started
        again on live workers (:meth:`_recover`; nothing to replay yet)."""
        with self.client.as_current():
            futures = self._submit_starts(dict(enumerate(self._where)))
            for i, future in futures.items():
                if self.actors[i] is not None:  # started again with a lost worker's partitions
                    continue
                try:
                    self.actors[i] = self._answer(future, self._where[i])
                except ClusterLostError:
                    raise
                except Exception as err:  # noqa: BLE001 - only a lost worker is recovered, below
                    # A start that raised (bad data: a missing file) ran on a live worker: its
                    # error at once, without waiting to see whether the worker is gone. An erred
                    # future whose worker has left is no such error: the scheduler errs an actor
                    # that had started ("Worker holding Actor was lost") when its worker goes.
                    errored_on_live_worker = future.status == "error" and self._where[i] in self._alive()
                    if errored_on_live_worker or not self._lost(self._where[i]):
                        raise
                    self._recover(self._where[i], 0, START_UP, err)

    def _start(self, where: dict[int, str]) -> dict:
        """Partition i as an actor on worker ``where[i]``, all submitted at once; the handles."""
        with self.client.as_current():
            futures = self._submit_starts(where)
            return {i: self._answer(future, where[i]) for i, future in futures.items()}

    def _submit_starts(self, where: dict[int, str]) -> dict:
        """The futures of partition i's actor on worker ``where[i]`` (one generation of keys).
        Call it under ``self.client.as_current()``: an actor handle binds to the *current* client
        when it arrives, which must be this backend's, not whichever other client a caller made
        current."""
        self._generation += 1
        return {i: self._submit_start(i, address) for i, address in where.items()}

    def _submit_start(self, i: int, address: str):
        """The future of partition i's actor, created on the worker at ``address`` only."""
        data = self.partitions[i]
        kwargs = dict(self.options)
        if isinstance(data, tuple):
            data, kwargs["index"] = data
        return self.client.submit(
            self.worker_class,
            data,
            actor=True,
            workers=[address],
            allow_other_workers=False,
            key=f"ldhmm-partition-{self._run}-{i}-{self._generation}",
            **kwargs,
        )

    def _lost(self, address: str, wait: float = 30.0) -> bool:
        """Whether the worker at ``address`` has left the cluster (the scheduler may take a
        moment to notice a dead process: poll up to ``wait`` seconds)."""
        deadline = time.monotonic() + wait
        while True:
            if address not in self._alive():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)

    def call(self, method: str, *args, iteration: int = 0, step: str = "") -> list:
        """``method(*args)`` on every partition's actor, results in partition order (a lost
        worker's partitions are rebuilt exactly and the call redone, see the module)."""
        return self._round(method, [args] * len(self.actors), iteration, step or method)

    def call_each(self, method: str, arguments: list) -> list:
        """``method(*arguments[i])`` on partition i's actor; results in partition order."""
        return self._round(method, list(arguments), 0, method)

    def _round(self, method: str, arguments: list, iteration: int, step: str) -> list:
        actors = list(self.actors)
        futures = [self._submit(actor, method, args) for actor, args in zip(actors, arguments)]
        results = [None] * len(actors)
        for i in range(len(actors)):
            for _ in range(_MAX_RECOVERIES_PER_ROUND):
                if self.actors[i] is not actors[i]:
                    # rebuilt since the call was sent (its worker was lost): its answer, even one
                    # that arrived, came from the old actor; the call is redone on the new one
                    actors[i] = self.actors[i]
                    futures[i] = self._submit(actors[i], method, arguments[i])
                try:
                    results[i] = self._answer(futures[i], actors[i]._address)
                    break
                except ClusterLostError:
                    raise
                except Exception as err:  # noqa: BLE001 - only a lost worker is recovered, below
                    if not self._lost(actors[i]._address):
                        raise
                    for j in self._recover(actors[i]._address, iteration, step, err):
                        if j < i:  # answered before the loss: the call redone on the rebuilt actor
                            actors[j] = self.actors[j]
                            results[j] = self._answer(
                                self._submit(actors[j], method, arguments[j]), actors[j]._address
                            )
            else:
                raise RuntimeError(f"partition {i} kept losing its worker at EM iteration {iteration}")
        self._record(method, arguments, iteration)
        return results

    def _answer(self, future, address: str):
        """The result of an actor call (or the exception it was submitted with). A call to a
        worker that died may never answer: every :data:`_POLL_SECONDS` without an answer, whether
        the worker is still in the cluster is asked."""
        if isinstance(future, Exception):
            raise future
        while True:
            try:
                return future.result(timeout=_POLL_SECONDS)
            except TimeoutError:
                if address not in self._alive():
                    raise WorkerLostError(f"the Dask worker {address} left the cluster") from None

    @staticmethod
    def _submit(actor, method: str, args):
        try:
            return getattr(actor, method)(*args)
        except Exception as err:  # noqa: BLE001 - raised again when the result is asked for
            return err

    def _record(self, method: str, arguments: list, iteration: int) -> None:
        """Keep the calls a rebuilt partition must replay (the state since the last reset)."""
        if method == "reset":
            self._journal = [entry for entry in self._journal if entry[0] == "set_guide"][-1:]
        elif method in _JOURNALED:
            self._journal.append((method, arguments, iteration))

    def _recover(self, address: str, iteration: int, step: str, err: Exception) -> list[int]:
        """Rebuild every partition of the lost worker ``address`` on live workers (placed by
        size) and replay the journal on them; report it in one line. A worker lost while they
        are rebuilt is left out and the rebuild starts over."""
        lost = [i for i, at in enumerate(self._where) if at == address]
        e_steps = [it for method, _, it in self._journal if method == "e_step"]
        redone = (
            f"replaying their E-steps of iterations {e_steps[0]}..{e_steps[-1]} since the restart"
            if e_steps
            else "nothing to replay"
        )
        if step == START_UP:  # no round has run: nothing but the start itself is redone
            moment, then = "while the partitions were being started", ""
        else:
            moment, then = f"at EM iteration {iteration} ({step} round)", ", then the round's call redone"
        message = f"{type(err).__name__}: {err}"[:200]
        for i in lost:
            self.recoveries.append(Recovery(iteration, step, i, message))
        gone = {address}
        for _ in range(_MAX_RECOVERIES_PER_ROUND):
            capacities = self._live_workers(gone)
            if not capacities:
                others = sorted(self._excluded & set(self._alive()))
                if others:
                    raise RuntimeError(
                        f"every Dask worker that computes the fit's bits is gone (partitions {lost}); "
                        f"{len(others)} live worker(s) compute with other kernels ({others[0]}): {err}"
                    ) from err
                raise RuntimeError(f"every Dask worker is gone (partitions {lost}): {err}") from err
            where = placement([_partition_tokens(self.partitions[i]) for i in lost], capacities)
            self.notify(
                f"ldhmm: lost Dask worker {', '.join(sorted(gone))} {moment}: partitions "
                f"{', '.join(map(str, lost))} rebuilt on {', '.join(sorted(set(where)))}, {redone}{then}; "
                f"the fit continues exactly"
            )
            try:
                self._rebuild(lost, where)
                return lost
            except ClusterLostError:
                raise
            except Exception:  # noqa: BLE001 - a worker lost during the rebuild: start over without it
                dead = {a for a in set(where) if self._lost(a)}
                if not dead:
                    raise
                gone |= dead
        raise RuntimeError(f"partitions {lost} could not be rebuilt: workers kept being lost") from err

    def _live_workers(self, gone: set, wait: float = 60.0) -> dict[str, float]:
        """The live workers but ``gone``; when there are none, wait up to ``wait`` seconds for
        one to join (a nanny restarting its worker, an adaptive cluster scaling up)."""
        deadline = time.monotonic() + wait
        while True:
            capacities = {a: c for a, c in self._capacities().items() if a not in gone}
            same = self._same_bits(list(capacities))
            capacities = {a: c for a, c in capacities.items() if a in same}
            if capacities or time.monotonic() > deadline:
                return capacities
            time.sleep(0.5)

    def _same_bits(self, addresses: list[str]) -> set[str]:
        """Those of the live workers ``addresses`` that have the fit's identity
        (:func:`check_arithmetic`). Workers not seen before are asked, together; one with another
        identity, or whose answer is an error, is reported once and left out. Workers that have
        left are forgotten (one may come back at the same address, restarted)."""
        if self._identity is None:
            return set(addresses)
        for address in set(self._identities) - set(addresses):
            del self._identities[address]
        self._excluded &= set(addresses)
        unknown = [a for a in addresses if a not in self._identities and a not in self._excluded]
        answers = self.client.run(arithmetic_identity, workers=unknown, on_error="return") if unknown else {}
        for address in unknown:
            answer = answers.get(address)
            if answer is None:  # not reached this time: asked again at the next poll
                continue
            if isinstance(answer, BaseException):
                self._excluded.add(address)
                why = f"its identity could not be read ({type(answer).__name__}: {answer})"[:200]
            elif answer != self._identity:
                self._excluded.add(address)
                differences = "; ".join(identity_differences(answer, self._identity))
                why = f"it computes with other kernels ({differences})"
            else:
                self._identities[address] = answer
                continue
            self.notify(f"ldhmm: Dask worker {address} not used for the fit's partitions: {why}")
        return {a for a in addresses if a in self._identities}

    def _rebuild(self, lost: list[int], where: list[str]) -> None:
        """Partitions ``lost`` started anew on ``where`` and the journal replayed on them; they
        replace the old actors only once they hold their state."""
        started = self._start(dict(zip(lost, where)))
        for method, arguments, _ in self._journal:
            futures = [getattr(started[i], method)(*arguments[i]) for i in lost]
            for i, future in zip(lost, futures):
                self._answer(future, started[i]._address)
        for i, address in zip(lost, where):
            self.actors[i], self._where[i] = started[i], address


def cpu_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def cluster_shape(n_workers: int | None = None, numba_threads: int | None = None, cores: int | None = None):
    """(worker processes, numba threads per worker) of a LocalCluster: at most one numba thread
    per core in all, by default (2 workers, or one per core on fewer cores; the cores shared
    out among them). Either may be given; together they may ask for more than the cores."""
    cores = int(cores or cpu_cores())
    workers = int(n_workers) if n_workers is not None else max(1, min(2, cores))
    threads = int(numba_threads) if numba_threads is not None else max(1, cores // workers)
    return workers, threads


def installed_version() -> str:
    """The version of ldhmm installed where this runs (on a worker: run by the driver to
    compare with its own)."""
    try:
        return importlib.metadata.version("ldhmm")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - not installed
        return "not installed"


def _answers(client: Client, function) -> dict:
    """Each worker's answer to ``function()`` (run on it), by address in order. A worker whose
    answer is an exception (lost while it was asked) is left out: the backend places nothing on
    it, and the partitions placed on it are started again elsewhere, as for any worker lost at
    start-up."""
    answers = client.run(function, on_error="return")
    return {a: v for a, v in sorted(answers.items()) if not isinstance(v, BaseException)}


def check_versions(client: Client) -> None:
    """Every worker runs the driver's version of ldhmm, or a one-line RuntimeError naming one
    that does not (a worker lost while it is asked is left out: :func:`_answers`)."""
    mine = installed_version()
    theirs = _answers(client, installed_version)
    other = [a for a in theirs if theirs[a] != mine]
    if other:
        raise RuntimeError(
            f"Dask worker {other[0]} runs ldhmm {theirs[other[0]]}, this driver {mine} ({len(other)} of "
            f"{len(theirs)} workers differ): install the same version everywhere"
        )


def check_arithmetic(client: Client) -> dict[str, dict]:
    """Every worker computes the same bits (the same :func:`arithmetic_identity`), or a one-line
    RuntimeError naming a worker that differs from the most common identity, and how. Returns
    each worker's identity (all the same; empty if none answered; a worker lost while it is
    asked is left out: :func:`_answers`)."""
    theirs = _answers(client, arithmetic_identity)
    keys = {a: tuple(sorted(v.items())) for a, v in theirs.items()}
    counts = Counter(keys.values())
    common = max(counts, key=counts.get, default=None)  # the first of the most common, by address
    other = [a for a in theirs if keys[a] != common]
    if other:
        reference = next(a for a in theirs if keys[a] == common)
        differences = "; ".join(identity_differences(theirs[other[0]], theirs[reference]))
        raise RuntimeError(
            f"Dask worker {other[0]} computes with other kernels than {reference}: {differences} "
            f"({len(other)} of {len(theirs)} workers differ): the fit's numbers would depend on which "
            f"worker holds which partition; start every worker with the same libraries and CPU kernels "
            f"(docs/performance.md, 'The same bits on another machine')"
        )
    return theirs


def driver_differences(workers_identity: dict | None) -> list[str]:
    """How the workers' common identity differs from this process's (the driver's), in words;
    empty when it does not or is unknown. The driver computes each M-step from the workers'
    sums, so a driver unlike its workers gives numbers that are the same on every such cluster
    but differ in the last bits (and, through EM, beyond) from a fit on the driver alone."""
    if workers_identity is None:
        return []
    return identity_differences(workers_identity, arithmetic_identity())


#: Seconds a connection to a Dask scheduler may take (``--scheduler-timeout``).
CONNECT_SECONDS = 10.0
#: The least memory a LocalCluster worker process is given (its interpreter, numba and torch).
WORKER_MEMORY_FLOOR = 256 << 20


def machine_memory() -> int:
    """Bytes of physical memory of this machine (0 where it cannot be told)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return 0


def check_local_workers(n_workers: int, cores: int | None = None, memory: int | None = None) -> None:
    """A LocalCluster of ``n_workers`` processes fits this machine: at most one per core and
    :data:`WORKER_MEMORY_FLOOR` of memory each, or a one-line ValueError naming the limit."""
    cores = int(cores or cpu_cores())
    memory = machine_memory() if memory is None else int(memory)
    most = cores if not memory else min(cores, max(1, memory // WORKER_MEMORY_FLOOR))
    if n_workers > most:
        raise ValueError(
            f"--workers {n_workers}: this machine has {cores} cores and {memory / 2**30:.1f} GiB of memory, "
            f"room for at most {most} worker processes (one per core, {WORKER_MEMORY_FLOOR >> 20} MiB each); "
            f"use --workers {most} or fewer, or a cluster of your own (--scheduler)"
        )


def _probe_scheduler(address: str, seconds: float) -> None:
    """Open and close one connection to ``address`` (its handshake included) within ``seconds``,
    or a one-line ValueError naming the address: a server that never answers would otherwise
    hold ``Client`` for ever (its own timeout does not bound the handshake), and one that is not a
    Dask scheduler answers with bytes that read as a message of exabytes."""

    async def probe():
        comm = await asyncio.wait_for(comm_connect(address, timeout=seconds), seconds)
        await comm.close()

    shown = without_credentials(address, address)
    try:
        asyncio.run(probe())
    except (asyncio.TimeoutError, TimeoutError, OSError) as err:
        detail = f": {without_credentials(' '.join(str(err).split()), address)}" if str(err) else ""
        raise ValueError(
            f"--scheduler {shown}: no Dask scheduler answered within {seconds:g} s{detail} "
            "(check the address, or wait longer with --scheduler-timeout SECONDS)"
        ) from None
    except (ValueError, TypeError) as err:  # an unknown scheme, a malformed address
        reason = without_credentials(err, address)
        raise ValueError(f"--scheduler {shown}: not a Dask scheduler's address ({reason})") from None
    except Exception as err:  # noqa: BLE001 - a server of another protocol: garbage, "3 EiB" frames
        raise ValueError(
            f"--scheduler {shown}: the server there answered, but not as a Dask scheduler "
            f"({type(err).__name__})"
        ) from None


def connect(
    scheduler: str | None = None,
    n_workers: int | None = None,
    threads_per_worker: int = 1,
    numba_threads: int | None = None,
    timeout: float = CONNECT_SECONDS,
    quiet: bool = False,
):
    """A Dask client: to the scheduler at ``scheduler`` (a cluster started by hand:
    ``dask scheduler`` and ``dask worker ADDRESS --nthreads 1``), reached within ``timeout``
    seconds or a one-line ValueError naming the address, or to a new LocalCluster on this
    machine of ``n_workers`` processes (at most what its cores and memory hold:
    :func:`check_local_workers`) with ``threads_per_worker`` Dask threads and ``numba_threads``
    numba threads each (defaults: :func:`cluster_shape`, at most one numba thread per core).
    ``quiet``: distributed's own log lines (a lost worker, a restart) are not printed.
    Returns (client, cluster or None); close both."""
    if quiet:
        logging.getLogger("distributed").setLevel(logging.CRITICAL + 1)
    if scheduler:
        _probe_scheduler(scheduler, timeout)
        client, cluster = Client(scheduler, timeout=timeout), None
    else:
        workers, threads = cluster_shape(n_workers, numba_threads)
        check_local_workers(workers)
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=threads_per_worker,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.CRITICAL + 1 if quiet else 40,
            env={"NUMBA_NUM_THREADS": str(threads)},
        )
        client = Client(cluster)
    return client, cluster
