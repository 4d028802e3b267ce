"""Loaders for the three public UCI data sets the LDHMM paper uses.

The files are read from a data directory: the ``data_dir`` argument, else the environment
variable ``LDHMM_DATA`` (:func:`resolve_data_dir`). ``ldhmm data fetch NAME --data-dir DIR``
downloads them. The formats, in short:

* MSNBC (``msnbc990928.seq`` or ``msnbc990928.seq.gz``): 989,818 users, one line each, page
  category codes 1..17. Symbol ``k - 1`` is code ``k``; the vocabulary is the 17 category
  names of the header, in header order.
* Entree Chicago (``entree/session/session.*`` or the original ``entree_data.tar.gz``):
  50,672 sessions; the sequence of a session is its navigation operations.
* Splice junctions (``splice.data``): 3,190 DNA sequences of 60 bases, classes EI, IE, N.

Every loader returns a :class:`~ldhmm.data.database.SequenceDatabase` and raises a
:class:`~ldhmm.data.database.DataFormatError` (file and line) on a malformed file;
nothing partly loaded is ever returned. Blank lines are skipped everywhere (they carry no
record); line numbers in errors are physical 1-based line numbers.
"""

from __future__ import annotations

import gzip
import os
import re
import tarfile
import warnings
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import numpy as np

from .database import DataFormatError, SequenceDatabase, _IntBuffer, _SequenceBuffer

__all__ = [
    "DATA_ENV_VAR",
    "MSNBC_FILE",
    "SPLICE_FILE",
    "ENTREE_ARCHIVE",
    "ENTREE_SESSION_DIR",
    "ENTREE_CODEBOOK",
    "SPLICE_CLASSES",
    "PAPER_SUBSETS",
    "PAPER_SUBSET_COUNTS",
    "DATASET_NAMES",
    "resolve_data_dir",
    "read_msnbc",
    "read_splice",
    "read_entree_sessions",
    "load_msnbc",
    "load_entree",
    "load_splice",
    "load_dataset",
    "load_paper_subset",
]

DATA_ENV_VAR = "LDHMM_DATA"
MSNBC_FILE = "msnbc990928.seq"
SPLICE_FILE = "splice.data"
ENTREE_ARCHIVE = "entree_data.tar.gz"
ENTREE_SESSION_DIR = os.path.join("entree", "session")
DATASET_NAMES = ("msnbc", "entree", "splice")

#: The Entree navigation codebook: letter -> operation name (names carry no white space so
#: that they can be written to the text format). O ("closer") was unused in production and
#: T ("change cuisine") never occurs in the logs either.
ENTREE_CODEBOOK = {
    "L": "browse",
    "M": "cheaper",
    "N": "nicer",
    "O": "closer",
    "P": "more-traditional",
    "Q": "more-creative",
    "R": "more-lively",
    "S": "quieter",
    "T": "change-cuisine",
}
#: The letters that occur in the UCI logs, in codebook order (the default Entree alphabet).
ENTREE_OBSERVED_LETTERS = "LMNPQRS"

SPLICE_CLASSES = ("EI", "IE", "N")
SPLICE_BASES = ("A", "C", "G", "T")
#: IUPAC nucleotide ambiguity codes -> compatible bases. The UCI file holds D, N, R, S.
IUPAC_AMBIGUITY = {
    "N": "ACGT",
    "D": "AGT",
    "R": "AG",
    "S": "CG",
    "Y": "CT",
    "K": "GT",
    "M": "AC",
    "W": "AT",
    "B": "CGT",
    "H": "ACT",
    "V": "ACG",
}

#: The paper's length filters (both bounds inclusive).
PAPER_SUBSETS = {"entree": (20, 59), "msnbc": (20, 100)}
#: The sizes the paper reports for those subsets (our filters give exactly these).
PAPER_SUBSET_COUNTS = {"entree": 422, "msnbc": 31071}


