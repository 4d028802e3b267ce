"""Resumable experiment tasks: the output directory, its configuration, and the task runner.

Every experiment command (``ldhmm compare``, ``classify``, ``timing``, ``hinton``) is a list of
independent *tasks*, each a group of *parts* (results): ``compare`` runs one task per (model,
fold), which fits the model along its K values and has one part per K (the (model, K, fold)
row), ``timing`` one task of one part per (data set, model, K). :func:`run_task_groups` runs
the tasks, in this process (``jobs=1``) or in ``jobs`` worker processes; a task saves each
part the moment it is computed, as its own small JSON file under ``OUT/tasks/`` (atomically:
a temporary file renamed into place), and may keep files it resumes from under
``OUT/models/`` (:data:`MODELS_DIR`: the fitted models of a path along K). A rerun skips
every part whose file exists, carries the same configuration hash and the same fields (a
part that names how it is computed, e.g. the K values of its path, is recomputed when that
changes), and runs each task with the parts it lacks, so an interrupted run resumes where it
stopped: at K granularity. :func:`run_tasks` is the runner for tasks of one part.

The configuration that determines the results (data fingerprint, folds, seeds, EM settings,
...) is saved as ``OUT/config.json``; :func:`prepare_out_dir` refuses to put results of a
different configuration into the same directory unless ``force=True`` (then the files of the
old configuration are recomputed as their tasks come up, never mixed in).

Determinism: every task seeds its own model from the configuration's ``seed``
(:func:`seed_everything`); folds come from :func:`ldhmm.data.kfold_indices` with the same
seed; torch runs single-threaded in every process (``jobs=1`` included), so ``jobs=J`` gives
the same numbers as ``jobs=1``. The worker processes check their memory estimates against this
process's limit (:func:`ldhmm.models.memory.set_max_memory`, ``--max-memory``), which they get
as an argument when they start.

Interrupted runs. Every file of a run (task files, ``config.json``, the reports: see
:func:`atomic_write_text`, :func:`atomic_write_csv`, :func:`atomic_savefig`) is written to a
temporary ``.NAME.XXXXXXXX.tmp`` in its directory and renamed into place, so a run killed at
any moment (SIGKILL included) leaves every result file whole: the old version or the new one.
A temporary file left by a killed run is never read as a result and is removed by the next
run that takes the lock.

The lock. :func:`prepare_out_dir` takes the lock of :mod:`ldhmm.data.directory_lock` (the one
lock of every directory a run resumes from), an exclusive lock on ``OUT/.lock`` (``fcntl.flock`` on
an open file descriptor, which the kernel releases when the process ends, however it ends: a
lock is never stale) and writes the holder's pid and command line into the file. A second
process pointed at the same ``OUT`` gets :class:`OutputLockedError` (a ``ValueError``) naming
the holder, before it writes anything. The lock is held until the experiment function
decorated with :func:`holds_out_dir_lock` that took it returns or raises (``compare``,
``classify``, ``next_event``, ``run_timing``, ``run_hinton``), or, when ``prepare_out_dir`` is
called outside such a function, until :func:`release_out_dir` or the end of the process;
:func:`run_tasks` takes it too, for its duration. Within one process the lock is re-entrant
(the same process may prepare and run the same ``OUT`` again). The ``.lock`` file stays in
``OUT`` (emptied when released); its presence means nothing, only the ``flock`` does. Where
``fcntl`` is missing (Windows) there is no lock. The lock file is opened close-on-exec, so the
worker processes of ``jobs > 1`` do not hold it; a process that forks without ``exec``
shares it with its child (the default ``jobs > 1`` workers are spawned, not forked).

Ctrl-C. A ``KeyboardInterrupt`` during :func:`run_tasks` stops its worker processes (the
workers ignore SIGINT, so a Ctrl-C in a terminal, which reaches the whole process group, prints
no traceback from them; the parent cancels what is queued and terminates them) and is raised
again as :class:`RunInterrupted` (a ``KeyboardInterrupt``) that says how many tasks are saved
where; ``ldhmm`` prints it as one line with the command to resume.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import multiprocessing as mp
import multiprocessing.resource_tracker
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import numba
import numpy as np
import torch
from tqdm.auto import tqdm

# the atomic writers live in the data layer and what a Ctrl-C says in .resume (every command
# uses them without the experiments); they stay importable from here
from ..data.atomic import (
    TEMPORARY_NAME,
    atomic_write_csv,
    atomic_write_parquet,
    atomic_write_text,
    write_atomically,
)
from ..data.directory_lock import LOCK_NAME, DirectoryLockedError, acquire, release
from ..data.resume import RunInterrupted, command_line, invocation, write_resume_script
from ..inference.progress import progress_options
from ..models.fit_settings import EFFORTS
from ..models.memory import max_memory_override, set_max_memory
from ..models.path import parse_states
from .cluster_tasks import run_on_cluster, worker_payload

__all__ = [
    "ConfigMismatchError",
    "OutputLockedError",
    "RunInterrupted",
    "LOCK_NAME",
    "MODELS_DIR",
    "holds_out_dir_lock",
    "release_out_dir",
    "command_line",
    "invocation",
    "write_resume_script",
    "config_hash",
    "default_out",
    "prepare_out_dir",
    "task_path",
    "load_task",
    "run_tasks",
    "run_task_groups",
    "PartOutput",
    "atomic_write_json",
    "atomic_write_text",
    "atomic_write_csv",
    "atomic_write_parquet",
    "atomic_savefig",
    "single_thread",
    "seed_everything",
    "BACKENDS",
    "cluster_client",
    "timed",
    "parse_states",
    "check_run_settings",
]


def default_out(command: str, db_name: str, out=None) -> Path:
    """The output directory of a command: ``out``, or when it is not given ``results/COMMAND-DATA``."""
    return Path(out) if out else Path("results") / f"{command}-{db_name or 'data'}"


#: the folder of ``OUT`` where tasks keep the fitted models they resume from
MODELS_DIR = "models"


class ConfigMismatchError(ValueError):
    """The output directory holds results of another configuration."""


def _canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def config_hash(settings: dict) -> str:
    """Hash of the result-determining settings (first 16 hex digits of SHA-256)."""
    return hashlib.sha256(_canonical(settings).encode()).hexdigest()[:16]


def _json_default(obj):
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def atomic_savefig(fig, path, **kwargs) -> None:
    """``fig.savefig(path, **kwargs)``, written atomically; the format is ``path``'s suffix
    unless ``format`` is given."""
    kwargs.setdefault("format", Path(path).suffix.lstrip(".").lower() or None)
    write_atomically(path, lambda f: fig.savefig(f, **kwargs), binary=True, parents=True)


def _remove_stale_temporaries(out: Path) -> None:
    """Remove the temporary files a killed run left in ``out``, ``out/tasks`` and ``out/models`` (called
    only while this process holds the lock: nobody else writes there)."""
    for folder in (out, out / "tasks", out / MODELS_DIR):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if TEMPORARY_NAME.match(name):
                try:
                    os.unlink(folder / name)
                except OSError:
                    pass


def atomic_write_json(path, obj) -> None:
    """JSON (NaN written as ``NaN``, read back by :func:`json.load`) written atomically."""
    atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=True, default=_json_default) + "\n")


# ------------------------------------------------------------------------ the lock
#: Another process is running with the same output directory (the lock of every directory a run
#: resumes from: :mod:`ldhmm.data.directory_lock`).
OutputLockedError = DirectoryLockedError

_SCOPES = threading.local()  # .stack: one list of OUT keys per active holds_out_dir_lock call


def _acquire(out: Path) -> tuple[str, bool]:
    """Take (or re-enter) the lock of ``out``; returns ``(key, fresh)``
    (:func:`ldhmm.data.directory_lock.acquire`, with this run's command line in the lock file)."""
    return acquire(out, "use another --out", command_line())


_release = release


def release_out_dir(out) -> None:
    """Release one hold of ``out``'s lock taken by :func:`prepare_out_dir` outside an
    experiment function (the flock goes with the last hold)."""
    _release(os.path.realpath(Path(out)))


def holds_out_dir_lock(fn: Callable) -> Callable:
    """Decorator of an experiment function: the lock that :func:`prepare_out_dir` takes inside
    it is released when it returns or raises."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        stack = getattr(_SCOPES, "stack", None)
        if stack is None:
            stack = _SCOPES.stack = []
        stack.append([])
        try:
            return fn(*args, **kwargs)
        finally:
            for key in reversed(stack.pop()):
                _release(key)

    return wrapper


def prepare_out_dir(out, command: str, settings: dict, extra: dict | None = None, force: bool = False) -> str:
    """Create ``out``, check it against ``settings`` and save ``config.json``; return the hash.

    ``settings`` are the result-determining settings (the hash every task file must carry);
    ``extra`` is recorded too (model list, K list, jobs, versions) but does not decide
    whether old task files are reused: adding a model or a K to a finished run only computes
    the new tasks.

    Raises
    ------
    ConfigMismatchError
        ``out/config.json`` exists with other settings (or another command) and not ``force``.
    OutputLockedError
        Another process holds ``out``'s lock (module docstring); the lock taken here is held
        until the enclosing :func:`holds_out_dir_lock` function ends (else: until
        :func:`release_out_dir` or the end of the process).
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {str(out)!r} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    key, fresh = _acquire(out)
    try:
        if fresh:
            _remove_stale_temporaries(out)
        digest = _write_config(out, command, settings, extra, force)
    except BaseException:
        _release(key)
        raise
    stack = getattr(_SCOPES, "stack", None)
    if stack:
        stack[-1].append(key)  # released when the experiment function ends
    return digest


def _write_config(out: Path, command: str, settings: dict, extra: dict | None, force: bool) -> str:
    digest = config_hash({"command": command, **settings})
    path = out / "config.json"
    if path.is_file():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = {}
        if old.get("config_hash") != digest and not force:
            old_settings = old.get("settings", {}) if isinstance(old.get("settings"), dict) else {}
            keys = sorted(
                k
                for k in set(old_settings) | set(settings)
                if _canonical(old_settings.get(k)) != _canonical(settings.get(k))
            )
            if old.get("command") != command:
                keys = ["command"] + keys
            differ = ", ".join(keys) if keys else "unreadable config.json"
            raise ConfigMismatchError(
                f"{out} holds results of another configuration (differs in: {differ}); "
                f"use another --out or pass --force to recompute them with this one"
            )
    record = {"command": command, "config_hash": digest, "settings": settings, **(extra or {})}
    record["versions"] = _versions()
    atomic_write_json(path, record)
    return digest


def _versions() -> dict:
    out = {"python": sys.version.split()[0], "numpy": np.__version__}
    for mod in ("torch", "pyro", "hmmlearn", "gensim", "sklearn", "scipy"):
        m = sys.modules.get(mod)
        if m is not None:
            out[mod] = getattr(m, "__version__", "?")
    return out


def task_path(out, key: str) -> Path:
    return Path(out) / "tasks" / f"{key}.json"


def load_task(out, key: str, digest: str) -> dict | None:
    """The saved result of a task when it exists and has the configuration hash ``digest``."""
    path = task_path(out, key)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("config_hash") != digest:
        return None
    return record


# ------------------------------------------------------------------------ runner
_PAYLOAD = None


def _init_worker(payload, parent: int | None = None, max_memory: int | None = None) -> None:
    """Set up a worker process: the run's ``payload``, an end with the ``parent`` run, the
    parent's memory limit (:func:`ldhmm.models.memory.set_max_memory`: an argument, not the
    environment), SIGINT ignored, torch and numba single-threaded.

    Each of the ``jobs`` workers gets one core: with numba's default of a thread per core, two
    workers on 2 cores ran 4 threads whose parallel loops wait for each other (an Entree fit
    took 4.5x the CPU time of one thread on a loaded machine). The compiled kernels add their
    blocks in a fixed order, so the numbers do not depend on the thread count."""
    global _PAYLOAD
    _PAYLOAD = payload
    set_max_memory(max_memory)
    if parent is not None:
        threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    # a Ctrl-C is the parent's to handle (it stops the workers): no traceback from here. The
    # worker started with SIGINT blocked (_sigint_blocked); ignore it, then unblock.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    numba.set_num_threads(1)
    single_thread()


def _exit_with_parent(parent: int) -> None:
    """End this worker when the run that started it is gone (killed with SIGKILL, say):
    its queues never close, so without this the worker would wait for them forever."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


@contextlib.contextmanager
def _sigint_blocked():
    """SIGINT blocked in this thread inside the block: processes started here inherit the
    mask, so a Ctrl-C cannot reach them before :func:`_init_worker` ignores it; one that
    reaches this process meanwhile is delivered when the block ends.

    multiprocessing's resource tracker is started first: the first pool of a process starts it
    (its queues' locks register there), and starting it *unblocks* SIGINT in the calling
    thread (``resource_tracker.ensure_running``), which let a Ctrl-C reach a worker still
    importing, whose traceback was then cut off after its first line when the parent killed it."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    multiprocessing.resource_tracker.ensure_running()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def _sigint_ignored():
    """A second Ctrl-C does not interrupt the clean-up inside the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _run_isolated(fn, task, payload, ctx) -> dict:
    """One task in a worker process of its own: its result, or an error when the process dies."""
    with _sigint_blocked():
        pool = ProcessPoolExecutor(
            max_workers=1,
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(payload, os.getpid(), max_memory_override()),
        )
        future = pool.submit(_call_in_worker, fn, task)
    try:
        result = future.result()
    except BrokenProcessPool:
        result = {
            "_error": "WorkerDied: the worker process running this task died (a crash or out of memory)"
        }
    finally:
        if future.done():
            pool.shutdown(wait=True)
        else:  # interrupted
            _stop_pool(pool)
    return result


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """End the workers now (their running tasks are lost), then cancel the queued tasks.

    The workers are killed before the pool's pipes close: a worker still starting up would
    otherwise print a traceback (the end of its pipe) on the terminal the Ctrl-C came from.
    """
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for proc in processes:
        if proc.is_alive():
            proc.kill()
    for proc in processes:
        proc.join(5.0)
    pool.shutdown(wait=False, cancel_futures=True)


def single_thread() -> int:
    """Make torch single-threaded (see the module docstring); returns the thread count before.

    numba's thread pool is started first (``get_num_threads`` does not start it;
    ``set_num_threads`` does): with its OpenMP threading layer, starting the pool sets
    OpenMP's thread count, which is also torch's, back to one per core. A worker that set torch
    to one thread and then started numba ran torch on two threads again, and two such workers
    on 2 cores spin-waited on each other's cores: an Entree HMM fit of K = 6 took 21 s instead
    of 4.3 s (docs/performance.md, "Whole fits")."""
    numba.set_num_threads(numba.get_num_threads())
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    return before


def _call_in_worker(fn, task):
    return _guarded(fn, task, _PAYLOAD)


def _guarded(fn, task, payload):
    try:
        return fn(task, payload)
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # reported, not saved: the task is retried by the next run
        # BaseException: a plug-in that calls sys.exit() fails its own task, not the run
        msg = " ".join(f"{type(err).__name__}: {err}".split())
        return {"_error": msg}


def run_tasks(
    tasks: list[dict],
    fn: Callable,
    payload,
    out,
    digest: str,
    jobs: int = 1,
    quiet: bool = False,
    desc: str = "tasks",
) -> tuple[list[dict], list[str]]:
    """Run the tasks not yet done under ``out`` and return all their records.

    Each task is a group of one part (:func:`run_task_groups`): ``fn(task, payload)`` returns
    the task's result, saved as its file.

    Parameters
    ----------
    tasks : list of dict
        Each with a unique ``"key"`` (the file name of its result) and what ``fn`` needs;
        must be picklable.
    fn : callable(task, payload) -> dict
        A module-level function (it runs in worker processes when ``jobs > 1``).
    payload
        Shared read-only data (the database, the folds, the settings), sent once per worker.
    out, digest
        Output directory and configuration hash (:func:`prepare_out_dir`).
    jobs : int
        Worker processes; 1 runs in this process.
    quiet : bool
        No progress bar.

    Returns
    -------
    (records, errors)
        ``records``: the results of the tasks that succeeded, in task order, each with the
        task's fields, ``config_hash`` and ``resumed`` (True when read from disk);
        ``errors``: one line per failed task (their files are not written).

    Raises
    ------
    OutputLockedError, RunInterrupted
        As for :func:`run_task_groups`.
    """
    groups = [{"key": t["key"], "parts": [t]} for t in tasks]
    return run_task_groups(groups, functools.partial(_one_part, fn), payload, out, digest, jobs, quiet, desc)


def _one_part(fn, group, payload, output) -> None:
    """A group of one part: ``fn(part, payload)`` is its result."""
    part = group["parts"][0]
    output.save(part["key"], fn(part, payload))


class PartOutput:
    """What a group function gets to save its parts: ``save(key, result)`` writes the part's
    record (its fields, ``result``, the configuration hash) to ``tasks/KEY.json`` at once,
    atomically; ``todo`` holds the keys of the parts to compute; ``out`` is the run's
    directory (a task may keep files of its own there, e.g. fitted models to resume from).

    Picklable: it travels to the worker process with its group.
    """

    def __init__(self, out, digest: str, parts: list[dict], todo):
        self.out = Path(out)
        self.digest = digest
        self._parts = {p["key"]: p for p in parts}
        self.todo = frozenset(todo)

    def save(self, key: str, result: dict) -> None:
        atomic_write_json(task_path(self.out, key), self.record(key, result))

    def record(self, key: str, result: dict) -> dict:
        """The record of part ``key``: ``result`` with the part's fields and the configuration hash."""
        if key not in self._parts:
            raise KeyError(f"{key!r} is not a part of this task")
        # the part's fields win over a result's field of the same name: they identify the record
        record = dict(result)
        record.update((k, v) for k, v in self._parts[key].items() if k != "key")
        record["config_hash"] = self.digest
        return record


class _KeptOutput(PartOutput):
    """A :class:`PartOutput` that keeps the records instead of writing them: a group that runs on
    a cluster's worker, whose disk need not be this machine's, hands them to the driver."""

    def __init__(self, out, digest: str, parts: list[dict], todo):
        super().__init__(out, digest, parts, todo)
        self.records: dict[str, dict] = {}

    def save(self, key: str, result: dict) -> None:
        self.records[key] = self.record(key, result)


class _GroupCall:
    """``fn(group, payload, output)`` of a group, as the runner's task function: the parts
    are saved as they finish (in the worker), so the run resumes at part granularity."""

    def __init__(self, fn: Callable, out, digest: str):
        self.fn, self.out, self.digest = fn, Path(out), digest

    def __call__(self, group, payload) -> dict:
        output = PartOutput(self.out, self.digest, group["parts"], group["todo"])
        self.fn(group, payload, output)
        return {}


class _ClusterGroupCall(_GroupCall):
    """:class:`_GroupCall` on a cluster's worker (torch on one thread, as in a local worker): the
    answer holds the records of the parts it computed (:class:`_KeptOutput`), and an error is
    reported as a local run reports it, beside the records saved before it. A payload with a
    :class:`ldhmm.experiments.cluster_tasks.DataReference` gets its database here, read once per
    worker process (:func:`ldhmm.experiments.cluster_tasks.worker_payload`); data the worker cannot
    read, or other data than the driver's, ends the run (``WorkerDataError``), not only the task."""

    def __call__(self, group, payload) -> dict:
        single_thread()
        payload = worker_payload(payload)
        output = _KeptOutput(self.out, self.digest, group["parts"], group["todo"])
        answer = _guarded(lambda g, p: self.fn(g, p, output) or {}, group, payload)
        return {**answer, "records": output.records}


def _matches(record: dict | None, part: dict) -> dict | None:
    """A saved record is the part's result when it carries every field of the part (the key
    aside) with the same value: a part that names how it was computed (e.g. the K values of a
    path fitted along K) is recomputed when that changes."""
    if record is None:
        return None
    for k, v in part.items():
        if k != "key" and (k not in record or _canonical_json(record[k]) != _canonical_json(v)):
            return None
    return record


def _canonical_json(value) -> str:
    # as the record file holds it: a tuple is a list, numpy numbers are Python numbers
    return json.dumps(value, sort_keys=True, default=_json_default)


def run_task_groups(
    groups: list[dict],
    fn: Callable,
    payload,
    out,
    digest: str,
    jobs: int = 1,
    quiet: bool = False,
    desc: str = "tasks",
    client=None,
) -> tuple[list[dict], list[str]]:
    """Run the groups of tasks with parts not yet done under ``out``; return every part's record.

    A group is the unit a worker runs (e.g. one model on one fold, fitted along its K values);
    its parts are the results (e.g. one per K), each saved as its own file the moment it is
    computed, so an interrupted group resumes with the parts it has not saved.

    Parameters
    ----------
    groups : list of dict
        Each with a ``"key"`` (named in progress and errors), ``"parts"`` (a list of dicts,
        each with a unique ``"key"``, the file name of its record, and the fields its record
        keeps) and what ``fn`` needs; picklable. The runner adds ``"todo"``: the keys of the
        parts not yet saved.
    fn : callable(group, payload, output) -> None
        A module-level function (it runs in worker processes when ``jobs > 1``) that computes
        the parts in ``output.todo`` and saves each with ``output.save(key, result)``
        (:class:`PartOutput`).
    payload, out, digest, jobs, quiet
        As for :func:`run_tasks`.
    client : distributed.Client, optional
        Run the groups as Dask tasks on its workers instead (``jobs`` is then not used): the
        payload goes to every worker once, each group's records come back and are written here
        (:mod:`ldhmm.experiments.cluster_tasks`), with the same numbers as a local run. A
        payload made by :func:`ldhmm.experiments.cluster_tasks.read_on_workers` carries a
        reference in the place of its database and folds: the workers read them.

    Returns
    -------
    (records, errors)
        ``records``: the saved parts, in group and part order, each with its fields,
        ``config_hash`` and ``resumed`` (True when read from disk before the run);
        ``errors``: one line ``"PART_KEY: reason"`` per part left unsaved by a failed group.

    Raises
    ------
    OutputLockedError
        Another process holds ``out``'s lock (taken here for the run; re-entered when this
        process took it in :func:`prepare_out_dir`).
    RunInterrupted
        On a ``KeyboardInterrupt`` (Ctrl-C): the worker processes are stopped; it says how
        many of the parts are saved.
    """
    if int(jobs) < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    parts = [p for g in groups for p in g["parts"]]
    keys = [p["key"] for p in parts]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate task keys")
    if len({g["key"] for g in groups}) != len(groups):
        raise ValueError("duplicate group keys")
    Path(out).mkdir(parents=True, exist_ok=True)
    lock_key, _ = _acquire(Path(out))  # re-entered when prepare_out_dir took it
    try:
        call = (_GroupCall if client is None else _ClusterGroupCall)(fn, out, digest)
        return _run(groups, parts, call, payload, out, digest, jobs, quiet, desc, client)
    finally:
        _release(lock_key)


def _run(groups, parts, call, payload, out, digest, jobs, quiet, desc, client=None):
    done: dict[str, dict] = {}
    todo = []
    for g in groups:
        missing = []
        for p in g["parts"]:
            rec = _matches(load_task(out, p["key"], digest), p)
            if rec is not None:
                rec["resumed"] = True
                done[p["key"]] = rec
            else:
                missing.append(p["key"])
        if missing:
            todo.append({**g, "todo": missing})
    errors: list[str] = []
    bar = tqdm(
        total=len(parts),
        initial=len(done),
        desc=desc,
        disable=quiet,
        unit="task",
        dynamic_ncols=True,
        **progress_options(sys.stderr),
    )
    finished: set[str] = set()

    def finish(group, result):
        # the parts were saved by the group as it went: read back what it saved
        by_key = {p["key"]: p for p in group["parts"]}
        for key in group["todo"]:
            rec = _matches(load_task(out, key, digest), by_key[key])
            if rec is not None:
                rec["resumed"] = False
                done[key] = rec
            elif "_error" in result:
                errors.append(f"{key}: {result['_error']}")
            else:
                errors.append(f"{key}: the task ended without saving this result")
        finished.add(group["key"])
        bar.update(len(group["todo"]))

    def save_and_finish(group, answer):  # a cluster's answer: its records are written here
        for key, record in answer.get("records", {}).items():
            atomic_write_json(task_path(out, key), record)
        finish(group, answer)

    try:
        if todo and client is not None:
            run_on_cluster(todo, call, payload, client, save_and_finish)
        elif todo and int(jobs) == 1:
            before = single_thread()
            try:
                for g in todo:
                    bar.set_postfix_str(g["key"], refresh=False)
                    finish(g, _guarded(call, g, payload))
            finally:
                torch.set_num_threads(before)
        elif todo:

            def unsaved(group):  # a group to run again, with the parts it has not saved
                by_key = {p["key"]: p for p in group["parts"]}
                left = [k for k in group["todo"] if _matches(load_task(out, k, digest), by_key[k]) is None]
                return {**group, "todo": left}

            _run_pool(todo, call, payload, jobs, finish, finished, unsaved)
    except KeyboardInterrupt as err:
        if isinstance(err, RunInterrupted):
            raise
        # a part saved just before the interrupt is not in `done` yet
        saved = sum(
            1 for p in parts if p["key"] in done or _matches(load_task(out, p["key"], digest), p) is not None
        )
        raise RunInterrupted(out, saved, len(parts)) from err
    finally:
        bar.close()
    return [done[k] for k in (p["key"] for p in parts) if k in done], errors


def _run_pool(todo, fn, payload, jobs, finish, finished, unsaved) -> None:
    """The groups ``todo`` in ``jobs`` spawned worker processes; ``finish`` each result here
    (``unsaved(group)``: the group with the parts it has saved taken out of its ``todo``)."""
    ctx = mp.get_context("spawn")  # fork after torch's threads start can deadlock
    pool = None
    completed = False
    try:
        with _sigint_blocked():  # the workers start with SIGINT blocked, then ignore it
            pool = ProcessPoolExecutor(
                max_workers=min(int(jobs), len(todo)),
                mp_context=ctx,
                initializer=_init_worker,
                initargs=(payload, os.getpid(), max_memory_override()),
            )
            futures = {pool.submit(_call_in_worker, fn, g): g for g in todo}
        left = []
        try:
            for fut in as_completed(futures):
                finish(futures[fut], fut.result())
        except BrokenProcessPool:
            # A worker died (a plug-in that crashed the interpreter, the OOM killer): which group
            # killed it is unknown, so each group not yet finished runs alone in a fresh worker
            # (with the parts it has not saved), and only one that kills its own worker fails;
            # the others' results are kept.
            left = [futures[f] for f in futures if not f.done() or f.exception() is not None]
            left = [g for g in left if g["key"] not in finished]
        if left:
            _stop_pool(pool)
            pool = None
            for g in left:
                rest = unsaved(g)  # the parts its dead worker saved are kept
                finish(g, _run_isolated(fn, rest, payload, ctx) if rest["todo"] else {})
        completed = True
    finally:
        if pool is not None:
            if completed:
                pool.shutdown(wait=True)
            else:
                with _sigint_ignored():
                    _stop_pool(pool)


# ------------------------------------------------------------------------ inside a task
def timed(fn, *args, **kwargs):
    """``(result, seconds)`` of a call (wall clock, ``time.perf_counter``)."""
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - t0


#: Where a run's tasks go: worker processes of this machine, or a Dask cluster's workers.
BACKENDS = ("local", "dask")


def cluster_client(backend: str, client):
    """The ``distributed.Client`` a run's tasks go to (``backend="dask"``, where it is required),
    or None (``"local"``: ``jobs`` worker processes); a wrong pair is one ``ValueError`` line."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "dask" and client is None:
        raise ValueError("backend='dask' needs client= (a distributed.Client; the command line opens one)")
    if backend == "local" and client is not None:
        raise ValueError("client= is the cluster of backend='dask'; give backend='dask' with it")
    return client


def seed_everything(seed: int) -> None:
    """Seed numpy's and torch's global generators (models seed themselves too)."""
    random.seed(int(seed))
    np.random.seed(int(seed) % (2**32))
    torch.manual_seed(int(seed))


# ------------------------------------------------------------------------ the grid
def check_run_settings(
    folds=None, jobs=1, max_iter=None, tol=None, m_step=None, restarts=None, is_samples=None, effort=None
):
    """The harness-wide settings of a run, checked before its output directory is touched (a
    bad one would otherwise fail every task after ``config.json`` is written)."""
    if folds is not None and (isinstance(folds, bool) or not isinstance(folds, int) or folds < 2):
        raise ValueError(f"folds must be an integer >= 2, got {folds!r}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
    if max_iter is not None and (isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1):
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    if tol is not None and not (isinstance(tol, (int, float)) and 0 <= tol < float("inf")):
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
    if m_step is not None and m_step not in ("collapsed", "paper"):
        raise ValueError(f"m_step must be 'collapsed' or 'paper', got {m_step!r}")
    if effort is not None and (not isinstance(effort, str) or effort not in EFFORTS):
        choices = ", ".join(repr(e) for e in EFFORTS)
        raise ValueError(f"effort must be None or one of {choices}, got {effort!r}")
    if restarts is not None and (isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 1):
        raise ValueError(f"restarts must be an integer >= 1, got {restarts!r}")
    if is_samples is not None and (
        isinstance(is_samples, bool) or not isinstance(is_samples, int) or is_samples < 0
    ):
        raise ValueError(f"is_samples must be an integer >= 0, got {is_samples!r}")
