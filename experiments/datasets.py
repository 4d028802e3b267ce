"""The databases of the experiment commands: the built-in synthetic ones, and which one a command uses.

:func:`click_log` is a synthetic click log (Zipf-distributed symbols over any vocabulary, each
sequence drawing mostly from its own few favourites): the heterogeneity study's
``favourites`` log and the data of ``benchmarks/vocabulary_size.py``.

:func:`select_database` turns the ``--dataset``/``--file``/``--data-dir`` arguments of an
experiment command into a :class:`ldhmm.data.SequenceDatabase` and a sentence saying which
database it is (printed, and recorded in the output's ``config.json``);
:func:`data_fingerprint` is the hash of the data a result file was computed from.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path

import numpy as np

from ..data import (
    PAPER_SUBSETS,
    SequenceDatabase,
    is_partitioned,
    load_dataset,
    load_paper_subset,
    load_path,
    read_msnbc,
    resolve_data_dir,
)
from ..data.storage import is_url
from ..data.uci import ENTREE_ARCHIVE, ENTREE_SESSION_DIR
from ..inference.cavi.emissions import emission_layout
from ..models import LDHMM
from ..models.fit_settings import DEFAULTS_VERSION
from ..models.memory import WORKER_PROCESS_BYTES, check_memory, fit_bytes, importance_sampling_bytes

__all__ = [
    "SYNTHETIC_HYPERPARAMETERS",
    "synthetic_database",
    "labelled_synthetic_database",
    "click_log",
    "msnbc_lengths",
    "select_database",
    "resolve_data",
    "data_files_present",
    "check_run_memory",
    "database_from_sequences",
    "data_fingerprint",
    "data_settings",
    "run_settings",
]

#: The names :func:`resolve_data` takes for the data sets of :func:`select_database`.
DATA_SET_NAMES = ("entree", "msnbc", "splice", "synthetic")

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
        seqs,
        [f"s{v}" for v in range(V)],
        name="synthetic",
        meta={
            "source": "built-in synthetic LDHMM (ldhmm.experiments.datasets.SYNTHETIC_HYPERPARAMETERS)",
            "seed": seed,
            "n_sequences": n_sequences,
        },
    )


def labelled_synthetic_database(
    n_per_class: int = 100, min_length: int = 10, max_length: int = 30, seed: int = 0
):
    """A two-class synthetic database (classes ``A`` and ``B``) for ``ldhmm classify``: class A
    from the built-in hyper-parameters, class B with the transition prior's rows permuted
    (same symbols, different dynamics)."""
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
        seqs,
        [f"s{v}" for v in range(V)],
        labels=labels,
        label_names=["A", "B"],
        name="synthetic-labelled",
        meta={"source": "built-in two-class synthetic LDHMM", "seed": seed},
    )


#: The MSNBC sequence file that :func:`msnbc_lengths` draws its lengths from.
MSNBC_FILE = "msnbc990928.seq.gz"


def msnbc_lengths(n: int, seed: int = 0, data_dir=None) -> np.ndarray:
    """``n`` sequence lengths drawn from the MSNBC length distribution (capped at 100): from
    the data directory's MSNBC file when it is there, else a geometric law with MSNBC's mean
    (4.7)."""
    rng = np.random.default_rng(seed)
    directory = resolve_data_dir(data_dir, default=".", must_exist=False)
    path = directory / MSNBC_FILE
    if path.is_file():
        pool = np.minimum(read_msnbc(path).lengths, 100)
    else:
        pool = np.minimum(rng.geometric(1 / 4.7, size=100_000), 100)
    return rng.choice(pool, size=n)


def click_log(
    n_sequences: int, n_symbols: int, seed: int = 0, data_dir=None, lengths: str = "msnbc"
) -> list[np.ndarray]:
    """A synthetic click log: Zipf(1.1) symbols, per-sequence favourites; lengths from MSNBC
    (``lengths="msnbc"``, :func:`msnbc_lengths`) or uniform on A..B (``"uniform:A:B"``)."""
    rng = np.random.default_rng(seed)
    if lengths == "msnbc":
        lengths = msnbc_lengths(n_sequences, seed, data_dir)
    else:
        _, low, high = lengths.split(":")
        lengths = rng.integers(int(low), int(high) + 1, size=n_sequences)
    ranks = np.arange(1, n_symbols + 1, dtype=np.float64)
    p = ranks**-1.1
    p /= p.sum()
    # All draws at once (a draw from p costs O(V) set-up: per sequence it would dominate at
    # V = 10^6): 3 favourites per sequence, then each token its own favourite (60%) or a draw.
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    favourites = rng.choice(n_symbols, size=(lengths.size, 3), p=p)
    draws = rng.choice(n_symbols, size=total, p=p)
    owner = np.repeat(np.arange(lengths.size), lengths)
    own = rng.random(total) < 0.6
    draws[own] = favourites[owner[own], rng.integers(0, 3, size=int(own.sum()))]
    return [a.astype(np.int64) for a in np.split(draws, np.cumsum(lengths)[:-1])]


def data_files_present(name: str, data_dir) -> bool:
    """Whether the files of data set ``name`` (Entree only, for now) are in the data directory."""
    try:
        d = resolve_data_dir(data_dir)
    except FileNotFoundError:
        return False
    if name == "entree":
        return (d / ENTREE_SESSION_DIR).is_dir() or (d / ENTREE_ARCHIVE).is_file()
    return False


def select_database(
    dataset: str | None = None,
    file=None,
    data_dir=None,
    n_sequences: int | None = None,
    seed: int = 0,
    default: str = "entree",
    labelled: bool = False,
    sequence_col: str | None = None,
    event_col: str | None = None,
    time_col: str | None = None,
):
    """The database of an experiment command and a sentence saying which one it is.

    * ``file``: a user's file (any format ``ldhmm data info`` reads; a plain token file is
      read by :func:`ldhmm.data.load_text`).
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
    if file is not None and dataset is not None:
        raise ValueError("give either --dataset or --file, not both")
    if file is not None:
        db = load_path(file, sequence_col=sequence_col, event_col=event_col, time_col=time_col)
        if n_sequences:
            db = db.sample(min(int(n_sequences), len(db)), seed=seed)
        return db, f"user file {file} ({len(db)} sequences, {db.n_symbols} symbols)"
    fallback = ""
    if dataset is None:
        if data_files_present(default, data_dir):
            dataset = default
        else:
            dataset = "synthetic"
            fallback = (
                f" ({default} files not found: pass --data-dir DIR or set LDHMM_DATA to use the real data)"
            )
    key = str(dataset).lower()
    if key == "synthetic":
        if labelled:
            per = max(int(n_sequences) // 2, 1) if n_sequences else 100
            db = labelled_synthetic_database(per, seed=seed)
        else:
            db = synthetic_database(int(n_sequences) if n_sequences else 300, seed=seed)
        what = (
            f"built-in synthetic LDHMM database ({len(db)} sequences, K=3 true states, "
            f"V={db.n_symbols}, seed {seed}){fallback}"
        )
        return db, what
    if key in PAPER_SUBSETS:
        n = int(n_sequences) if n_sequences else None
        db = load_paper_subset(key, data_dir, n=n, seed=seed)
        lo, hi = PAPER_SUBSETS[key]
        sample = f", a seeded sample (seed {seed}) of {n}" if n else ""
        return db, (
            f"{key} from the data directory: the paper's subset of sequences of length "
            f"{lo}..{hi}{sample} ({len(db)} sequences, {db.n_symbols} symbols)"
        )
    if key == "splice":
        db = load_dataset("splice", data_dir)
        if n_sequences:
            db = db.sample(min(int(n_sequences), len(db)), seed=seed)
        return db, f"splice from the data directory ({len(db)} sequences, {db.n_symbols} symbols)"
    raise ValueError(f"unknown data set {dataset!r}; known: entree, msnbc, splice, synthetic")


def database_from_sequences(sequences, name: str = "sequences") -> SequenceDatabase:
    """A database of integer sequences (symbols ``0..V-1``, V = largest symbol + 1).

    Raises
    ------
    ValueError
        A sequence that is not 1-D integers, a negative symbol, or a symbol id so far beyond
        the number of tokens that the ids are not a dense code (it would allocate a vocabulary
        of that size): the message names the id.
    """
    arrays = []
    for i, seq in enumerate(sequences):
        a = np.asarray(seq)
        if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
            raise ValueError(
                f"sequence {i}: expected a 1-D array of integer symbols, got {a.dtype} of shape {a.shape}"
            )
        if a.size and a.min() < 0:
            raise ValueError(f"sequence {i}: symbol {int(a.min())} is negative")
        arrays.append(a)
    if not arrays:
        raise ValueError("no sequences")
    n_tokens = sum(a.size for a in arrays)
    top = max((int(a.max()) for a in arrays if a.size), default=0)
    if top + 1 > 100 * n_tokens + 1000:
        raise ValueError(
            f"symbol id {top} is far beyond the {n_tokens} tokens of the data: encode the symbols "
            f"densely as 0..V-1 (or pass a SequenceDatabase with its vocabulary)"
        )
    return SequenceDatabase.from_sequences(arrays, [str(v) for v in range(top + 1)], name=name)


def resolve_data(
    data=None,
    data_dir=None,
    n_sequences: int | None = None,
    seed: int = 0,
    *,
    default: str = "entree",
    labelled: bool = False,
    sequence_col: str | None = None,
    event_col: str | None = None,
    time_col: str | None = None,
):
    """The database of an API call (:func:`ldhmm.compare`, :func:`ldhmm.classify`) and a
    sentence saying which one it is.

    Parameters
    ----------
    data : None, str, Path, SequenceDatabase, or list of 1-D int arrays
        None: as :func:`select_database` without a data set (``default`` or synthetic); an
        existing file, a partitioned data set's directory or an fsspec URL:
        :func:`ldhmm.data.load_path` (event logs with the column options); one
        of :data:`DATA_SET_NAMES`: that data set; a database or integer sequences as given
        (a seeded sample of ``n_sequences`` when given).

    Returns
    -------
    (SequenceDatabase, str)
    """
    columns = {"sequence_col": sequence_col, "event_col": event_col, "time_col": time_col}
    if data is None:
        return select_database(None, None, data_dir, n_sequences, seed, default=default, labelled=labelled)
    if isinstance(data, (str, os.PathLike)):
        path = Path(data)
        if path.is_file() or is_partitioned(str(data)):  # a file, or a partitioned directory or URL
            where = str(data) if is_url(str(data)) else path
            return select_database(None, where, data_dir, n_sequences, seed, **columns)
        if str(data).lower() in DATA_SET_NAMES:
            return select_database(str(data).lower(), None, data_dir, n_sequences, seed, labelled=labelled)
        raise FileNotFoundError(f"{data}: no such file (nor a data set name: {', '.join(DATA_SET_NAMES)})")
    if isinstance(data, SequenceDatabase):
        db, kind = data, "database"
    else:
        db, kind = database_from_sequences(data), "in-memory sequences"
    if n_sequences:
        db = db.sample(min(int(n_sequences), len(db)), seed=seed)
    return db, f"{kind} {db.name or 'data'!r} ({len(db)} sequences, {db.n_symbols} symbols)"


def data_settings(db, what: str, labelled: bool = False) -> dict:
    """The ``"data"`` entry of a run's settings (``config.json``, part of its hash); with the
    class names for a classification run."""
    out = {
        "name": db.name,
        "description": what,
        "n_sequences": len(db),
        "n_symbols": db.n_symbols,
        "fingerprint": data_fingerprint(db),
    }
    if labelled:
        out["label_names"] = db.label_names
    return out


def run_settings(
    db, what: str, states, folds, jobs, seed, max_iter, tol, m_step, restarts, labelled=False, **more
) -> dict:
    """The settings of a cross-validated run (``config.json``, part of its hash): the data
    (:func:`data_settings`), folds, seed and EM options (``effort`` from ``more``: None where each
    model's default holds), then the rest of ``more`` in its order, and the version of the models'
    defaults (:data:`ldhmm.models.fit_settings.DEFAULTS_VERSION`: a run directory of other
    defaults is not resumed); once the run's memory estimate is checked (:func:`check_run_memory`,
    with the most importance samples a test sequence may get: ``is_samples``, or
    ``is_max_samples`` where more are drawn)."""
    samples = max(int(more.get("is_samples") or 0), int(more.get("is_max_samples") or 0))
    check_run_memory(db, states, folds, jobs, samples)
    return {
        "data": data_settings(db, what, labelled=labelled),
        "folds": folds,
        "seed": seed,
        "max_iter": max_iter,
        "tol": tol,
        "m_step": m_step,
        "effort": more.pop("effort", None),
        "restarts": restarts,
        **more,
        "defaults": DEFAULTS_VERSION,
    }


def data_fingerprint(db) -> str:
    """SHA-256 (first 16 hex digits) of a database's tokens, lengths and labels."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(db.tokens, dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(db.lengths, dtype=np.int64).tobytes())
    if db.labels is not None:
        h.update(np.ascontiguousarray(db.labels, dtype=np.int64).tobytes())
    h.update(str(db.n_symbols).encode())
    return h.hexdigest()[:16]


def check_run_memory(db, states, folds: int, jobs: int, is_samples: int = 0) -> None:
    """Refuse a cross-validated run whose ``jobs`` simultaneous fits (the largest K, a training
    fold of the database) and their importance sampling on a test fold (``is_samples`` per
    sequence), each in a worker process of its own when ``jobs > 1``
    (:data:`ldhmm.models.memory.WORKER_PROCESS_BYTES`), would not fit in memory
    (:mod:`ldhmm.models.memory`)."""
    K = max(states)
    share = (folds - 1) / folds if folds > 1 else 1.0
    M = max(1, int(math.ceil(len(db) * share)))
    T = int(math.ceil(db.n_tokens * share))
    L = int(db.lengths.max()) if len(db) else 0
    # jobs > 1: each fit in a worker process of its own, which imports the libraries anew
    per_job = fit_bytes(K, db.n_symbols, M, T, L) + (WORKER_PROCESS_BYTES if int(jobs) > 1 else 0)
    if is_samples > 0:  # the fitted model's held-out log p(x), in the same worker after its fit
        M_test = max(1, int(math.ceil(len(db) / folds))) if folds > 1 else len(db)
        sparse = emission_layout(K, db.n_symbols) == "sparse"  # the models' default layout
        shortest = int(db.lengths.min()) if len(db) else 1
        per_job += importance_sampling_bytes(
            K, db.n_symbols, M_test, L, is_samples, sparse=sparse, min_length=shortest
        )
    need = int(jobs) * per_job
    sampled = f" and their importance sampling ({is_samples} samples)" if is_samples > 0 else ""
    check_memory(
        need,
        f"{jobs} simultaneous fit(s) (--jobs){sampled} of K = {K} states, V = {db.n_symbols} symbols on "
        f"{M} sequences",
        "fewer --jobs, fewer states (--states), fewer --is-samples or --n-sequences",
    )
