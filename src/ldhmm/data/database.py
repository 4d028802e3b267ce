"""A compact, immutable container for a database of integer-coded sequences.

A :class:`SequenceDatabase` stores M sequences over a vocabulary of V symbols as one flat
token array plus an offsets array (the CSR layout), so that a million short sequences cost a
few bytes per token instead of a Python object per sequence. Estimators take
``db.sequences`` (a list of 1-D ``int64`` arrays with symbols ``0..V-1``).

Text format
-----------
:meth:`SequenceDatabase.to_text` writes, and :meth:`SequenceDatabase.from_text` reads, a plain
UTF-8 text file::

    # ldhmm-sequences 1
    # name: splice
    # vocabulary: A C G T
    # label_names: EI IE N
    # columns: id label tokens
    ATRINS-DONOR-521 EI C C A G C T ...
    ATRINS-DONOR-905 EI A G A C C C ...

* The first line is the magic line ``# ldhmm-sequences 1``.
* Further header lines ``# key: value`` come before the first sequence line. ``vocabulary``
  (required) lists the symbol names in code order (symbol k is the k-th name);
  ``label_names`` lists class names in code order; ``columns`` says which leading columns
  each sequence line has before its tokens: ``tokens`` alone, or ``id``, ``label`` or both
  (in that order) followed by ``tokens``; ``name`` is free text. Unknown keys are ignored.
* Every other line that starts with ``#`` is a comment; blank lines are skipped.
* Each remaining line is one sequence: its fields are separated by white space; the leading
  columns come first, then at least one token, each a vocabulary name.

Because fields are separated by white space, vocabulary names, label names and ids must not
contain white space, must not be empty and must not start with ``#``; ``to_text`` raises a
``ValueError`` otherwise. Line numbers in errors are 1-based physical line numbers.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

__all__ = ["DataFormatError", "SequenceDatabase", "smallest_int_dtype", "offsets_of"]

TEXT_MAGIC = "# ldhmm-sequences 1"
_ALLOWED_COLUMNS = {
    ("tokens",): (False, False),
    ("label", "tokens"): (False, True),
    ("id", "tokens"): (True, False),
    ("id", "label", "tokens"): (True, True),
}


class DataFormatError(ValueError):
    """A data file that cannot be parsed.

    Parameters
    ----------
    path : str or os.PathLike or None
        The file that holds the problem.
    line : int or None
        The 1-based line number of the problem, when there is one.
    problem : str
        What is wrong, in words.

    The message reads ``"FILE:LINE: problem"`` (or ``"FILE: problem"`` without a line).
    """

    def __init__(self, path, line: int | None, problem: str):
        self.path = None if path is None else str(path)
        self.line = line
        self.problem = problem
        where = self.path if self.path is not None else "<input>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {problem}")


def offsets_of(lengths) -> np.ndarray:
    """The offsets (n + 1,) int64 of n sequences of these lengths laid end to end: 0, then the
    running sums (sequence i is ``tokens[offsets[i]:offsets[i + 1]]``)."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def smallest_int_dtype(n_values: int) -> np.dtype:
    """Smallest signed integer dtype that holds the codes ``0..n_values-1``."""
    for dtype in (np.int8, np.int16, np.int32):
        if n_values - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int64)


def _check_names(names: Sequence[str], what: str) -> list[str]:
    names = [str(n) for n in names]
    if len(set(names)) != len(names):
        seen, dupes = set(), []
        for n in names:
            if n in seen:
                dupes.append(n)
            seen.add(n)
        raise ValueError(f"{what} has duplicate names: {sorted(set(dupes))}")
    return names


