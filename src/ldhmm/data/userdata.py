"""A user's own sequences: plain token files and event logs (CSV or Parquet).

The vocabulary is built from training data (:class:`Vocabulary`). At score time pass that
vocabulary back in: an unseen token is then an error naming the token, or, with
``unknown="map"``, the reserved symbol ``<unk>`` (which exists only in a vocabulary built
with ``reserve_unknown=True``).
"""

from __future__ import annotations

import gzip
import re
import warnings
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from .database import DataFormatError, SequenceDatabase, _SequenceBuffer, offsets_of
from .terminal_text import CONTROL_CHARACTER

__all__ = ["UNKNOWN", "Vocabulary", "EventOrderWarning", "load_text", "load_event_log", "recode"]

#: Column names that look like an event's time: checked when an event log is read without a
#: time column, to warn when the file's rows are out of order by one of them.
TIME_LIKE = re.compile(r"time|date|stamp|^ts$|^t$|when|clock|epoch", re.IGNORECASE)


class EventOrderWarning(UserWarning):
    """An event log read in file order whose rows are out of time order within a sequence."""


#: Name of the reserved unknown symbol.
UNKNOWN = "<unk>"
_SEPARATORS = re.compile(r"[\s,]+")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
#: What a real event named :data:`UNKNOWN` gets, where a vocabulary is built from the data.
_RESERVED_NAME = (
    f"event {UNKNOWN!r} is the name ldhmm reserves for symbols unseen in training (--unknown reserve): "
    "rename it in the file (any other name, e.g. 'unk')"
)
#: Arrow types of a column that holds several values per row (lists, structs, maps).
_NESTED_TYPES = ("list", "large_list", "fixed_size_list", "list_view", "large_list_view", "struct", "map")


class Vocabulary:
    """An ordered set of token names; symbol k is ``symbols[k]``.

    Parameters
    ----------
    symbols : sequence of str
        Distinct token names in code order. If :data:`UNKNOWN` (``"<unk>"``) is among them,
        it is the reserved unknown symbol.
    """

    def __init__(self, symbols: Sequence[str]):
        symbols = [str(s) for s in symbols]
        if not symbols:
            raise ValueError("a vocabulary needs at least one symbol")
        self._index = {}
        for k, s in enumerate(symbols):
            if s in self._index:
                raise ValueError(f"duplicate symbol {s!r} in the vocabulary")
            self._index[s] = k
        self._symbols = symbols

    @classmethod
    def build(cls, token_sequences: Iterable[Iterable[str]], reserve_unknown: bool = False) -> Vocabulary:
        """The vocabulary of the training tokens, sorted by name (so independent of order).

        Parameters
        ----------
        token_sequences : iterable of iterables of str
            The training sequences as token strings.
        reserve_unknown : bool
            Append the reserved :data:`UNKNOWN` symbol (last code) so that unseen tokens can
            be mapped to it at score time.
        """
        seen = set()
        for seq in token_sequences:
            if isinstance(seq, str):
                raise ValueError("token_sequences must be an iterable of token lists, not of strings")
            seen.update(str(t) for t in seq)
        seen.discard(UNKNOWN)
        symbols = sorted(seen)
        if reserve_unknown:
            symbols.append(UNKNOWN)
        if not symbols:
            raise ValueError("no tokens to build a vocabulary from")
        return cls(symbols)

    @property
    def symbols(self) -> list[str]:
        """Token names in code order."""
        return list(self._symbols)

    @property
    def unknown_index(self) -> int | None:
        """Code of the reserved unknown symbol, or None when not reserved."""
        return self._index.get(UNKNOWN)

    def __len__(self) -> int:
        return len(self._symbols)

    def __contains__(self, token) -> bool:
        return str(token) in self._index

    def __eq__(self, other) -> bool:
        return isinstance(other, Vocabulary) and self._symbols == other._symbols

    __hash__ = None

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} symbols{', with <unk>' if UNKNOWN in self._index else ''})"

    def index(self, token: str) -> int:
        """Code of ``token``; ValueError naming it if unseen."""
        try:
            return self._index[str(token)]
        except KeyError:
            raise ValueError(f"token {token!r} is not in the vocabulary") from None

    def encode(self, tokens: Iterable[str], unknown: str = "error") -> np.ndarray:
        """Codes of ``tokens``, shape (N,), int64.

        Parameters
        ----------
        tokens : iterable of str
        unknown : {"error", "map"}
            ``"error"``: an unseen token raises a ValueError naming it. ``"map"``: an unseen
            token becomes the reserved ``<unk>`` symbol (the vocabulary must have one).
        """
        unk = self._check_unknown_policy(unknown)
        out = []
        for t in tokens:
            code = self._index.get(str(t))
            if code is None:
                if unk is None:
                    raise ValueError(
                        f"token {t!r} is not in the vocabulary built from the training data; "
                        "pass unknown='map' with a vocabulary built with reserve_unknown=True (ldhmm: fit "
                        f"with --unknown reserve, then --unknown map) to map unseen tokens to {UNKNOWN}"
                    )
                code = unk
            out.append(code)
        return np.array(out, dtype=np.int64)

    def decode(self, codes: Iterable[int]) -> list[str]:
        """Token names of ``codes``."""
        out = []
        for c in codes:
            c = int(c)
            if not 0 <= c < len(self._symbols):
                raise ValueError(f"code {c} is outside 0..{len(self._symbols) - 1}")
            out.append(self._symbols[c])
        return out

    def _check_unknown_policy(self, unknown: str) -> int | None:
        if unknown == "error":
            return None
        if unknown == "map":
            if self.unknown_index is None:
                raise ValueError(
                    f"unknown='map' (ldhmm: --unknown map) needs a vocabulary with the reserved {UNKNOWN} "
                    "symbol; build it with reserve_unknown=True (ldhmm: fit with --unknown reserve)"
                )
            return self.unknown_index
        raise ValueError(f"unknown must be 'error' or 'map', got {unknown!r}")


