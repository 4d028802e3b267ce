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

Data where the workers are. When the run's data came from a path or an fsspec URL (a text,
CSV or Parquet log, a partitioned directory of ``ldhmm data export``, the Entree, MSNBC or splice
files of a data directory), the payload does not carry the database: :func:`data_reference`
makes a :class:`DataReference` (what to read, with the options it was read with, and the
fingerprint of the driver's database, :func:`ldhmm.experiments.datasets.data_fingerprint`),
:func:`read_on_workers` puts it and a :class:`FoldsRecipe` (how the folds are drawn, with the
SHA-256 of the driver's) in the place of the database and the folds, and each worker process
reads the data once (:func:`worker_payload`, cached per process by the reference), checks both
hashes against the driver's and runs its tasks on it. A worker that reads other data (or
cannot read it) ends the run with :class:`WorkerDataError`, one line naming the path and both
hashes: it never computes other numbers. Data given in Python (integer sequences, a database
built in memory, the built-in synthetic data sets) is scattered as it is.
:func:`transfer_bytes` says what a run sends: the scattered payload, the payload the database
would have made, the largest task message.

Faults. A group is deterministic, so a worker lost mid-task costs only its task: the scheduler
runs it again on another worker (up to ``distributed.scheduler.allowed-failures`` times), with
the same records. A group that fails by itself (an exception in the model) answers with its
error, as in a local run, and is not retried. A lost scheduler or client ends the run with
:class:`ClusterLostError` (one line); the parts saved so far stay, and the same command resumes.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import CancelledError
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data import DataOptions, SequenceDatabase, is_partitioned, kfold_indices, resolve_data_dir
from ..data.lazy_modules import LazyModule
from ..data.storage import is_url
from .datasets import DATA_SET_NAMES, data_files_present, data_fingerprint, select_database

__all__ = [
    "ClusterLostError",
    "WorkerDataError",
    "DataReference",
    "FoldsRecipe",
    "data_reference",
    "read_on_workers",
    "worker_payload",
    "transfer_bytes",
    "run_on_cluster",
    "message_bytes",
]

# Dask only where a run asks for a cluster: the harness imports without it.
distributed = LazyModule("distributed")


class ClusterLostError(RuntimeError):
    """The Dask scheduler (or the connection to it) was lost during a run."""


class WorkerDataError(RuntimeError):
    """A worker could not read the run's data, or read other data than the driver's (one line)."""


# ------------------------------------------------------------------------ data where the workers are
#: The options of an event log that :func:`ldhmm.data.load_event_log` records in a database's ``meta``.
_META_COLUMNS = ("sequence_col", "event_col", "time_col", "label_col")


@dataclass(frozen=True)
class DataReference:
    """What a worker reads in the place of the driver's database: small, hashable, picklable.

    Attributes
    ----------
    kind : {"file", "dataset"}
        ``"file"``: a data file, a partitioned directory or an fsspec URL, read by
        :meth:`ldhmm.data.DataOptions.read`; ``"dataset"``: a named data set (``entree``,
        ``msnbc``, ``splice``) of a data directory, read by
        :func:`ldhmm.experiments.datasets.select_database`.
    source : str
        The absolute path or the URL (``"file"``), or the data set's name (``"dataset"``).
    options : tuple of (str, object)
        How it was read, sorted by name: the :class:`ldhmm.data.DataOptions` set (``"file"``:
        columns, separator, event selection and map, length limits) or the
        absolute ``data_dir`` and ``labelled`` (``"dataset"``); for both ``n_sequences`` and
        ``seed`` of a seeded sample.
    fingerprint : str
        :func:`ldhmm.experiments.datasets.data_fingerprint` of the driver's database (16 hex
        digits of a SHA-256 of its tokens, lengths, labels and number of symbols).
    """

    kind: str
    source: str
    options: tuple = ()
    fingerprint: str = ""

    def read(self) -> SequenceDatabase:
        """The database as the driver read it (not checked: :meth:`load` checks it)."""
        options = dict(self.options)
        n, seed = options.pop("n_sequences", None), int(options.pop("seed", 0))
        if self.kind == "dataset":
            db, _ = select_database(
                self.source, None, options["data_dir"], n, seed, labelled=bool(options.get("labelled"))
            )
            return db
        if options.get("event_map") is not None:
            options["event_map"] = dict(options["event_map"])
        db = DataOptions(**options).read(self.source)
        return db.sample(min(int(n), len(db)), seed=seed) if n else db

    def load(self) -> SequenceDatabase:
        """:meth:`read`, with its fingerprint checked against the driver's.

        Raises
        ------
        WorkerDataError
            The data could not be read, or its fingerprint is not the driver's (one line naming
            the source and both hashes).
        """
        try:
            db = self.read()
        except (OSError, ValueError) as err:  # no such file, a format error: as one line
            reason = " ".join(f"{type(err).__name__}: {err}".split())
            raise WorkerDataError(
                f"{self.source}: a worker could not read the run's data ({reason})"
            ) from None
        got = data_fingerprint(db)
        if got != self.fingerprint:
            raise WorkerDataError(
                f"{self.source}: the data a worker read has fingerprint {got}, the driver's "
                f"{self.fingerprint} (the workers must read the driver's data: the same file at the same "
                f"path or URL)"
            )
        return db


@dataclass(frozen=True)
class FoldsRecipe:
    """The folds of a run, drawn again on a worker from its database: ``kfold_indices(db if
    by_labels else len(db), n_folds, seed=seed)`` (:func:`ldhmm.data.kfold_indices`), checked
    against ``sha256`` (:func:`folds_sha256` of the driver's folds)."""

    n_folds: int
    seed: int
    by_labels: bool
    sha256: str

    def draw(self, db: SequenceDatabase) -> list:
        """The folds of ``db``: a list of ``n_folds`` (train, test) int64 index arrays.

        Raises
        ------
        WorkerDataError
            They are not the driver's (another version of scikit-learn or numpy on the worker).
        """
        folds = kfold_indices(db if self.by_labels else len(db), self.n_folds, seed=self.seed)
        got = folds_sha256(folds)
        if got != self.sha256:
            raise WorkerDataError(
                f"the folds a worker drew have SHA-256 {got[:16]}, the driver's {self.sha256[:16]} "
                f"(install the driver's versions of numpy and scikit-learn on the workers)"
            )
        return folds


def folds_sha256(folds) -> str:
    """SHA-256 (hex) of the folds: each (train, test) pair's int64 indices, in order."""
    h = hashlib.sha256()
    for train, test in folds:
        for idx in (train, test):
            a = np.ascontiguousarray(idx, dtype=np.int64)
            h.update(str(a.size).encode() + b":")
            h.update(a.tobytes())
    return h.hexdigest()


def _absolute(path) -> str:
    return str(path) if is_url(str(path)) else os.path.abspath(path)


def _hashable_options(options: dict) -> dict:
    """``options`` of :class:`ldhmm.data.DataOptions` with hashable values (``events`` a tuple,
    ``event_map`` a sorted tuple of pairs: :meth:`DataReference.read` turns it back)."""
    out = dict(options)
    if out.get("events") is not None:
        out["events"] = tuple(out["events"])
    if out.get("event_map") is not None:
        out["event_map"] = tuple(sorted(dict(out["event_map"]).items()))
    return out


def data_reference(
    data,
    db: SequenceDatabase,
    data_dir=None,
    n_sequences: int | None = None,
    seed: int = 0,
    *,
    default: str = "entree",
    labelled: bool = False,
    columns: dict | None = None,
) -> DataReference | None:
    """The reference the workers read ``db`` from, or None where they get ``db`` itself.

    Parameters
    ----------
    data, data_dir, n_sequences, seed, default, labelled
        What :func:`ldhmm.experiments.datasets.resolve_data` was given.
    db : SequenceDatabase
        What it returned (its fingerprint goes into the reference).
    columns : dict, optional
        ``sequence_col``, ``event_col``, ``time_col`` of an event log.

    Returns
    -------
    DataReference or None
        A reference for a file, a partitioned directory or URL, a named data set of the data
        directory; for a database read from a file (``meta["source"]``: ``ldhmm compare --file``)
        one made from its ``meta`` and checked here by reading the file again (a database whose
        events or sequences were selected after the read, or whose file changed, is not that
        file's: None); None for integer sequences, a database built in memory and the built-in
        synthetic data sets.
    """
    fingerprint = data_fingerprint(db)
    sample = {"n_sequences": int(n_sequences), "seed": int(seed)} if n_sequences else {}

    def file_reference(source, columns: dict) -> DataReference:  # columns: {option: value or None}
        given = {k: v for k, v in columns.items() if v is not None}
        return DataReference(
            "file", _absolute(source), tuple(sorted({**given, **sample}.items())), fingerprint
        )

    if data is None:
        if not data_files_present(default, data_dir):
            return None  # the built-in synthetic database
        data = default
    if isinstance(data, (str, os.PathLike)):
        name = str(data).lower()
        if Path(data).is_file() or is_partitioned(str(data)):
            return file_reference(data, columns or {})
        if name in DATA_SET_NAMES and name != "synthetic":
            options = {"data_dir": str(resolve_data_dir(data_dir).resolve()), "labelled": bool(labelled)}
            return DataReference("dataset", name, tuple(sorted({**options, **sample}.items())), fingerprint)
        return None
    if isinstance(data, SequenceDatabase) and data.meta.get("source"):
        source = str(data.meta["source"])
        if not (is_url(source) or Path(source).exists()):
            return None
        read_with = data.meta.get("data_options")  # DataOptions.read: every option it was read with
        if read_with is None:
            read_with = {k: data.meta.get(k) for k in _META_COLUMNS}
        reference = file_reference(source, _hashable_options(read_with))
        try:
            same = data_fingerprint(reference.read()) == fingerprint
        except (OSError, ValueError):
            same = False
        return reference if same else None
    return None


def read_on_workers(
    payload: dict, reference: DataReference | None, n_folds: int, seed: int, by_labels: bool = False
) -> dict:
    """The payload a cluster's workers get: ``payload`` with its ``"db"`` replaced by
    ``reference`` and its ``"folds"`` by their :class:`FoldsRecipe`, or ``payload`` itself
    without a reference.

    Parameters
    ----------
    payload : dict
        The run's payload: ``"db"`` (SequenceDatabase), ``"folds"`` (list of (train, test)
        int64 arrays, drawn by ``kfold_indices(db if by_labels else len(db), n_folds, seed)``)
        and what the run's tasks need besides.
    reference : DataReference or None
        :func:`data_reference` of the run's data.
    n_folds, seed, by_labels
        How the folds were drawn.

    Returns
    -------
    dict
    """
    if reference is None:
        return payload
    recipe = FoldsRecipe(int(n_folds), int(seed), bool(by_labels), folds_sha256(payload["folds"]))
    return {**payload, "db": reference, "folds": recipe}


_LOADED: dict = {}  # on a worker: {(reference, recipe): (db, folds)}, the latest run's data only
_LOADING = threading.Lock()
#: reads of a reference in this process (the tests count a worker's reads)
READS: dict = {}


def worker_payload(payload):
    """On a worker: ``payload`` with the database and the folds of its reference (read once per
    process and kept for the next tasks of the run), or ``payload`` itself when it carries the
    database.

    Raises
    ------
    WorkerDataError
        As :meth:`DataReference.load` and :meth:`FoldsRecipe.draw`.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("db"), DataReference):
        return payload
    key = (payload["db"], payload["folds"])
    with _LOADING:
        if key not in _LOADED:
            _LOADED.clear()  # another run's data: not kept beside this one's
            db = payload["db"].load()
            READS[payload["db"]] = READS.get(payload["db"], 0) + 1
            _LOADED[key] = (db, payload["folds"].draw(db))
        db, folds = _LOADED[key]
    return {**payload, "db": db, "folds": folds}


def transfer_bytes(payload: dict, shipped: dict, groups: list[dict], call: Callable) -> dict:
    """What a run sends to its workers, in pickled bytes.

    Parameters
    ----------
    payload : dict
        The run's payload with its database and folds.
    shipped : dict
        What the workers get (:func:`read_on_workers`: the same or with a reference).
    groups : list of dict
        The run's task groups.
    call : callable
        The function that runs a group on a worker.

    Returns
    -------
    dict
        ``"payload"``: the scattered payload (once per worker); ``"database_payload"``: the
        payload with the database and the folds (what a run without a reference scatters);
        ``"message"``: the largest task message (:func:`message_bytes`, once per task).
    """
    return {
        "payload": len(pickle.dumps(shipped)),
        "database_payload": len(pickle.dumps(payload)),
        "message": max((message_bytes(g, call) for g in groups), default=0),
    }


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
        Shared read-only data, scattered to every worker once (with a :class:`DataReference`
        where the database would be: :func:`read_on_workers`).
    client : distributed.Client
    on_result : callable(group, answer)
        Called here, in the order the groups finish.

    Raises
    ------
    ClusterLostError
        The scheduler or the connection to it was lost.
    WorkerDataError
        A worker could not read the run's data, or read other data (:func:`worker_payload`).
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