class SequenceDatabase:
    """M integer-coded sequences over a vocabulary of V named symbols.

    Parameters
    ----------
    tokens : array-like of int, shape (T,)
        All sequences concatenated; symbols in ``0..V-1``. Stored in the smallest signed
        integer dtype that holds ``V`` codes.
    offsets : array-like of int, shape (M + 1,)
        Sequence m is ``tokens[offsets[m]:offsets[m + 1]]``; ``offsets[0] == 0``,
        ``offsets[-1] == T``, strictly increasing (every sequence has at least one symbol).
    vocabulary : sequence of str, length V
        Symbol names in code order.
    labels : array-like of int, shape (M,), optional
        Class code of each sequence, in ``0..len(label_names)-1``.
    label_names : sequence of str, optional
        Class names in code order; required with ``labels``.
    ids : sequence of str, length M, optional
        An identifier per sequence (for the UCI data: where it came from).
    name : str
        A short name for the database (e.g. ``"msnbc"``).
    meta : dict, optional
        Free-form provenance (loader options, counts of skipped records, ...).

    Notes
    -----
    The arrays are read-only; ``subset``, ``filter_length`` and ``sample`` return new
    databases.
    """

    def __init__(
        self,
        tokens,
        offsets,
        vocabulary: Sequence[str],
        labels=None,
        label_names: Sequence[str] | None = None,
        ids: Sequence[str] | None = None,
        name: str = "",
        meta: dict | None = None,
    ):
        vocabulary = _check_names(vocabulary, "vocabulary")
        if len(vocabulary) == 0:
            raise ValueError("vocabulary is empty; a database needs at least one symbol")
        tokens = np.asarray(tokens)
        offsets = np.asarray(offsets)
        if tokens.ndim != 1:
            raise ValueError(f"tokens must be 1-D, got shape {tokens.shape}")
        if offsets.ndim != 1 or offsets.size < 1:
            raise ValueError(f"offsets must be 1-D with M + 1 >= 1 entries, got shape {offsets.shape}")
        if tokens.size and not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(f"tokens must be integers, got dtype {tokens.dtype}")
        if not np.issubdtype(offsets.dtype, np.integer):
            raise ValueError(f"offsets must be integers, got dtype {offsets.dtype}")
        offsets = offsets.astype(np.int64, copy=False)
        if offsets[0] != 0 or offsets[-1] != tokens.size:
            raise ValueError(
                f"offsets must start at 0 and end at len(tokens) = {tokens.size}, "
                f"got {int(offsets[0])} .. {int(offsets[-1])}"
            )
        lengths = np.diff(offsets)
        if lengths.size and lengths.min() < 1:
            bad = int(np.flatnonzero(lengths < 1)[0])
            raise ValueError(
                f"sequence {bad} has length {int(lengths[bad])}; every sequence needs at least one symbol"
            )
        if tokens.size:
            lo, hi = int(tokens.min()), int(tokens.max())
            if lo < 0 or hi >= len(vocabulary):
                bad = lo if lo < 0 else hi
                raise ValueError(
                    f"token {bad} is outside 0..{len(vocabulary) - 1} (vocabulary size {len(vocabulary)})"
                )
        self._tokens = tokens.astype(smallest_int_dtype(len(vocabulary)), copy=False)
        self._offsets = offsets
        self._lengths = lengths.astype(np.int64, copy=False)
        for arr in (self._tokens, self._offsets, self._lengths):
            if arr.flags.owndata or arr.base is not None:
                try:
                    arr.flags.writeable = False
                except ValueError:  # a view of someone else's read-only buffer
                    pass
        self._vocabulary = vocabulary
        m = self._lengths.size

        if labels is None:
            if label_names is not None:
                label_names = _check_names(label_names, "label_names")
            self._labels = None
        else:
            if label_names is None:
                raise ValueError("labels were given without label_names")
            label_names = _check_names(label_names, "label_names")
            labels = np.asarray(labels)
            if labels.shape != (m,):
                raise ValueError(f"labels must have shape ({m},), got {labels.shape}")
            if m and not np.issubdtype(labels.dtype, np.integer):
                raise ValueError(f"labels must be integer codes, got dtype {labels.dtype}")
            labels = labels.astype(np.int64)
            if m and (labels.min() < 0 or labels.max() >= len(label_names)):
                raise ValueError(f"labels must lie in 0..{len(label_names) - 1} (one per label name)")
            labels.flags.writeable = False
            self._labels = labels
        self._label_names = None if label_names is None else list(label_names)

        if ids is not None:
            ids = [str(i) for i in ids]
            if len(ids) != m:
                raise ValueError(f"ids must have one entry per sequence ({m}), got {len(ids)}")
        self._ids = ids
        self.name = str(name)
        self.meta = dict(meta or {})

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_sequences(
        cls,
        sequences: Iterable,
        vocabulary: Sequence[str],
        labels=None,
        label_names: Sequence[str] | None = None,
        ids: Sequence[str] | None = None,
        name: str = "",
        meta: dict | None = None,
    ) -> SequenceDatabase:
        """Build a database from a list of 1-D integer arrays (symbols ``0..V-1``)."""
        arrays = [np.asarray(s) for s in sequences]
        for i, a in enumerate(arrays):
            if a.ndim != 1:
                raise ValueError(f"sequence {i} has shape {a.shape}, expected 1-D")
            if a.size and not np.issubdtype(a.dtype, np.integer):
                raise ValueError(f"sequence {i} has non-integer dtype {a.dtype}")
        lengths = np.array([a.size for a in arrays], dtype=np.int64)
        offsets = offsets_of(lengths)
        dtype = smallest_int_dtype(max(len(vocabulary), 1))
        tokens = (
            np.concatenate([a.astype(np.int64, copy=False) for a in arrays])
            if arrays
            else np.zeros(0, dtype=np.int64)
        )
        if tokens.size and (tokens.min() < 0 or tokens.max() >= len(vocabulary)):
            bad = int(tokens.min()) if tokens.min() < 0 else int(tokens.max())
            raise ValueError(f"token {bad} is outside 0..{len(vocabulary) - 1}")
        return cls(tokens.astype(dtype), offsets, vocabulary, labels, label_names, ids, name, meta)

    # ------------------------------------------------------------------ basic access
    @property
    def tokens(self) -> np.ndarray:
        """All tokens concatenated, shape (T,), a small signed integer dtype (read-only)."""
        return self._tokens

    @property
    def offsets(self) -> np.ndarray:
        """Sequence boundaries, shape (M + 1,), int64 (read-only)."""
        return self._offsets

    @property
    def lengths(self) -> np.ndarray:
        """Sequence lengths N_m, shape (M,), int64 (read-only)."""
        return self._lengths

    @property
    def vocabulary(self) -> list[str]:
        """Symbol names in code order, length V."""
        return list(self._vocabulary)

    @property
    def n_symbols(self) -> int:
        """Vocabulary size V."""
        return len(self._vocabulary)

    @property
    def n_tokens(self) -> int:
        """Total number of tokens T."""
        return int(self._tokens.size)

    @property
    def labels(self) -> np.ndarray | None:
        """Class code per sequence, shape (M,), int64, or None when unlabelled."""
        return self._labels

    @property
    def label_names(self) -> list[str] | None:
        """Class names in code order, or None."""
        return None if self._label_names is None else list(self._label_names)

    @property
    def ids(self) -> list[str] | None:
        """Identifier per sequence, or None."""
        return None if self._ids is None else list(self._ids)

    def __len__(self) -> int:
        return int(self._lengths.size)

    def __getitem__(self, index) -> np.ndarray:
        """Sequence ``index`` as a new int64 array of shape (N_m,)."""
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(
                f"a database is indexed by an integer, got {type(index).__name__}; "
                "use .subset(indices) for several sequences"
            )
        m = len(self)
        i = int(index)
        if i < 0:
            i += m
        if not 0 <= i < m:
            raise IndexError(f"sequence index {index} out of range for {m} sequences")
        return self._tokens[self._offsets[i] : self._offsets[i + 1]].astype(np.int64)

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self[i]

    @property
    def sequences(self) -> list[np.ndarray]:
        """The sequences as a list of int64 arrays of shape (N_m,), the form estimators take.

        The arrays are views into one int64 copy of ``tokens``; each access builds a new list,
        so call it once and keep the result.
        """
        if len(self) == 0:
            return []
        all_tokens = self._tokens.astype(np.int64)
        bounds = self._offsets.tolist()
        return [all_tokens[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def __repr__(self) -> str:
        label = "" if self._labels is None else f", classes={len(self._label_names)}"
        return (
            f"SequenceDatabase(name={self.name!r}, sequences={len(self)}, "
            f"tokens={self.n_tokens}, symbols={self.n_symbols}{label})"
        )

    def __eq__(self, other) -> bool:
        if not isinstance(other, SequenceDatabase):
            return NotImplemented
        same_labels = (self._labels is None) == (other._labels is None) and (
            self._labels is None or np.array_equal(self._labels, other._labels)
        )
        return (
            self._vocabulary == other._vocabulary
            and np.array_equal(self._offsets, other._offsets)
            and np.array_equal(self._tokens, other._tokens)
            and same_labels
            and self._label_names == other._label_names
            and self._ids == other._ids
            and self.name == other.name
        )

    __hash__ = None

    # ------------------------------------------------------------------ selections
    def subset(self, indices) -> SequenceDatabase:
        """The sequences at ``indices`` (int array, in the given order, or a boolean mask).

        Parameters
        ----------
        indices : array-like of int, shape (K,), or of bool, shape (M,)

        Returns
        -------
        SequenceDatabase with K sequences, same vocabulary and label names.
        """
        idx = np.asarray(indices)
        m = len(self)
        if idx.dtype == bool:
            if idx.shape != (m,):
                raise ValueError(f"boolean mask must have shape ({m},), got {idx.shape}")
            idx = np.flatnonzero(idx)
        elif idx.size == 0:
            idx = idx.astype(np.int64)
        elif not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"indices must be integers or a boolean mask, got dtype {idx.dtype}")
        idx = idx.astype(np.int64).ravel()
        if idx.size and (idx.min() < -m or idx.max() >= m):
            raise IndexError(f"indices out of range for {m} sequences")
        idx = np.where(idx < 0, idx + m, idx)
        lens = self._lengths[idx]
        new_offsets = offsets_of(lens)
        total = int(new_offsets[-1])
        # position of each new token in the old array
        shift = np.repeat(self._offsets[idx] - new_offsets[:-1], lens)
        positions = shift + np.arange(total, dtype=np.int64)
        return SequenceDatabase(
            self._tokens[positions],
            new_offsets,
            self._vocabulary,
            labels=None if self._labels is None else self._labels[idx],
            label_names=self._label_names,
            ids=None if self._ids is None else [self._ids[i] for i in idx],
            name=self.name,
            meta=self.meta,
        )

    def filter_length(self, min_length: int | None = None, max_length: int | None = None) -> SequenceDatabase:
        """Sequences with ``min_length <= N_m <= max_length`` (both inclusive; None = no bound)."""
        if min_length is not None and max_length is not None and min_length > max_length:
            raise ValueError(f"min_length {min_length} is larger than max_length {max_length}")
        keep = np.ones(len(self), dtype=bool)
        if min_length is not None:
            keep &= self._lengths >= int(min_length)
        if max_length is not None:
            keep &= self._lengths <= int(max_length)
        if keep.all():
            return self
        return self.subset(keep)

    def sample(self, n: int, seed: int = 0) -> SequenceDatabase:
        """A seeded random sample of ``n`` distinct sequences, kept in database order."""
        n = int(n)
        if not 0 <= n <= len(self):
            raise ValueError(f"cannot sample {n} sequences from a database of {len(self)}")
        rng = np.random.default_rng(seed)
        idx = np.sort(rng.choice(len(self), size=n, replace=False))
        return self.subset(idx)

    # ------------------------------------------------------------------ statistics
    def length_stats(self) -> dict:
        """Sequence-length statistics: keys n, min, max, mean, median, tokens.

        For an empty database min, max, mean and median are None.
        """
        n = len(self)
        if n == 0:
            return {"n": 0, "min": None, "max": None, "mean": None, "median": None, "tokens": 0}
        return {
            "n": n,
            "min": int(self._lengths.min()),
            "max": int(self._lengths.max()),
            "mean": float(self._lengths.mean()),
            "median": float(np.median(self._lengths)),
            "tokens": self.n_tokens,
        }

    def class_counts(self) -> dict[str, int]:
        """Number of sequences per class name (every class, zeros included); {} if unlabelled."""
        if self._labels is None:
            return {}
        counts = np.bincount(self._labels, minlength=len(self._label_names))
        return {name: int(c) for name, c in zip(self._label_names, counts)}

    def symbol_counts(self) -> np.ndarray:
        """Occurrences of each symbol, shape (V,), int64."""
        return np.bincount(self._tokens.astype(np.int64), minlength=self.n_symbols).astype(np.int64)

    def summary(self) -> str:
        """A few lines of text describing the database."""
        s = self.length_stats()
        lines = [f"database {self.name or '(unnamed)'}: {s['n']} sequences, {s['tokens']} tokens"]
        if s["n"]:
            lines.append(
                f"lengths: min {s['min']}, median {s['median']:g}, mean {s['mean']:.2f}, max {s['max']}"
            )
        lines.append(f"vocabulary ({self.n_symbols}): {' '.join(self._vocabulary)}")
        if self._labels is not None:
            counts = ", ".join(f"{k} {v}" for k, v in self.class_counts().items())
            lines.append(f"classes ({len(self._label_names)}): {counts}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ text format
    def to_text(self, path) -> None:
        """Write the database in the text format described in the module docstring.

        Raises
        ------
        ValueError
            If a vocabulary name, label name or id is empty, contains white space or starts
            with ``#``.
        """

        def check(values, what):
            for v in values:
                if v == "" or v.startswith("#") or len(v.split()) != 1 or v.split()[0] != v:
                    raise ValueError(
                        f"{what} {v!r} cannot be written to the text format: names must be "
                        "non-empty, free of white space and not start with '#'"
                    )

        check(self._vocabulary, "vocabulary name")
        columns = []
        if self._ids is not None:
            check(self._ids, "id")
            columns.append("id")
        if self._labels is not None:
            check(self._label_names, "label name")
            columns.append("label")
        columns.append("tokens")
        if self.name != self.name.strip() or len(self.name.splitlines()) > 1:
            raise ValueError(
                f"the database name {self.name!r} cannot be written to the text format: it must be "
                "one line without leading or trailing white space"
            )
        names = np.array(self._vocabulary, dtype=object)
        with open(path, "w", encoding="utf-8", newline="\n") as out:
            out.write(TEXT_MAGIC + "\n")
            out.write(f"# name: {self.name}\n")
            out.write(f"# vocabulary: {' '.join(self._vocabulary)}\n")
            if self._label_names is not None:
                out.write(f"# label_names: {' '.join(self._label_names)}\n")
            out.write(f"# columns: {' '.join(columns)}\n")
            buf = io.StringIO()
            for i in range(len(self)):
                fields = []
                if self._ids is not None:
                    fields.append(self._ids[i])
                if self._labels is not None:
                    fields.append(self._label_names[self._labels[i]])
                seq = self._tokens[self._offsets[i] : self._offsets[i + 1]]
                fields.extend(names[seq])
                buf.write(" ".join(fields))
                buf.write("\n")
                if buf.tell() > 1 << 20:
                    out.write(buf.getvalue())
                    buf = io.StringIO()
            out.write(buf.getvalue())

    @classmethod
    def from_text(cls, path) -> SequenceDatabase:
        """Read a file written by :meth:`to_text`.

        Raises
        ------
        DataFormatError
            For a missing or malformed header, a token that is not in the vocabulary, a
            label that is not a label name, a line with too few fields, undecodable bytes or
            an empty file; the message names the file and line. Nothing is returned on error.
        """
        path = os.fspath(path)
        header: dict[str, str] = {}
        has_id = has_label = False
        in_header = True
        token_codes: dict[str, int] = {}
        label_codes: dict[str, int] = {}
        sequences = _SequenceBuffer(np.int64)
        labels = _IntBuffer(np.int64)
        ids: list[str] = []
        lineno = 0
        try:
            with open(path, encoding="utf-8", newline=None) as f:
                first = f.readline()
                lineno = 1
                if first == "":
                    raise DataFormatError(path, None, "empty file (no ldhmm-sequences header)")
                if first.rstrip("\r\n").strip() != TEXT_MAGIC:
                    raise DataFormatError(
                        path,
                        1,
                        f"expected the header line {TEXT_MAGIC!r} (files written by to_text); "
                        "use ldhmm.data.load_text for plain token files",
                    )
                for lineno, line in enumerate(f, start=2):
                    stripped = line.strip()
                    if not stripped:
                        continue
                    if stripped.startswith("#"):
                        if in_header:
                            body = stripped[1:].strip()
                            key, sep, value = body.partition(":")
                            if sep:
                                header[key.strip()] = value.strip()
                        continue
                    if in_header:
                        in_header = False
                        token_codes, label_codes, has_id, has_label = _parse_header(path, header, lineno)
                    fields = stripped.split()
                    n_lead = has_id + has_label
                    if len(fields) <= n_lead:
                        raise DataFormatError(
                            path,
                            lineno,
                            f"expected {n_lead} leading column(s) and at least one token, "
                            f"found {len(fields)} field(s)",
                        )
                    pos = 0
                    if has_id:
                        ids.append(fields[0])
                        pos = 1
                    if has_label:
                        code = label_codes.get(fields[pos])
                        if code is None:
                            raise DataFormatError(
                                path,
                                lineno,
                                f"label {fields[pos]!r} is not one of the label names {list(label_codes)}",
                            )
                        labels.append(code)
                        pos += 1
                    try:
                        codes = [token_codes[t] for t in fields[pos:]]
                    except KeyError as err:
                        raise DataFormatError(
                            path, lineno, f"token {err.args[0]!r} is not in the vocabulary"
                        ) from None
                    sequences.add(codes)
        except UnicodeDecodeError as err:
            raise DataFormatError(
                path, lineno + 1 if lineno else None, f"not UTF-8 text ({err.reason})"
            ) from None
        if in_header:
            token_codes, label_codes, has_id, has_label = _parse_header(path, header, lineno)
        vocabulary = list(token_codes)
        return cls(
            *sequences.arrays(),
            vocabulary,
            labels=labels.array() if has_label else None,
            label_names=list(label_codes) if "label_names" in header else None,
            ids=ids if has_id else None,
            name=header.get("name", ""),
        )


def _parse_header(path, header: dict, lineno: int):
    if "vocabulary" not in header:
        raise DataFormatError(path, lineno, "the header has no '# vocabulary: ...' line")
    vocab = header["vocabulary"].split()
    if not vocab:
        raise DataFormatError(path, lineno, "the vocabulary in the header is empty")
    if len(set(vocab)) != len(vocab):
        raise DataFormatError(path, lineno, "the vocabulary in the header has duplicate names")
    label_names = header.get("label_names", "").split()
    if len(set(label_names)) != len(label_names):
        raise DataFormatError(path, lineno, "label_names in the header has duplicate names")
    columns = tuple(header.get("columns", "tokens").split())
    if columns not in _ALLOWED_COLUMNS:
        raise DataFormatError(
            path,
            lineno,
            f"columns {' '.join(columns)!r} not understood; expected 'tokens', 'id tokens', "
            "'label tokens' or 'id label tokens'",
        )
    has_id, has_label = _ALLOWED_COLUMNS[columns]
    if has_label and "label_names" not in header:
        raise DataFormatError(path, lineno, "columns include 'label' but the header has no label_names")
    return (
        {t: k for k, t in enumerate(vocab)},
        {t: k for k, t in enumerate(label_names)},
        has_id,
        has_label,
    )


class _IntBuffer:
    """A growing 1-D numpy buffer (amortized doubling) for streaming parsers."""

    def __init__(self, dtype, capacity: int = 1024):
        self._data = np.empty(capacity, dtype=dtype)
        self._size = 0

    def _reserve(self, extra: int) -> None:
        need = self._size + extra
        if need > self._data.size:
            new = np.empty(max(need, 2 * self._data.size), dtype=self._data.dtype)
            new[: self._size] = self._data[: self._size]
            self._data = new

    def append(self, value: int) -> None:
        self._reserve(1)
        self._data[self._size] = value
        self._size += 1

    def extend(self, values) -> None:
        values = np.asarray(values, dtype=self._data.dtype) if not isinstance(values, np.ndarray) else values
        n = values.size
        self._reserve(n)
        self._data[self._size : self._size + n] = values
        self._size += n

    def __len__(self) -> int:
        return self._size

    def array(self) -> np.ndarray:
        """The filled part, as a compact copy."""
        return self._data[: self._size].copy()


class _SequenceBuffer:
    """Sequences read one at a time by a streaming parser: their tokens concatenated
    (``tokens``) and their lengths (``lengths``), each a :class:`_IntBuffer`."""

    def __init__(self, token_dtype, capacity: int = 1024, sequences: int = 1024):
        self.tokens = _IntBuffer(token_dtype, capacity)
        self.lengths = _IntBuffer(np.int64, sequences)

    def add(self, codes) -> None:
        """One more sequence: its symbol codes, shape (N,)."""
        self.tokens.extend(codes)
        self.lengths.append(len(codes))

    def __len__(self) -> int:
        """The number of sequences."""
        return len(self.lengths)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(tokens (T,), offsets (M + 1,)): the first two arguments of :class:`SequenceDatabase`."""
        return self.tokens.array(), offsets_of(self.lengths.array())

    def database(self, vocabulary, **fields) -> SequenceDatabase:
        """The sequences as a :class:`SequenceDatabase`; ``fields``: its other arguments
        (``labels``, ``label_names``, ``ids``, ``name``, ``meta``)."""
        return SequenceDatabase(*self.arrays(), vocabulary, **fields)