def _as_vocabulary(vocabulary) -> Vocabulary | None:
    if vocabulary is None or isinstance(vocabulary, Vocabulary):
        return vocabulary
    if isinstance(vocabulary, SequenceDatabase):
        return Vocabulary(vocabulary.vocabulary)
    return Vocabulary(list(vocabulary))


def _open_text_bytes(path: Path):
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def load_text(
    path, vocabulary=None, unknown: str = "error", reserve_unknown: bool = False, name: str | None = None
) -> SequenceDatabase:
    """Read a plain text file with one sequence per line.

    Format: UTF-8 (optionally gzip-compressed); tokens are separated by white space and/or
    commas (``a b c``, ``a,b,c`` and ``a, b, c`` are the same sequence). Blank lines and lines
    whose first non-blank character is ``#`` are skipped, so the file may carry comments and
    a trailing newline; ids record the physical line of each sequence (``"FILE:LINE"``).
    Files written by :meth:`SequenceDatabase.to_text` without id or label columns read
    back the same way (their header is comments).

    Parameters
    ----------
    path : str or os.PathLike
    vocabulary : Vocabulary or sequence of str or SequenceDatabase, optional
        The training vocabulary (score time). When None, it is built from this file (sorted
        token names, plus ``<unk>`` if ``reserve_unknown``).
    unknown : {"error", "map"}
        What an unseen token does when a vocabulary is given (see :meth:`Vocabulary.encode`).
    reserve_unknown : bool
        When building the vocabulary, reserve ``<unk>``.
    name : str, optional
        Database name (default: the file's stem).

    Raises
    ------
    DataFormatError
        Undecodable bytes, a line of separators only, a control character, an unseen token
        (with ``unknown="error"``), or no sequences at all (empty file); names file and line.
    """
    path = Path(path)
    vocab = _as_vocabulary(vocabulary)
    unk = None if vocab is None else vocab._check_unknown_policy(unknown)
    raw_sequences: list[list[str]] = []
    line_numbers: list[int] = []
    sequences = _SequenceBuffer(np.int64)
    lineno = 0
    try:
        with _open_text_bytes(path) as f:
            for lineno, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise DataFormatError(path, lineno, f"not UTF-8 text ({err.reason})") from None
                if lineno == 1 and line.startswith("\ufeff"):
                    line = line[1:]  # byte-order mark
                stripped = line.strip()
                if not stripped or stripped.startswith("#"):
                    continue
                bad = _CONTROL.search(stripped)
                if bad:
                    raise DataFormatError(path, lineno, f"control character {bad.group()!r} in the line")
                fields = [t for t in _SEPARATORS.split(stripped) if t]
                if not fields:
                    raise DataFormatError(path, lineno, "the line holds separators but no tokens")
                line_numbers.append(lineno)
                if vocab is None:
                    if UNKNOWN in fields:
                        raise DataFormatError(path, lineno, _RESERVED_NAME)
                    raw_sequences.append(fields)
                    continue
                codes = []
                for t in fields:
                    code = vocab._index.get(t)
                    if code is None:
                        if unk is None:
                            raise DataFormatError(
                                path,
                                lineno,
                                f"token {t!r} is not in the vocabulary (pass unknown='map' with a "
                                f"vocabulary built with reserve_unknown=True to map it to {UNKNOWN}; "
                                "ldhmm: fit with --unknown reserve, then --unknown map)",
                            )
                        code = unk
                    codes.append(code)
                sequences.add(codes)
    except (EOFError, OSError, zlib.error) as err:
        if isinstance(err, FileNotFoundError):
            raise
        what = (
            "truncated or corrupt gzip data"
            if isinstance(err, (EOFError, zlib.error, gzip.BadGzipFile))
            else "cannot read the file"
        )
        raise DataFormatError(path, lineno + 1, f"{what} ({err})") from None
    if not line_numbers:
        raise DataFormatError(
            path, None, "no sequences (the file is empty or holds only blank and comment lines)"
        )
    if vocab is None:
        vocab = Vocabulary.build(raw_sequences, reserve_unknown=reserve_unknown)
        for seq in raw_sequences:
            sequences.add(vocab.encode(seq))
    base = path.name
    return sequences.database(
        vocab.symbols,
        ids=[f"{base}:{n}" for n in line_numbers],
        name=path.stem if name is None else name,
        meta={"source": str(path)},
    )


