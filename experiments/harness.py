"""The comparison harness: model registry, data selection, and a resumable task runner.

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

Determinism: every task seeds its own model from the configuration's ``seed``; folds come
from :func:`experiments.data.kfold_indices` with the same seed; torch runs single-threaded in
every process (``jobs=1`` included), so ``jobs=J`` gives the same numbers as ``jobs=1``.

Model registry
--------------
:data:`MODELS` maps the harness names ``LDHMM-FF``, ``LDHMM-PF``, ``HMM``, ``LDA``, ``VBHMM``,
``HMMV`` to factories ``factory(K, n_symbols, seed, **options)``; :func:`make_model` adds
the EM settings ``max_iter`` and ``tol`` (passed to every model that iterates EM to
convergence; LDA keeps gensim's own schedule, ``passes=10``, because its ``max_iter`` means
per-document inference iterations, not EM iterations).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

__all__ = [
    "MODEL_NAMES",
    "LDHMM_NAMES",
    "IS_MODELS",
    "MODELS",
    "ConfigMismatchError",
    "make_model",
    "resolve_models",
    "model_score_kind",
    "synthetic_database",
    "labelled_synthetic_database",
    "select_database",
    "data_fingerprint",
    "config_hash",
    "prepare_out_dir",
    "run_tasks",
    "atomic_write_json",
    "atomic_write_text",
    "mean_std",
]

#: The model names of the harness, in the order tables list them.
MODEL_NAMES = ("LDHMM-FF", "LDHMM-PF", "HMM", "LDA", "VBHMM", "HMMV")
#: The LDHMM variants (compared against every other model in the t-tests).
LDHMM_NAMES = ("LDHMM-FF", "LDHMM-PF")
#: Models with ``log_marginal_is`` (importance-sampled log p(x)).
IS_MODELS = ("LDHMM-FF", "LDHMM-PF", "VBHMM", "HMMV")
#: Models whose EM ``max_iter``/``tol`` the harness sets (LDA: gensim's schedule).
_EM_MODELS = ("LDHMM-FF", "LDHMM-PF", "HMM", "VBHMM", "HMMV")


# ------------------------------------------------------------------------ registry
def _ldhmm_ff(K, n_symbols, seed, **options):
    from models import LDHMM

    return LDHMM(K, n_symbols=n_symbols, guide="ff", seed=seed, **options)


def _ldhmm_pf(K, n_symbols, seed, **options):
    from models import LDHMM

    return LDHMM(K, n_symbols=n_symbols, guide="pf", seed=seed, **options)


def _hmm(K, n_symbols, seed, **options):
    from baselines.hmm import HMM

    return HMM(K, n_symbols=n_symbols, seed=seed, **options)


def _lda(K, n_symbols, seed, **options):
    from baselines.lda import LDA

    return LDA(K, n_symbols=n_symbols, seed=seed, **options)


def _vbhmm(K, n_symbols, seed, **options):
    from baselines.vbhmm import VBHMM

    return VBHMM(K, n_symbols=n_symbols, seed=seed, **options)


def _hmmv(K, n_symbols, seed, **options):
    from baselines.hmmv import HMMV

    return HMMV(K, n_symbols=n_symbols, seed=seed, **options)


#: name -> factory(K, n_symbols, seed, **options)
MODELS: dict[str, Callable] = {
    "LDHMM-FF": _ldhmm_ff,
    "LDHMM-PF": _ldhmm_pf,
    "HMM": _hmm,
    "LDA": _lda,
    "VBHMM": _vbhmm,
    "HMMV": _hmmv,
}

_SCORE_KINDS = {"HMM": "exact"}  # every other model's score_samples is a lower bound


def model_score_kind(name: str) -> str:
    """``"exact"`` or ``"lower_bound"``: what ``score_samples`` of the named model returns."""
    return _SCORE_KINDS.get(name, "lower_bound")


def make_model(name: str, n_states: int, n_symbols: int, seed: int = 0, max_iter: int | None = None,
               tol: float | None = None, m_step: str | None = None, **options):
    """A fresh, unfitted model of the registry.

    Parameters
    ----------
    name : one of :data:`MODEL_NAMES`
    n_states : int
        K.
    n_symbols : int
        V of the whole database (so that every fold's model knows every symbol).
    seed : int
    max_iter, tol : optional
        EM settings for the models that iterate EM (not LDA); None keeps the model's default.
    m_step : {"collapsed", "paper"}, optional
        M-step of the LDHMM models (None: their default, ``"collapsed"``).
    **options
        Further constructor arguments of that model.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODEL_NAMES)}")
    if name in _EM_MODELS:
        if max_iter is not None:
            options.setdefault("max_iter", int(max_iter))
        if tol is not None:
            options.setdefault("tol", float(tol))
    if m_step is not None and name in LDHMM_NAMES:
        options.setdefault("m_step", m_step)
    return MODELS[name](int(n_states), int(n_symbols), int(seed), **options)


