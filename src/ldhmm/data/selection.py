"""Which part of a data file to use: the options every command that reads a log takes.

:class:`DataOptions` is the one description of how a user's data file is read: the columns and
separator of an event log (passed to :func:`ldhmm.data.load_path`), then which events are kept
under which names (:func:`select_events`), then which sequences by length. ``ldhmm``'s data
options (``ldhmm.cli.data_options``) build one from the command line; from Python::

    db = DataOptions(sequence_col="user", event_col="event", sep=";", events=("view", "buy"),
                     min_length=2).read("shop.csv")

The order is fixed: the file is read (and ordered by its time column), events are renamed by
the map, events not kept are removed from their sequences, and the length limits apply to
what is left, so ``min_length`` counts the events that are used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from .database import DataFormatError, SequenceDatabase, offsets_of
from .files import load_path
from .regular_files import open_regular
from .userdata import csv_separator

__all__ = ["DataOptions", "select_events", "read_event_map"]


@dataclasses.dataclass(frozen=True)
class DataOptions:
    """How a data file is read and which of its events and sequences are used.

    Parameters
    ----------
    sequence_col, event_col, time_col : str, optional
        Columns of an event log (:func:`ldhmm.data.load_event_log`).
    label_col : str, optional
        The column of each sequence's class in an event log (one value per sequence).
    sep : str, optional
        Field separator of a CSV event log, one character (default: a tab for ``.tsv``/``.tab``
        files, else a comma).
    events : sequence of str, optional
        Keep only these events (names after ``event_map``); the others are removed from their
        sequences, and a sequence left without events is dropped.
    event_map : mapping of str to str, optional
        ``{raw name: name}``: events renamed before anything else (several raw names may share
        a name: they become one symbol); names not in the map are kept as they are.
    min_length, max_length : int, optional
        Keep the sequences with ``min_length <= length <= max_length`` events (after the event
        selection; both inclusive).
    """

    sequence_col: str | None = None
    event_col: str | None = None
    time_col: str | None = None
    sep: str | None = None
    events: Sequence[str] | None = None
    event_map: Mapping[str, str] | None = None
    min_length: int | None = None
    max_length: int | None = None
    label_col: str | None = None

    def __post_init__(self):
        if self.sep is not None:
            csv_separator("", self.sep)  # one character: else a ValueError naming it
        for name in ("min_length", "max_length"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, np.integer)) or value < 1):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.min_length is not None and self.max_length is not None and self.min_length > self.max_length:
            raise ValueError(f"min_length {self.min_length} is larger than max_length {self.max_length}")
        if self.events is not None:
            if isinstance(self.events, str) or not all(isinstance(e, str) and e for e in self.events):
                raise ValueError(f"events must be a list of non-empty names, got {self.events!r}")
            if not self.events:
                raise ValueError("events is empty: name at least one event to keep")

    def load(self, path) -> SequenceDatabase:
        """The whole file (:func:`ldhmm.data.load_path` with the columns and the separator)."""
        return load_path(
            path, self.sequence_col, self.event_col, self.time_col, sep=self.sep, label_col=self.label_col
        )

    def select(self, db: SequenceDatabase) -> SequenceDatabase:
        """``db`` after the event map, the event filter and the length limits (``db`` itself
        when none is set)."""
        return self.select_lengths(select_events(db, self.events, self.event_map))

    def select_lengths(self, db: SequenceDatabase) -> SequenceDatabase:
        """The sequences of ``db`` within the length limits; an error when none is left."""
        out = db.filter_length(self.min_length, self.max_length)
        if len(out) == 0 and len(db):
            lo, hi = self.min_length or 1, self.max_length or "inf"
            raise ValueError(
                f"{_source(db)}: no sequence has a length in {lo}..{hi} (min_length/max_length, "
                f"--min-length/--max-length); the {len(db)} sequences have lengths "
                f"{int(db.lengths.min())}..{int(db.lengths.max())}"
            )
        return out

    def read(self, path) -> SequenceDatabase:
        """The file at ``path``, read and selected (:meth:`load`, then :meth:`select`).

        The database's ``meta`` records where and how: ``"source"`` (the path, where the reader
        did not set it) and ``"data_options"`` (:meth:`given`), so that a cluster's workers can
        read the same database again instead of being sent it.
        """
        db = self.select(self.load(path))
        db.meta.setdefault("source", str(path))
        db.meta["data_options"] = self.given()
        return db

    def given(self) -> dict:
        """The options that are set (not None), by name: ``DataOptions(**options.given())``
        reads as ``options`` does (``events`` as a list, ``event_map`` as a dict)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out = {name: value for name, value in out.items() if value is not None}
        if "events" in out:
            out["events"] = list(out["events"])
        if "event_map" in out:
            out["event_map"] = dict(out["event_map"])
        return out

    @property
    def selects(self) -> bool:
        """Whether events or sequences are selected (else :meth:`select` returns its input)."""
        limits = (self.events, self.event_map, self.min_length, self.max_length)
        return any(v is not None for v in limits)