# ---------------------------------------------------------------------------- event logs
def _event_log_format(path: Path, format: str | None) -> str:
    if format is not None:
        if format not in ("csv", "parquet"):
            raise ValueError(f"format must be 'csv' or 'parquet', got {format!r}")
        return format
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in (".parquet", ".pq"):
        return "parquet"
    return "csv"


#: File-name suffixes of a tab-separated event log (the separator is then a tab unless given).
TSV_SUFFIXES = (".tsv", ".tab")
#: Separators a one-column header is checked for, to say which one the file seems to use.
_LIKELY_SEPARATORS = (";", "\t", "|", ",")


def csv_separator(path, sep: str | None = None) -> str:
    """The field separator of a CSV-like event log: ``sep`` when given (one character), else a tab
    for a ``.tsv``/``.tab`` file (also compressed, ``.tsv.gz``) and a comma otherwise."""
    if sep is not None:
        if len(sep) != 1 or sep in '\r\n"':
            raise ValueError(f"sep must be one character other than a quote or a line break, got {sep!r}")
        return sep
    suffixes = [s.lower() for s in Path(path).suffixes[-2:]]
    return "\t" if any(s in TSV_SUFFIXES for s in suffixes) else ","


def _missing_columns_error(path, wanted: dict, present: Sequence[str], sep: str = ","):
    missing = [f"{role} column {col!r}" for role, col in wanted.items() if col not in present]
    hint = ""
    if len(present) == 1:
        # one column: the file's separator is most likely not the one it was read with
        other = next((s for s in _LIKELY_SEPARATORS if s != sep and s in str(present[0])), None)
        if other is not None:
            hint = f" (read with separator {sep!r}; it seems to use {other!r}: pass --sep {other!r})"
    columns = ", ".join(map(str, present)) or "(none)"
    return DataFormatError(path, None, f"missing {', '.join(missing)}; the file has columns: {columns}{hint}")