# ---------------------------------------------------------------------------- data dir
def resolve_data_dir(data_dir=None, default=None, must_exist: bool = True) -> Path:
    """The data directory: ``data_dir`` when given, else the environment variable
    ``LDHMM_DATA``, else ``default``.

    Every command and function that takes a data directory resolves it here.

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        Used when given (None and ``""`` are not given).
    default : str or os.PathLike, optional
        Used when neither ``data_dir`` nor ``LDHMM_DATA`` is set; without a default that is an
        error.
    must_exist : bool
        The directory must exist (to read from it; a download target is created later).

    Returns
    -------
    Path
        With ``~`` expanded.

    Raises
    ------
    FileNotFoundError
        When none of the three is set, or (``must_exist``) the directory does not exist; the
        message says how to set it or fetch the data.
    """
    source = "data_dir argument"
    if data_dir is None or str(data_dir) == "":
        data_dir = os.environ.get(DATA_ENV_VAR)
        source = f"environment variable {DATA_ENV_VAR}"
    if not data_dir:
        data_dir, source = default, "default"
    if data_dir is None:
        raise FileNotFoundError(
            f"no data directory: pass data_dir= (or --data-dir DIR), or set the environment "
            f"variable {DATA_ENV_VAR}=DIR; download a data set with `ldhmm data fetch NAME "
            f"--data-dir DIR` (NAME is one of {', '.join(DATASET_NAMES)})"
        )
    path = Path(data_dir).expanduser()
    if must_exist and not path.is_dir():
        raise FileNotFoundError(
            f"data directory {str(path)!r} (from the {source}) does not exist; create it and run "
            f"`ldhmm data fetch NAME --data-dir {path}`"
        )
    return path


def _missing(name: str, directory: Path, wanted: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"{wanted} not found in {str(directory)!r}; run `ldhmm data fetch {name} --data-dir {directory}`"
    )


# ---------------------------------------------------------------------------- MSNBC
def _open_maybe_gzip(path: Path) -> IO[bytes]:
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")
    return open(path, "rb")


def read_msnbc(path, chunk_bytes: int = 1 << 20) -> SequenceDatabase:
    """Parse an MSNBC ``.seq`` file (plain or gzip-compressed, detected by its magic bytes).

    The header lists the category names on the first non-blank line that does not start
    with ``%``; the body starts after the line ``% Sequences:``. Each body line is one user:
    white-space separated codes ``1..V``; symbol ``k - 1`` is code ``k``.

    The body is parsed in chunks of about ``chunk_bytes`` bytes straight into growing numpy
    buffers (no per-token Python objects beyond one chunk).

    Parameters
    ----------
    path : str or os.PathLike
    chunk_bytes : int
        Approximate size of one parsing chunk.

    Returns
    -------
    SequenceDatabase
        ``tokens`` int8 of shape (T,), no labels, no ids (row m is body line m + 1).

    Raises
    ------
    DataFormatError
        Missing header, non-numeric or out-of-range code, truncated or corrupt gzip, no
        sequences.
    """
    path = Path(path)
    sequences = _SequenceBuffer(np.int8, capacity=1 << 16, sequences=1 << 14)
    vocabulary: list[str] | None = None
    lineno = 0
    try:
        with _open_maybe_gzip(path) as f:
            # header
            while True:
                raw = f.readline()
                if not raw:
                    if lineno == 0:
                        raise DataFormatError(path, None, "empty file")
                    raise DataFormatError(path, lineno, "no '% Sequences:' line; not an MSNBC .seq file")
                lineno += 1
                text = _decode(raw, path, lineno).strip()
                if text.startswith("%"):
                    if text.lower().startswith("% sequences"):
                        break
                    continue
                if text:
                    if vocabulary is not None:
                        raise DataFormatError(
                            path, lineno, "unexpected line in the header (a second vocabulary line?)"
                        )
                    vocabulary = text.split()
            if vocabulary is None:
                raise DataFormatError(path, lineno, "the header has no line of category names")
            n_symbols = len(vocabulary)
            if len(set(vocabulary)) != n_symbols:
                raise DataFormatError(path, lineno, "the category names in the header are not distinct")
            if n_symbols > 127:
                raise DataFormatError(path, lineno, f"{n_symbols} categories; at most 127 supported")
            # body
            while True:
                lines = f.readlines(chunk_bytes)
                if not lines:
                    break
                first_line = lineno + 1
                lineno += len(lines)
                counts = np.fromiter((len(line.split()) for line in lines), dtype=np.int64, count=len(lines))
                codes = _parse_codes(b" ".join(lines), int(counts.sum()))
                if codes is None or (codes.size and (codes.min() < 1 or codes.max() > n_symbols)):
                    _raise_bad_msnbc_line(path, lines, first_line, n_symbols)
                sequences.tokens.extend((codes - 1).astype(np.int8))
                sequences.lengths.extend(counts[counts > 0])  # blank lines carry no user
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise DataFormatError(path, lineno + 1, f"truncated or corrupt gzip data ({err})") from None
    except OSError as err:
        if isinstance(err, FileNotFoundError):
            raise
        raise DataFormatError(path, lineno + 1, f"cannot read the file ({err})") from None
    if len(sequences) == 0:
        raise DataFormatError(path, lineno, "no sequences after the header")
    return sequences.database(vocabulary, name="msnbc", meta={"source": str(path)})