def resolve_models(names: Iterable[str] | None) -> list[str]:
    """``None``/``["all"]`` -> all models; otherwise the given names (checked, case-insensitive,
    duplicates dropped), in the registry order."""
    names = list(names or ["all"])
    if any(str(n).lower() == "all" for n in names):
        return list(MODEL_NAMES)
    upper = {m.upper(): m for m in MODEL_NAMES}
    chosen = []
    for n in names:
        key = str(n).upper()
        if key not in upper:
            raise ValueError(f"unknown model {n!r}; choose from all, {', '.join(MODEL_NAMES)}")
        chosen.append(upper[key])
    return [m for m in MODEL_NAMES if m in chosen]


# ------------------------------------------------------------------------ data
#: Hyper-parameters of the built-in synthetic LDHMM database (K = 3 states, V = 6 symbols).
SYNTHETIC_HYPERPARAMETERS = {
    "alpha_pi": [3.0, 1.5, 0.75],
    "alpha_A": [[6.0, 1.0, 0.5], [0.5, 6.0, 1.0], [1.0, 0.5, 6.0]],
    "beta": [
        [5.0, 3.0, 0.3, 0.3, 0.3, 0.3],
        [0.3, 0.3, 5.0, 3.0, 0.3, 0.3],
        [0.3, 0.3, 0.3, 0.3, 5.0, 3.0],
    ],
}


def synthetic_database(n_sequences: int = 300, min_length: int = 10, max_length: int = 40, seed: int = 0):
    """The built-in synthetic database: sequences drawn from an LDHMM with fixed
    hyper-parameters (:data:`SYNTHETIC_HYPERPARAMETERS`), seeded."""
    from models import LDHMM

    from .data import SequenceDatabase

    n_sequences = int(n_sequences)
    if n_sequences < 1:
        raise ValueError(f"the synthetic database needs at least 1 sequence, got {n_sequences}")
    if not 1 <= min_length <= max_length:
        raise ValueError(f"need 1 <= min_length <= max_length, got {min_length}, {max_length}")
    hp = SYNTHETIC_HYPERPARAMETERS
    model = LDHMM.from_hyperparameters(hp["alpha_pi"], hp["alpha_A"], hp["beta"])
    lengths = np.random.default_rng(seed).integers(min_length, max_length + 1, size=n_sequences)
    seqs = model.sample(n_sequences, lengths=lengths, seed=seed)
    V = len(hp["beta"][0])
    return SequenceDatabase.from_sequences(
        seqs, [f"s{v}" for v in range(V)], name="synthetic",
        meta={"source": "built-in synthetic LDHMM (experiments.harness.SYNTHETIC_HYPERPARAMETERS)",
              "seed": seed, "n_sequences": n_sequences},
    )


def labelled_synthetic_database(n_per_class: int = 100, min_length: int = 10, max_length: int = 30,
                                seed: int = 0):
    """A two-class synthetic database (classes ``A`` and ``B``) for ``ldhmm classify``: class A
    from the built-in hyper-parameters, class B with the transition prior's rows permuted
    (same symbols, different dynamics)."""
    from models import LDHMM

    from .data import SequenceDatabase

    hp = SYNTHETIC_HYPERPARAMETERS
    alpha_A_b = np.asarray(hp["alpha_A"])[:, [1, 2, 0]]
    rng = np.random.default_rng(seed)
    seqs, labels = [], []
    for c, a_A in enumerate((hp["alpha_A"], alpha_A_b)):
        model = LDHMM.from_hyperparameters(hp["alpha_pi"], a_A, hp["beta"])
        lengths = rng.integers(min_length, max_length + 1, size=int(n_per_class))
        seqs += model.sample(int(n_per_class), lengths=lengths, seed=seed + c)
        labels += [c] * int(n_per_class)
    V = len(hp["beta"][0])
    return SequenceDatabase.from_sequences(
        seqs, [f"s{v}" for v in range(V)], labels=labels, label_names=["A", "B"], name="synthetic-labelled",
        meta={"source": "built-in two-class synthetic LDHMM", "seed": seed},
    )


def _data_files_present(name: str, data_dir) -> bool:
    from .data import resolve_data_dir
    from .data.uci import ENTREE_ARCHIVE, ENTREE_SESSION_DIR

    try:
        d = resolve_data_dir(data_dir)
    except FileNotFoundError:
        return False
    if name == "entree":
        return (d / ENTREE_SESSION_DIR).is_dir() or (d / ENTREE_ARCHIVE).is_file()
    return False