def _read_event_frame(path: Path, fmt: str, wanted: dict, time_like: bool = False, sep: str = ","):
    """The wanted columns of an event log (and, with ``time_like``, the columns whose names
    match :data:`TIME_LIKE`), and whether it is a CSV file (fields separated by ``sep``)."""
    import pandas as pd

    columns = list(dict.fromkeys(wanted.values()))

    def with_time_like(present):
        extra = [c for c in present if time_like and isinstance(c, str) and TIME_LIKE.search(c)]
        return columns + [c for c in extra if c not in columns]

    if fmt == "parquet":
        try:
            import pyarrow.parquet as pq

            present = pq.read_schema(path).names
        except FileNotFoundError:
            raise
        except Exception as err:  # pyarrow raises ArrowInvalid/OSError on garbage
            raise DataFormatError(path, None, f"not a readable Parquet file ({err})") from None
        if any(c not in present for c in columns):
            raise _missing_columns_error(path, wanted, present)
        schema = pq.read_schema(path)
        for role, column in wanted.items():
            kind = str(schema.field(column).type)
            if kind.split("<")[0].split("[")[0] in _NESTED_TYPES:
                raise DataFormatError(
                    path,
                    None,
                    f"{role} column {column!r} holds nested values ({kind}); an event log's {role} "
                    "column holds one plain value (a string or a number) per row",
                )
        try:
            frame = pd.read_parquet(path, columns=with_time_like(present))
        except Exception as err:
            raise DataFormatError(path, None, f"cannot read the Parquet file ({err})") from None
        return frame, False
    try:
        head = pd.read_csv(path, nrows=0, sep=sep)
        present = list(head.columns)
        if any(c not in present for c in columns):
            raise _missing_columns_error(path, wanted, present, sep)
        # all columns are read (not usecols) so that a row with extra fields is an error
        frame = pd.read_csv(
            path, sep=sep, dtype=str, keep_default_na=False, na_values=[""], skip_blank_lines=True
        )[with_time_like(present)]
    except FileNotFoundError:
        raise
    except pd.errors.EmptyDataError:
        raise DataFormatError(path, None, "empty file (no header line with column names)") from None
    except pd.errors.ParserError as err:
        match = re.search(r"line (\d+)", str(err))
        raise DataFormatError(
            path,
            int(match.group(1)) if match else None,
            f"malformed CSV ({str(err).strip().splitlines()[-1]})",
        ) from None
    except UnicodeDecodeError as err:
        raise DataFormatError(path, None, f"not UTF-8 text ({err.reason})") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:  # a compressed CSV (.csv.gz)
        raise DataFormatError(path, None, f"truncated or corrupt compressed data ({err})") from None
    return frame, True