def _decode(raw: bytes, path, lineno: int) -> str:
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise DataFormatError(path, lineno, "non-ASCII bytes") from None


def _parse_codes(chunk: bytes, expected: int) -> np.ndarray | None:
    """Parse white-space separated decimal integers; None if anything is not one."""
    if expected == 0:
        return np.zeros(0, dtype=np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            values = np.fromstring(chunk, dtype=np.int64, sep=" ")
        except (ValueError, DeprecationWarning):
            return None
    if values.size != expected:
        return None
    return values


def _raise_bad_msnbc_line(path, lines: list[bytes], first_line: int, n_symbols: int):
    for i, raw in enumerate(lines):
        for tok in raw.split():
            if not tok.isdigit():
                shown = tok.decode("ascii", "backslashreplace")
                raise DataFormatError(
                    path, first_line + i, f"token {shown!r} is not a category code 1..{n_symbols}"
                )
            value = int(tok)
            if not 1 <= value <= n_symbols:
                raise DataFormatError(
                    path, first_line + i, f"category code {value} is outside 1..{n_symbols}"
                )
    # Should not happen: the fast parser rejected something the slow one accepts.
    raise DataFormatError(path, first_line, "could not parse this block of lines")


def load_msnbc(
    data_dir=None, min_length: int | None = None, max_length: int | None = None
) -> SequenceDatabase:
    """Load the MSNBC.com anonymous web data (UCI 133).

    Reads ``msnbc990928.seq`` or ``msnbc990928.seq.gz`` from the data directory.

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        See :func:`resolve_data_dir`.
    min_length, max_length : int, optional
        Keep sequences whose length lies in ``[min_length, max_length]``.

    Returns
    -------
    SequenceDatabase
        989,818 sequences, 4,698,794 tokens, V = 17 (frontpage, news, ..., travel; header
        order, symbol ``k - 1`` = code ``k``) before filtering.
    """
    directory = resolve_data_dir(data_dir)
    for candidate in (MSNBC_FILE, MSNBC_FILE + ".gz"):
        path = directory / candidate
        if path.is_file():
            break
    else:
        raise _missing("msnbc", directory, f"{MSNBC_FILE} (or {MSNBC_FILE}.gz)")
    return read_msnbc(path).filter_length(min_length, max_length)


# ---------------------------------------------------------------------------- Entree
_ENTRY_RE = re.compile(r"^(0|\d+[A-H])$")
_STEP_RE = re.compile(r"^\d+([A-Z])$")
_END_RE = re.compile(r"^-?\d+$")


def _entree_alphabet(alphabet: str) -> str:
    if alphabet == "observed":
        return ENTREE_OBSERVED_LETTERS
    if alphabet == "codebook":
        return "".join(ENTREE_CODEBOOK)
    raise ValueError(f"alphabet must be 'observed' or 'codebook', got {alphabet!r}")


def read_entree_sessions(
    sources: Iterable[tuple[str, IO[bytes]]], alphabet: str = "observed", display_path=None
) -> SequenceDatabase:
    """Parse Entree session logs.

    Parameters
    ----------
    sources : iterable of (label, binary file object)
        ``label`` names the file in ids (``"session.1996-Q3"``) and errors.
    alphabet : {"observed", "codebook"}
        See :func:`load_entree`.
    display_path : str, optional
        Prefix for file names in error messages (e.g. the archive path).

    Returns
    -------
    SequenceDatabase with ids ``"FILE:LINE"``.
    """
    letters = _entree_alphabet(alphabet)
    code_of = {letter: k for k, letter in enumerate(letters)}
    vocabulary = [ENTREE_CODEBOOK[letter] for letter in letters]
    sequences = _SequenceBuffer(np.int8)
    ids: list[str] = []
    n_files = 0
    skipped_empty = 0
    for label, handle in sources:
        n_files += 1
        where = label if display_path is None else f"{display_path}:{label}"
        lineno = 0
        for lineno, raw in enumerate(handle, start=1):
            line = _decode(raw, where, lineno).rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) < 4:
                raise DataFormatError(
                    where,
                    lineno,
                    "expected tab-separated date, host, entry point, steps..., end point; "
                    f"found {len(fields)} field(s)",
                )
            entry, steps, end = fields[2].strip(), fields[3:-1], fields[-1].strip()
            if not _ENTRY_RE.match(entry):
                raise DataFormatError(
                    where, lineno, f"entry point {entry!r} is neither 0 nor nnnX with X in A..H"
                )
            if not _END_RE.match(end):
                raise DataFormatError(where, lineno, f"end point {end!r} is not a restaurant id or -1")
            codes = []
            for step in steps:
                step = step.strip()
                m = _STEP_RE.match(step)
                if m is None:
                    raise DataFormatError(
                        where, lineno, f"navigation step {step!r} is not nnnX with X in L..T"
                    )
                code = code_of.get(m.group(1))
                if code is None:
                    hint = " (load with alphabet='codebook' to keep O and T)" if m.group(1) in "OT" else ""
                    raise DataFormatError(
                        where,
                        lineno,
                        f"navigation letter {m.group(1)!r} is not in the alphabet {letters}{hint}",
                    )
                codes.append(code)
            if not codes:
                skipped_empty += 1
                continue
            sequences.add(codes)
            ids.append(f"{label}:{lineno}")
    if n_files == 0:
        raise FileNotFoundError("no Entree session files (session.*) found")
    if len(sequences) == 0:
        raise DataFormatError(display_path, None, "no sessions with navigation steps")
    return sequences.database(
        vocabulary,
        ids=ids,
        name="entree",
        meta={"alphabet": letters, "files": n_files, "skipped_sessions_without_steps": skipped_empty},
    )