def select_database(dataset: str | None = None, file=None, data_dir=None, n_sequences: int | None = None,
                    seed: int = 0, default: str = "entree", labelled: bool = False):
    """The database of an experiment command and a sentence saying which one it is.

    * ``file``: a user's file (any format ``ldhmm data info`` reads; a plain token file is
      read by :func:`experiments.data.load_text`).
    * ``dataset`` ``"entree"``/``"msnbc"``: the paper's length-filtered subset (Entree 20..59
      steps, 422 sessions; MSNBC 20..100 views, 31,071 users), a seeded sample of
      ``n_sequences`` of it when given. ``"splice"``: all 3,190 sequences.
      ``"synthetic"``: the built-in synthetic LDHMM database (``n_sequences``, default 300;
      two-class when ``labelled``).
    * neither: ``default`` when its files are in the data directory (``data_dir`` or
      ``$LDHMM_DATA``), else the synthetic database.

    Returns
    -------
    (SequenceDatabase, str)
    """
    from .data import PAPER_SUBSETS, load_dataset, load_paper_subset
    from .data.cli import load_path

    if file is not None and dataset is not None:
        raise ValueError("give either --dataset or --file, not both")
    if file is not None:
        db = load_path(file)
        if n_sequences:
            db = db.sample(min(int(n_sequences), len(db)), seed=seed)
        return db, f"user file {file} ({len(db)} sequences, {db.n_symbols} symbols)"
    fallback = ""
    if dataset is None:
        if _data_files_present(default, data_dir):
            dataset = default
        else:
            dataset = "synthetic"
            fallback = (f" ({default} files not found: pass --data-dir DIR or set LDHMM_DATA to use "
                        f"the real data)")
    key = str(dataset).lower()
    if key == "synthetic":
        if labelled:
            per = max(int(n_sequences) // 2, 1) if n_sequences else 100
            db = labelled_synthetic_database(per, seed=seed)
        else:
            db = synthetic_database(int(n_sequences) if n_sequences else 300, seed=seed)
        what = (f"built-in synthetic LDHMM database ({len(db)} sequences, K=3 true states, "
                f"V={db.n_symbols}, seed {seed}){fallback}")
        return db, what
    if key in PAPER_SUBSETS:
        n = int(n_sequences) if n_sequences else None
        db = load_paper_subset(key, data_dir, n=n, seed=seed)
        lo, hi = PAPER_SUBSETS[key]
        sample = f", a seeded sample (seed {seed}) of {n}" if n else ""
        return db, (f"{key} from the data directory: the paper's subset of sequences of length "
                    f"{lo}..{hi}{sample} ({len(db)} sequences, {db.n_symbols} symbols)")
    if key == "splice":
        db = load_dataset("splice", data_dir)
        if n_sequences:
            db = db.sample(min(int(n_sequences), len(db)), seed=seed)
        return db, f"splice from the data directory ({len(db)} sequences, {db.n_symbols} symbols)"
    raise ValueError(f"unknown data set {dataset!r}; known: entree, msnbc, splice, synthetic")


def data_fingerprint(db) -> str:
    """SHA-256 (first 16 hex digits) of a database's tokens, lengths and labels."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(db.tokens, dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(db.lengths, dtype=np.int64).tobytes())
    if db.labels is not None:
        h.update(np.ascontiguousarray(db.labels, dtype=np.int64).tobytes())
    h.update(str(db.n_symbols).encode())
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------ out dir
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
            keys = sorted(k for k in set(old_settings) | set(settings)
                          if _canonical(old_settings.get(k)) != _canonical(settings.get(k)))
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
    _single_thread()


def _single_thread() -> int:
    import torch

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


def run_tasks(tasks: list[dict], fn: Callable, payload, out, digest: str, jobs: int = 1,
              quiet: bool = False, desc: str = "tasks") -> tuple[list[dict], list[str]]:
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
    from tqdm.auto import tqdm

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
    bar = tqdm(total=len(tasks), initial=len(done), desc=desc, disable=quiet, unit="task",
               dynamic_ncols=True, file=sys.stderr)

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
            before = _single_thread()
            try:
                for t in todo:
                    bar.set_postfix_str(t["key"], refresh=False)
                    finish(t, _guarded(fn, t, payload))
            finally:
                import torch

                torch.set_num_threads(before)
        elif todo:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")  # fork after torch's threads start can deadlock
            with ProcessPoolExecutor(max_workers=min(int(jobs), len(todo)), mp_context=ctx,
                                     initializer=_init_worker, initargs=(payload,)) as pool:
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


# ------------------------------------------------------------------------ small helpers
def mean_std(values) -> tuple[float, float, int]:
    """Mean, sample standard deviation (ddof=1; 0 for one value) and count of the finite values."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return math.nan, math.nan, 0
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0, int(v.size)


def fmt_pm(mean: float, std: float, digits: int = 2) -> str:
    if not np.isfinite(mean):
        return "n/a"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def timed(fn, *args, **kwargs):
    """``(result, seconds)`` of a call (wall clock, ``time.perf_counter``)."""
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - t0


def seed_everything(seed: int) -> None:
    """Seed numpy's and torch's global generators (models seed themselves too)."""
    import random

    import torch

    random.seed(int(seed))
    np.random.seed(int(seed) % (2**32))
    torch.manual_seed(int(seed))


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
                        raise ValueError(f"--states: {part!r} is not an integer or a range like 2..6") from None
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
