"""The harness's tasks on a Dask cluster: each group of parts one Dask task, its records saved here.

:func:`ldhmm.experiments.tasks.run_task_groups` runs its groups (a (model, fold) task of
``compare``, ``classify`` or ``next-event``) in this process, in ``jobs`` local worker
processes, or, given a ``distributed.Client``, here: :func:`run_on_cluster` sends the run's
payload (the database, the folds, the settings) to every worker once (``client.scatter``,
broadcast), then one small message per group (the group and the function that runs it), and
hands each group's answer to ``on_result`` in this process as it comes. A group returns its
parts' records instead of writing them (a cluster's workers need not share this machine's
disk): the driver writes them into the run's task store, so resume, the lock, the configuration
check and the reports are those of a local run.

Faults. A group is deterministic, so a worker lost mid-task costs only its task: the scheduler
runs it again on another worker (up to ``distributed.scheduler.allowed-failures`` times), with
the same records. A group that fails by itself (an exception in the model) answers with its
error, as in a local run, and is not retried. A lost scheduler or client ends the run with
:class:`ClusterLostError` (one line); the parts saved so far stay, and the same command resumes.
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Callable
from concurrent.futures import CancelledError

from ..data.lazy_modules import LazyModule

__all__ = ["ClusterLostError", "run_on_cluster", "message_bytes"]

# Dask only where a run asks for a cluster: the harness imports without it.
distributed = LazyModule("distributed")


class ClusterLostError(RuntimeError):
    """The Dask scheduler (or the connection to it) was lost during a run."""


def message_bytes(group: dict, call: Callable) -> int:
    """Bytes of one group's task message (the group and the function that runs it, pickled):
    what the driver sends per task, beside the payload sent once per worker."""
    return len(pickle.dumps((call, group)))


def run_on_cluster(todo: list[dict], call: Callable, payload, client, on_result: Callable) -> None:
    """Run the groups ``todo`` as Dask tasks on ``client``'s workers.

    Parameters
    ----------
    todo : list of dict
        The groups (each with its ``"key"`` and ``"todo"`` parts).
    call : callable(group, payload) -> dict
        Runs one group on a worker: its answer, ``{"records": {part key: record}}`` or
        ``{"_error": reason}`` (picklable, module-level or a picklable object).
    payload
        Shared read-only data, scattered to every worker once.
    client : distributed.Client
    on_result : callable(group, answer)
        Called here, in the order the groups finish.

    Raises
    ------
    ClusterLostError
        The scheduler or the connection to it was lost.
    """
    run = uuid.uuid4().hex[:8]
    futures: dict = {}
    try:
        shared = client.scatter(payload, broadcast=True, hash=False)
        futures = {
            client.submit(call, group, shared, key=f"ldhmm-{run}-{i}", pure=False): group
            for i, group in enumerate(todo)
        }
        for future in distributed.as_completed(futures):
            group = futures[future]
            try:
                answer = future.result()
            except distributed.KilledWorker as err:  # the workers running it died, time and again
                answer = {"_error": f"KilledWorker: every worker that ran this task died ({err})"}
            on_result(group, answer)
    except (OSError, TimeoutError, CancelledError) as err:  # CommClosedError is an OSError
        raise ClusterLostError(
            f"the Dask cluster was lost during the run ({type(err).__name__}: {' '.join(str(err).split())})"
        ) from None
    finally:  # a Ctrl-C, a lost cluster: what is still queued or running is not wanted
        unfinished = [f for f in futures if not f.done()]
        if unfinished:
            try:
                client.cancel(unfinished)
            except Exception:  # noqa: BLE001 - the cluster may be gone: nothing to cancel there
                pass