def _entree_from_directory(session_dir: Path, alphabet: str) -> SequenceDatabase:
    files = sorted(p for p in session_dir.glob("session.*") if p.is_file())
    if not files:
        raise FileNotFoundError(f"no session.* files in {str(session_dir)!r}")

    def sources():
        for p in files:
            with open(p, "rb") as handle:
                yield p.name, handle

    try:
        db = read_entree_sessions(sources(), alphabet, display_path=None)
    except DataFormatError as err:
        # file names in read_entree_sessions are bare; give the full path
        where = session_dir if err.path is None else session_dir / err.path
        raise DataFormatError(where, err.line, err.problem) from None
    db.meta["source"] = str(session_dir)
    return db


def _entree_from_archive(archive: Path, alphabet: str) -> SequenceDatabase:
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = sorted(
                (
                    m
                    for m in tar.getmembers()
                    if m.isfile() and re.search(r"(^|/)session/session\.[^/]+$", m.name)
                ),
                key=lambda m: m.name,
            )
            if not members:
                raise DataFormatError(archive, None, "the archive holds no entree/session/session.* files")

            def sources():
                for m in members:
                    yield os.path.basename(m.name), tar.extractfile(m)

            db = read_entree_sessions(sources(), alphabet, display_path=str(archive))
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise DataFormatError(archive, None, f"truncated or corrupt archive ({err})") from None
    db.meta["source"] = str(archive)
    return db