def load_event_log(
    path,
    sequence_col: str,
    event_col: str,
    time_col: str | None = None,
    vocabulary=None,
    unknown: str = "error",
    reserve_unknown: bool = False,
    format: str | None = None,
    name: str | None = None,
    sep: str | None = None,
    label_col: str | None = None,
) -> SequenceDatabase:
    """Read an event log (one event per row) and group it into sequences.

    Parameters
    ----------
    path : str or os.PathLike
        A CSV file (with a header line; ``.csv`` or ``.csv.gz``; tab-separated when named
        ``.tsv``/``.tab``, also compressed) or a Parquet file (``.parquet`` / ``.pq``).
    sequence_col : str
        Column holding the sequence id (user, session...). Sequences come out in order of
        first appearance of their id; ``ids`` are the ids as strings.
    event_col : str
        Column holding the event (token); values are compared as strings.
    time_col : str, optional
        Column to order events within a sequence: numbers, or date/time strings that pandas
        parses. Ties keep file order. Without it, events keep file order; then a column
        whose name looks like a time (:data:`TIME_LIKE`: ``timestamp``, ``date``, ``ts``, ...)
        and whose values go backwards within some sequence gets an :class:`EventOrderWarning`
        that names it.
    vocabulary, unknown, reserve_unknown
        As in :func:`load_text`.
    format : {"csv", "parquet"}, optional
        Overrides the guess from the file name.
    name : str, optional
        Database name (default: the file's stem).
    sep : str, optional
        The field separator of a CSV file, one character (e.g. ``";"``); default: a tab for a
        ``.tsv``/``.tab`` file, else a comma (:func:`csv_separator`). Not for Parquet files.
    label_col : str, optional
        Column holding each sequence's class (e.g. for ``ldhmm classify``): the same value on
        every row of a sequence; ``labels`` index ``label_names``, the values sorted as strings.

    Raises
    ------
    DataFormatError
        Missing columns (the message names them, lists the columns present and, when the
        header is one column holding another likely separator, names it), an empty
        file, a malformed CSV line, an empty sequence id or event, a time that cannot be
        parsed, a sequence whose rows carry two labels, or an unseen event with
        ``unknown="error"``. Row numbers are given as CSV
        line numbers (header = line 1, assuming no quoted multi-line fields).
    """
    import pandas as pd

    path = Path(path)
    fmt = _event_log_format(path, format)
    vocab = _as_vocabulary(vocabulary)
    unk = None if vocab is None else vocab._check_unknown_policy(unknown)
    wanted = {"sequence": sequence_col, "event": event_col}
    if time_col is not None:
        wanted["time"] = time_col
    if label_col is not None:
        wanted["label"] = label_col
    if fmt == "parquet" and sep is not None:
        raise ValueError(f"{path}: a separator (sep={sep!r}, --sep) applies to CSV/TSV files, not to Parquet")
    frame, is_csv = _read_event_frame(
        path, fmt, wanted, time_like=time_col is None, sep=csv_separator(path, sep)
    )

    def where(row: int):
        return (row + 2, "") if is_csv else (None, f"row {row}: ")

    if len(frame) == 0:
        raise DataFormatError(path, None, "no events (the file has a header but no rows)")
    for role in ("sequence", "event", "label")[: 2 + (label_col is not None)]:
        col = frame[wanted[role]]
        null = col.isna().to_numpy()
        if null.any():
            line, prefix = where(int(np.flatnonzero(null)[0]))
            raise DataFormatError(path, line, f"{prefix}empty {role} value in column {wanted[role]!r}")
    seq_values = frame[sequence_col].astype(str).to_numpy()
    events = frame[event_col].astype(str).to_numpy()
    for role in ("sequence", "event", "label")[: 2 + (label_col is not None)]:
        values = frame[wanted[role]].astype(str)
        control = values.str.contains(CONTROL_CHARACTER).to_numpy()
        if control.any():
            first = int(np.flatnonzero(control)[0])
            line, prefix = where(first)
            char = CONTROL_CHARACTER.search(values.iloc[first]).group()
            raise DataFormatError(
                path,
                line,
                f"{prefix}control character {char!r} in the {role} of column {wanted[role]!r}",
            )
    if vocab is None and (events == UNKNOWN).any():
        line, prefix = where(int(np.flatnonzero(events == UNKNOWN)[0]))
        raise DataFormatError(path, line, prefix + _RESERVED_NAME)

    group, uniques = pd.factorize(seq_values, sort=False)
    row = np.arange(len(frame), dtype=np.int64)
    if time_col is not None:
        times = _parse_times(path, frame[time_col], where)
        order = np.lexsort((row, times, group))
    else:
        order = np.lexsort((row, group))
        _warn_out_of_order(path, frame, [sequence_col, event_col], group, order, where)

    if vocab is None:
        vocab = Vocabulary.build([np.unique(events).tolist()], reserve_unknown=reserve_unknown)
    lookup = pd.Series(np.arange(len(vocab), dtype=np.int64), index=vocab.symbols)
    codes = lookup.reindex(events).to_numpy()
    unseen = np.isnan(codes) if codes.dtype.kind == "f" else np.zeros(len(codes), bool)
    if unseen.any():
        if unk is None:
            first = int(np.flatnonzero(unseen)[0])
            line, prefix = where(first)
            raise DataFormatError(
                path,
                line,
                f"{prefix}event {events[first]!r} is not in the vocabulary (pass unknown='map' with "
                f"a vocabulary built with reserve_unknown=True to map it to {UNKNOWN}; ldhmm: fit with "
                "--unknown reserve, then --unknown map)",
            )
        codes = np.where(unseen, unk, codes)
    codes = codes.astype(np.int64)

    offsets = offsets_of(np.bincount(group, minlength=len(uniques)).astype(np.int64))
    labels, label_names = (None, None)
    if label_col is not None:
        labels, label_names = _sequence_labels(path, frame[label_col], group, uniques, where)
    return SequenceDatabase(
        codes[order],
        offsets,
        vocab.symbols,
        labels=labels,
        label_names=label_names,
        ids=[str(u) for u in uniques],
        name=path.stem.split(".")[0] if name is None else name,
        meta={
            "source": str(path),
            "sequence_col": sequence_col,
            "event_col": event_col,
            "time_col": time_col,
            "label_col": label_col,
        },
    )