def _source(db: SequenceDatabase) -> str:
    return str(db.meta.get("source", db.name or "data"))


def select_events(
    db: SequenceDatabase, keep: Sequence[str] | None = None, mapping: Mapping[str, str] | None = None
) -> SequenceDatabase:
    """The database with its events renamed by ``mapping`` and only those named in ``keep``.

    Parameters
    ----------
    db : SequenceDatabase
        M sequences over V symbols.
    keep : sequence of str, optional
        Names (after ``mapping``) of the events to keep; every name must be one of the
        database's (after ``mapping``), else a ``ValueError`` naming it.
    mapping : mapping of str to str, optional
        ``{name: new name}``; names not in it are kept. Several names may map to one.

    Returns
    -------
    SequenceDatabase
        ``db`` itself when neither is given. Otherwise the M' <= M sequences that keep at least
        one event (labels and ids with them), their events in order; the vocabulary is the
        (mapped, kept) names in the order of their first symbol in ``db``'s vocabulary.
    """
    if keep is None and not mapping:
        return db
    names = [mapping.get(n, n) if mapping else n for n in db.vocabulary]
    if keep is not None:
        unknown = [e for e in dict.fromkeys(keep) if e not in set(names)]
        if unknown:
            shown = ", ".join(map(repr, unknown[:5])) + (" ..." if len(unknown) > 5 else "")
            present = ", ".join(dict.fromkeys(names))
            raise ValueError(
                f"{_source(db)}: event(s) {shown} to keep (events, --events) not in the data; "
                f"its events are: {present}"
            )
    kept = set(names) if keep is None else set(keep)
    vocabulary = [n for n in dict.fromkeys(names) if n in kept]
    index = {n: k for k, n in enumerate(vocabulary)}
    new_code = np.array([index.get(n, -1) for n in names], dtype=np.int64)
    codes = new_code[db.tokens.astype(np.int64)]
    used = codes >= 0
    owner = np.repeat(np.arange(len(db)), db.lengths)
    lengths = np.bincount(owner[used], minlength=len(db)).astype(np.int64)
    alive = lengths > 0
    if not alive.any():
        raise ValueError(f"{_source(db)}: no events are left after the event selection (events, --events)")
    rows = np.flatnonzero(alive)
    return SequenceDatabase(
        codes[used],
        offsets_of(lengths[alive]),
        vocabulary,
        labels=None if db.labels is None else db.labels[rows],
        label_names=db.label_names,
        ids=None if db.ids is None else [db.ids[i] for i in rows],
        name=db.name,
        meta=db.meta,
    )


def read_event_map(path) -> dict[str, str]:
    """The event map in the file ``path``: one ``RAW,NAME`` per line (a tab instead of the comma
    in a ``.tsv``/``.tab`` file), no header; blank lines and lines starting with ``#`` are
    skipped, spaces around a name are dropped.

    Returns
    -------
    dict
        ``{raw name: name}``.

    Raises
    ------
    DataFormatError
        A line without exactly two non-empty fields, a raw name given twice, undecodable text
        or no mapping at all (naming file and line).
    """
    path = Path(path)
    sep = csv_separator(path)
    mapping: dict[str, str] = {}
    with open_regular(path, "event map") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DataFormatError(path, None, f"not UTF-8 text ({err.reason})") from None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [f.strip() for f in line.split(sep)]
        if len(fields) != 2 or not all(fields):
            expected = f"RAW{sep}NAME (two non-empty fields separated by {sep!r})"
            raise DataFormatError(path, lineno, f"expected {expected}, got {line!r}")
        if fields[0] in mapping:
            raise DataFormatError(path, lineno, f"event {fields[0]!r} is mapped twice")
        mapping[fields[0]] = fields[1]
    if not mapping:
        raise DataFormatError(path, None, "no mappings (expected lines RAW,NAME)")
    return mapping