def load_entree(
    data_dir=None, min_length: int | None = None, max_length: int | None = None, alphabet: str = "observed"
) -> SequenceDatabase:
    """Load the Entree Chicago recommendation sessions (UCI 123).

    Reads ``entree/session/session.*`` under the data directory (files in name order, i.e.
    chronological), or, when that directory is absent, the same files straight out of the
    original ``entree_data.tar.gz``.

    Each line is a session: ``date<TAB>host<TAB>entry point<TAB>step ...<TAB>end point``.
    The sequence is the navigation letters (the X of each ``nnnX`` step) in order. **Entry
    and end points are not navigation operations and are dropped**: the entry point is a
    restaurant (of any city, ``nnnA``..``nnnH``) or ``0`` for a query form, and the end point is
    a bare restaurant id or ``-1``; both are only checked for their format. Restaurant ids of
    the steps are dropped too. A session without steps (none in the UCI files) is skipped and
    counted in ``meta["skipped_sessions_without_steps"]``.

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        See :func:`resolve_data_dir`.
    min_length, max_length : int, optional
        Keep sessions whose number of steps lies in ``[min_length, max_length]``.
    alphabet : {"observed", "codebook"}
        ``"observed"`` (default): the 7 letters that occur in the logs, L M N P Q R S, in
        codebook order: browse, cheaper, nicer, more-traditional, more-creative, more-lively,
        quieter. These are the first 7 rows of the paper's Table 2 (which lists L..T without
        O), so symbol codes match the paper's table, and no model gets symbols that never
        occur (a learned Dirichlet prior on a never-seen symbol runs off to zero). A log with
        an O or T step is then an error that says to use ``"codebook"``.
        ``"codebook"``: all 9 letters L..T (O closer and T change-cuisine included, unused).

    Returns
    -------
    SequenceDatabase
        50,672 sessions before filtering (422 with 20..59 steps), ids ``"session.YYYY-Qn:LINE"``.
    """
    directory = resolve_data_dir(data_dir)
    _entree_alphabet(alphabet)
    session_dir = directory / ENTREE_SESSION_DIR
    archive = directory / ENTREE_ARCHIVE
    if session_dir.is_dir():
        db = _entree_from_directory(session_dir, alphabet)
    elif archive.is_file():
        db = _entree_from_archive(archive, alphabet)
    else:
        raise _missing("entree", directory, f"{ENTREE_SESSION_DIR}/ or {ENTREE_ARCHIVE}")
    return db.filter_length(min_length, max_length)


# ---------------------------------------------------------------------------- splice
def read_splice(path, ambiguous: str = "random", seed: int = 0) -> SequenceDatabase:
    """Parse a ``splice.data`` file: ``class, instance name, sequence`` per line.

    See :func:`load_splice` for ``ambiguous`` and ``seed``.
    """
    if ambiguous not in ("random", "drop", "symbol"):
        raise ValueError(f"ambiguous must be 'random', 'drop' or 'symbol', got {ambiguous!r}")
    path = Path(path)
    class_code = {c: k for k, c in enumerate(SPLICE_CLASSES)}
    vocabulary = list(SPLICE_BASES) + (["N"] if ambiguous == "symbol" else [])
    base_code = {b: k for k, b in enumerate(SPLICE_BASES)}
    rng = np.random.default_rng(seed)
    sequences = _SequenceBuffer(np.int8, capacity=1 << 18)
    labels = _IntBuffer(np.int64)
    ids: list[str] = []
    n_ambiguous_rows = n_ambiguous_bases = 0
    lineno = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            line = _decode(raw, path, lineno).strip()
            if not line:
                continue
            fields = [x.strip() for x in line.split(",")]
            if len(fields) != 3:
                raise DataFormatError(
                    path,
                    lineno,
                    f"expected 3 comma-separated fields (class, name, sequence), found {len(fields)}",
                )
            cls, name, seq = fields
            if cls not in class_code:
                raise DataFormatError(
                    path, lineno, f"class {cls!r} is not one of {', '.join(SPLICE_CLASSES)}"
                )
            if not name:
                raise DataFormatError(path, lineno, "empty instance name")
            seq = seq.upper()
            if not seq:
                raise DataFormatError(path, lineno, "empty sequence")
            codes = np.empty(len(seq), dtype=np.int8)
            ambiguous_here = 0
            for i, ch in enumerate(seq):
                code = base_code.get(ch)
                if code is None:
                    compatible = IUPAC_AMBIGUITY.get(ch)
                    if compatible is None:
                        raise DataFormatError(
                            path, lineno, f"{ch!r} is not a base (A, C, G, T) or an IUPAC ambiguity code"
                        )
                    ambiguous_here += 1
                    if ambiguous == "random":
                        code = base_code[compatible[rng.integers(len(compatible))]]
                    else:
                        code = 4  # 'symbol'; 'drop' discards the row below
                codes[i] = code
            if ambiguous_here:
                n_ambiguous_rows += 1
                n_ambiguous_bases += ambiguous_here
                if ambiguous == "drop":
                    continue
            sequences.add(codes)
            labels.append(class_code[cls])
            ids.append(name)
    if lineno == 0:
        raise DataFormatError(path, None, "empty file")
    if len(sequences) == 0:
        raise DataFormatError(path, None, "no sequences")
    return sequences.database(
        vocabulary,
        labels=labels.array(),
        label_names=list(SPLICE_CLASSES),
        ids=ids,
        name="splice",
        meta={
            "source": str(path),
            "ambiguous": ambiguous,
            "seed": seed,
            "rows_with_ambiguity_codes": n_ambiguous_rows,
            "ambiguity_codes": n_ambiguous_bases,
        },
    )


