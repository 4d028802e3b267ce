"""Resumable experiment tasks: the output directory, its configuration, and the task runner.

Every experiment command (``ldhmm compare``, ``classify``, ``timing``, ``hinton``) is a list of
small independent *tasks* (e.g. one ``(model, K, fold)`` fit and score). :func:`run_tasks`
runs them, in this process (``jobs=1``) or in ``jobs`` worker processes, and writes each
finished task's result as its own small JSON file under ``OUT/tasks/`` (atomically: a
temporary file renamed into place). A rerun skips every task whose file exists and carries
the same configuration hash, so an interrupted run resumes where it stopped.

The configuration that determines the results (data fingerprint, folds, seeds, EM settings,
...) is saved as ``OUT/config.json``; :func:`prepare_out_dir` refuses to put results of a
different configuration into the same directory unless ``force=True`` (then the files of the
old configuration are recomputed as their tasks come up, never mixed in).

Determinism: every task seeds its own model from the configuration's ``seed``
(:func:`seed_everything`); folds come from :func:`ldhmm.data.kfold_indices` with the same
seed; torch runs single-threaded in every process (``jobs=1`` included), so ``jobs=J`` gives
the same numbers as ``jobs=1``.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

__all__ = [
    "ConfigMismatchError",
    "config_hash",
    "default_out",
    "prepare_out_dir",
    "task_path",
    "load_task",
    "run_tasks",
    "atomic_write_json",
    "atomic_write_text",
    "single_thread",
    "seed_everything",
    "timed",
    "parse_states",
]


def default_out(command: str, db_name: str) -> Path:
    """The output directory of a command when ``--out`` is not given: ``results/COMMAND-DATA``."""
    return Path("results") / f"{command}-{db_name or 'data'}"


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


def atomic_write_text(path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_json(path, obj) -> None:
    """JSON (NaN written as ``NaN``, read back by :func:`json.load`) written atomically."""
    atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=True, default=_json_default) + "\n")


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
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {str(out)!r} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
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


def _init_worker(payload) -> None:
    global _PAYLOAD
    _PAYLOAD = payload
    single_thread()


def single_thread() -> int:
    """Make torch single-threaded (see the module docstring); returns the thread count before."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    return before


def _call_in_worker(fn, task):
    return _guarded(fn, task, _PAYLOAD)


def _guarded(fn, task, payload):
    try:
        return fn(task, payload)
    except Exception as err:  # reported, not saved: the task is retried by the next run
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
    """
    if int(jobs) < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    keys = [t["key"] for t in tasks]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate task keys")
    done: dict[str, dict] = {}
    todo = []
    for t in tasks:
        rec = load_task(out, t["key"], digest)
        if rec is not None:
            rec["resumed"] = True
            done[t["key"]] = rec
        else:
            todo.append(t)
    errors: list[str] = []
    bar = tqdm(
        total=len(tasks),
        initial=len(done),
        desc=desc,
        disable=quiet,
        unit="task",
        dynamic_ncols=True,
        file=sys.stderr,
    )

    def finish(task, result):
        if "_error" in result:
            errors.append(f"{task['key']}: {result['_error']}")
        else:
            record = {k: v for k, v in task.items() if k != "key"}
            record.update(result)
            record["config_hash"] = digest
            atomic_write_json(task_path(out, task["key"]), record)
            record["resumed"] = False
            done[task["key"]] = record
        bar.update(1)

    try:
        if todo and int(jobs) == 1:
            before = single_thread()
            try:
                for t in todo:
                    bar.set_postfix_str(t["key"], refresh=False)
                    finish(t, _guarded(fn, t, payload))
            finally:
                torch.set_num_threads(before)
        elif todo:
            ctx = mp.get_context("spawn")  # fork after torch's threads start can deadlock
            with ProcessPoolExecutor(
                max_workers=min(int(jobs), len(todo)),
                mp_context=ctx,
                initializer=_init_worker,
                initargs=(payload,),
            ) as pool:
                futures = {pool.submit(_call_in_worker, fn, t): t for t in todo}
                try:
                    for fut in as_completed(futures):
                        finish(futures[fut], fut.result())
                except BrokenProcessPool:
                    raise RuntimeError(
                        f"a worker process died (interrupted, killed or out of memory); the {len(done)} "
                        f"finished tasks are saved under {out}: run the same command again to resume"
                    ) from None
                except BaseException:
                    for fut in futures:
                        fut.cancel()
                    raise
    finally:
        bar.close()
    return [done[k] for k in keys if k in done], errors


# ------------------------------------------------------------------------ inside a task
def timed(fn, *args, **kwargs):
    """``(result, seconds)`` of a call (wall clock, ``time.perf_counter``)."""
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - t0


def seed_everything(seed: int) -> None:
    """Seed numpy's and torch's global generators (models seed themselves too)."""
    random.seed(int(seed))
    np.random.seed(int(seed) % (2**32))
    torch.manual_seed(int(seed))


# ------------------------------------------------------------------------ the grid
def parse_states(values) -> list[int]:
    """K values from ``--states``: integers or ranges ``2..6`` / ``2-6``; sorted, unique."""
    out = set()
    for v in values:
        for part in str(v).replace(",", " ").split():
            for sep in ("..", "-", ":"):
                if sep in part:
                    a, b = part.split(sep, 1)
                    try:
                        lo, hi = int(a), int(b)
                    except ValueError:
                        raise ValueError(
                            f"--states: {part!r} is not an integer or a range like 2..6"
                        ) from None
                    if lo > hi:
                        raise ValueError(f"--states: empty range {part!r}")
                    out.update(range(lo, hi + 1))
                    break
            else:
                try:
                    out.add(int(part))
                except ValueError:
                    raise ValueError(f"--states: {part!r} is not an integer or a range like 2..6") from None
    if not out:
        raise ValueError("--states: give at least one K")
    if min(out) < 1:
        raise ValueError(f"--states: K must be >= 1, got {min(out)}")
    return sorted(out)