def _sequence_labels(path, column, group, uniques, where):
    """Each sequence's label from the label column (one value per sequence, else a
    :class:`DataFormatError` naming the line where a sequence's label changes): ``labels``
    (int64, one per sequence, indices into ``label_names``) and ``label_names`` (sorted)."""
    values = column.astype(str).to_numpy()
    # group codes are 0..n-1 (pd.factorize): the first row of each, in code order
    _, first_row = np.unique(group, return_index=True)
    per_row = values[first_row[group]]
    differs = np.flatnonzero(per_row != values)
    if differs.size:
        bad = int(differs[0])
        line, prefix = where(bad)
        first_line, _ = where(int(first_row[group[bad]]))
        at = f"line {first_line}" if first_line is not None else f"row {int(first_row[group[bad]])}"
        raise DataFormatError(
            path,
            line,
            f"{prefix}sequence {str(uniques[group[bad]])!r} has label {values[bad]!r} here and "
            f"{per_row[bad]!r} on {at}: a sequence has one label",
        )
    label_names, codes = np.unique(values, return_inverse=True)
    return codes[first_row].astype(np.int64), label_names.tolist()


def _warn_out_of_order(path, frame, used, group, order, where) -> None:
    """Warn (:class:`EventOrderWarning`) when a time-like column of ``frame`` (not in ``used``)
    goes backwards within a sequence read in file order (``order``: rows by sequence, then file
    order); the first such column is named."""
    for col in frame.columns:
        if col in used:
            continue
        try:
            times = _parse_times(path, frame[col], where)
        except DataFormatError:
            continue  # not a time: nothing to say about it
        t, g = times[order], group[order]
        back = (np.diff(t) < 0) & (g[1:] == g[:-1])
        if back.any():
            n_seq = np.unique(g[1:][back]).size
            warnings.warn(
                f"{path}: no time column given, so events are read in file order, but column {col!r} "
                f"goes backwards within {n_seq} of {int(group.max()) + 1} sequences; to order events by "
                f"it pass time_col={col!r} (on the command line: --time-col {col})",
                EventOrderWarning,
                stacklevel=3,
            )
            return


def _parse_times(path, column, where) -> np.ndarray:
    """Sort keys of a time column: float64 for numbers, int64 for date/times (UTC where they
    carry offsets, in the unit pandas parsed them in: never wrapped around)."""
    import pandas as pd

    if column.isna().any():
        line, prefix = where(int(np.flatnonzero(column.isna().to_numpy())[0]))
        raise DataFormatError(path, line, f"{prefix}empty time value in column {column.name!r}")
    if pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
        return column.to_numpy(dtype=np.float64)
    if pd.api.types.is_datetime64_any_dtype(column):
        return _time_keys(column)
    numeric = pd.to_numeric(column, errors="coerce")
    if not numeric.isna().any():
        return numeric.to_numpy(dtype=np.float64)
    text = column.astype(str).str.strip()
    offset = text.str.contains(_UTC_OFFSET).to_numpy()
    if offset.any() and not offset.all() and numeric.isna().all():
        bad = int(np.flatnonzero(offset != offset[0])[0])
        line, prefix = where(bad)
        has = "has a UTC offset" if offset[bad] else "has no UTC offset"
        raise DataFormatError(
            path,
            line,
            f"{prefix}time {column.iloc[bad]!r} in column {column.name!r} {has}, unlike the first row's: "
            "give every time an offset (they are converted to UTC) or none",
        )
    parsed = pd.to_datetime(column, errors="coerce", format="mixed", utc=bool(offset.any()))
    if parsed.isna().any():
        # the first row decides whether the column holds numbers or date/times
        expected = parsed if numeric.isna().iloc[0] else numeric
        bad = int(np.flatnonzero(expected.isna().to_numpy())[0])
        kind = "a date/time" if expected is parsed else "a number"
        line, prefix = where(bad)
        raise DataFormatError(
            path,
            line,
            f"{prefix}time {column.iloc[bad]!r} in column {column.name!r} is not {kind} like the first row's "
            "(or outside the dates it can represent)",
        )
    return _time_keys(parsed)