def load_splice(
    data_dir=None,
    ambiguous: str = "random",
    seed: int = 0,
    min_length: int | None = None,
    max_length: int | None = None,
) -> SequenceDatabase:
    """Load the primate splice-junction gene sequences (UCI 69) from ``splice.data``.

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        See :func:`resolve_data_dir`.
    ambiguous : {"random", "drop", "symbol"}
        What to do with the IUPAC ambiguity codes (D = A/G/T, N = any, R = A/G, S = C/G; 60
        of 191,400 letters, in 15 rows, 41 of them in ``HUMALPI1-DONOR-42``):

        * ``"random"`` (default): each is replaced by a base drawn uniformly from the bases it
          stands for, with ``numpy.random.default_rng(seed)``, in file order. It keeps all
          3,190 sequences (the paper's counts) and V = 4 (A C G T), and the effect on any
          statistic is negligible.
        * ``"drop"``: rows that hold any ambiguity code are left out (3,175 remain).
        * ``"symbol"``: every ambiguity code becomes a 5th symbol named ``N`` (V = 5).
    seed : int
        Seed of the ``"random"`` replacement.
    min_length, max_length : int, optional
        Length filter (every sequence has 60 bases).

    Returns
    -------
    SequenceDatabase
        Labels in ``label_names = ["EI", "IE", "N"]`` (767, 768, 1655), ids = instance names
        (12 names occur more than once in the file).
    """
    directory = resolve_data_dir(data_dir)
    path = directory / SPLICE_FILE
    if not path.is_file():
        raise _missing("splice", directory, SPLICE_FILE)
    return read_splice(path, ambiguous=ambiguous, seed=seed).filter_length(min_length, max_length)


# ---------------------------------------------------------------------------- dispatch
_LOADERS = {"msnbc": load_msnbc, "entree": load_entree, "splice": load_splice}


def load_dataset(name: str, data_dir=None, **options) -> SequenceDatabase:
    """Load a UCI data set by name: ``"msnbc"``, ``"entree"`` or ``"splice"``.

    ``options`` go to the loader: ``min_length`` and ``max_length`` for all, ``alphabet``
    for Entree, ``ambiguous`` and ``seed`` for splice.
    """
    key = str(name).lower()
    if key not in _LOADERS:
        raise ValueError(f"unknown data set {name!r}; known: {', '.join(DATASET_NAMES)}")
    return _LOADERS[key](data_dir, **options)


def load_paper_subset(name: str, data_dir=None, n: int | None = None, seed: int = 0) -> SequenceDatabase:
    """The length-filtered subset the paper uses, optionally a seeded random sample of it.

    Entree: sessions with 20..59 steps (422, as in the paper). MSNBC: users with 20..100
    page views (31,071, as in the paper).

    Parameters
    ----------
    name : {"entree", "msnbc"}
    data_dir : str or os.PathLike, optional
    n : int, optional
        If given, a random sample of ``n`` of the subset's sequences (kept in file order).
    seed : int
        Seed of that sample.
    """
    key = str(name).lower()
    if key not in PAPER_SUBSETS:
        raise ValueError(
            f"the paper uses length-filtered subsets of {', '.join(PAPER_SUBSETS)} only, not {name!r}"
        )
    lo, hi = PAPER_SUBSETS[key]
    db = load_dataset(key, data_dir, min_length=lo, max_length=hi)
    db.meta["paper_subset"] = (lo, hi)
    if n is not None:
        db = db.sample(n, seed=seed)
        db.meta["sample"] = {"n": int(n), "seed": seed}
    return db