#: A UTC offset (or ``Z``) at the end of an ISO 8601 time.
_UTC_OFFSET = re.compile(r"\d:\d\d(?::\d\d(?:[.,]\d+)?)?\s*(?:[Zz]|[+-]\d\d(?::?\d\d)?)$")


def _time_keys(times) -> np.ndarray:
    """int64 sort keys of a datetime Series: in UTC where it has a time zone, counted in the
    Series' own unit (a year-9999 time in microseconds, never converted to nanoseconds and
    wrapped around)."""
    if getattr(times.dt, "tz", None) is not None:
        times = times.dt.tz_convert("UTC").dt.tz_localize(None)
    return times.to_numpy().astype(np.int64)


def recode(db: SequenceDatabase, vocabulary, unknown: str = "error") -> SequenceDatabase:
    """The database with its symbols re-coded, by name, into another vocabulary (a model's).

    A saved model knows its training vocabulary; a new log read by any loader has its own
    codes. This maps each used symbol to the model's code of the same name.

    Parameters
    ----------
    db : SequenceDatabase
    vocabulary : Vocabulary or sequence of str
        The target vocabulary (symbol k is ``vocabulary[k]``).
    unknown : {"error", "map"}
        A symbol of ``db`` that ``vocabulary`` lacks: a ``ValueError`` naming the symbol and
        the first sequence that holds it, or (``"map"``) the reserved ``<unk>`` symbol.

    Returns
    -------
    SequenceDatabase
        Same sequences, labels, ids and name; ``vocabulary`` as its vocabulary.
    """
    vocab = _as_vocabulary(vocabulary)
    unk = vocab._check_unknown_policy(unknown)
    used = db.symbol_counts() > 0
    mapping = np.full(db.n_symbols, -1, dtype=np.int64)
    for code, name in enumerate(db.vocabulary):
        target = vocab._index.get(name)
        if target is None and used[code]:
            if unk is None:
                tokens = db.tokens
                first = int(
                    np.searchsorted(db.offsets, int(np.flatnonzero(tokens == code)[0]), side="right") - 1
                )
                where = db.ids[first] if db.ids else f"sequence {first}"
                hint = (
                    f"; the model has {UNKNOWN}: pass unknown='map' (--unknown map) to map new symbols to it"
                    if vocab.unknown_index is not None
                    else f" (fit with a reserved {UNKNOWN} symbol, `ldhmm fit --unknown reserve` or "
                    "reserve_unknown=True, to score logs with new symbols)"
                )
                if vocab.symbols == [str(v) for v in range(len(vocab))]:
                    hint = (
                        f" (the model has no symbol names: its symbols are the integers 0..{len(vocab) - 1})"
                    )
                raise ValueError(
                    f"{db.meta.get('source', db.name)}: symbol {name!r} (first in {where}) is not in the "
                    f"model's vocabulary of {len(vocab)} symbols{hint}"
                )
            target = unk
        mapping[code] = -1 if target is None else target
    tokens = mapping[db.tokens.astype(np.int64)]
    return SequenceDatabase(
        tokens, db.offsets, vocab.symbols, db.labels, db.label_names, db.ids, db.name, db.meta
    )
