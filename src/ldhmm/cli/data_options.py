"""The data options of every command that reads a data file, defined once.

Two functions make a command read a user's log: :func:`add_data_options` adds the options to
its parser, :func:`read_data` reads the file named on its command line with them (in a saved
model's codes when given the model)::

    p.add_argument("data")
    add_data_options(p)
    ...
    db = read_data(args)                  # the file args.data
    db = read_data(args, model=model)     # ... in the model's vocabulary (args.unknown, if any)

The options (``--help`` shows them as one group, "data options"):

``--sequence-col COL``, ``--event-col COL``, ``--time-col COL``
    the columns of an event log (CSV, TSV or Parquet): sequence id, event name, and the
    column that orders a sequence's events (without it: file order, with a warning when a
    time-like column goes backwards);
``--label-col COL``
    the column of each sequence's class (``ldhmm classify`` on a log; the same value on every
    row of a sequence);
``--sep CHAR``
    the field separator of a CSV log: one character, ``tab`` or ``\\t`` for a tab (default: a
    tab for ``.tsv``/``.tab`` files, else a comma);
``--event-map FILE``
    rename events: one ``RAW,NAME`` per line (tab-separated in a ``.tsv`` file), ``#``
    comments; raw names not in the file keep their name, several may share one name;
``--events NAME,NAME,...``
    keep only these events (names after the map); sequences left empty are dropped;
``--min-length N``, ``--max-length N``
    keep sequences of N..M events (inclusive, counted after the event filter).

The reading itself is :class:`ldhmm.data.DataOptions`, so that the API and every command read
a file the same way and say the same things about it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..data import DataOptions, SequenceDatabase, read_event_map
from ..data.regular_files import content_bytes
from ..modelfiles import data_for_model
from ..models.memory import READ_BYTES_PER_CONTENT_BYTE, check_memory, format_size, memory_limit, read_bytes
from .options import positive_int

__all__ = [
    "add_data_options",
    "read_data",
    "check_read_memory",
    "data_options",
    "refuse_data_options",
    "DATA_OPTIONS",
]


def _separator(text: str) -> str:
    """argparse type of ``--sep``: one character; ``tab`` or ``\\t`` is a tab."""
    sep = "\t" if text in ("tab", "\\t") else text
    if len(sep) != 1 or sep in '\r\n"':
        raise argparse.ArgumentTypeError(
            f"expected one character (or 'tab'), other than a quote or a line break, got {text!r}"
        )
    return sep


def _event_names(text: str) -> tuple[str, ...]:
    """argparse type of ``--events``: comma-separated names, none empty."""
    names = tuple(n.strip() for n in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected NAME,NAME,... without empty names, got {text!r}")
    return names


#: The data options by flag: their argparse keywords. The ``dest`` of each is the field of
#: :class:`ldhmm.data.DataOptions` it sets (``--event-map`` holds the file's name until read).
DATA_OPTIONS = {
    "--sequence-col": {"metavar": "COL", "help": "event log: the column of the sequence (user, session) id"},
    "--event-col": {"metavar": "COL", "help": "event log: the column of the event name"},
    "--time-col": {
        "metavar": "COL",
        "help": "event log: the column that orders a sequence's events (default: file order)",
    },
    "--label-col": {
        "metavar": "COL",
        "help": "event log: the column of each sequence's class (classify; one value per sequence)",
    },
    "--sep": {
        "type": _separator,
        "metavar": "CHAR",
        "help": "event log: field separator, one character or 'tab' (default: tab for .tsv/.tab, else ',')",
    },
    "--event-map": {
        "metavar": "FILE",
        "help": "rename events: lines RAW,NAME (tab-separated in a .tsv file); others keep their name",
    },
    "--events": {
        "type": _event_names,
        "metavar": "NAME,...",
        "help": "keep only these events (after --event-map); sequences left empty are dropped",
    },
    "--min-length": {"type": positive_int, "metavar": "N", "help": "keep sequences of at least N events"},
    "--max-length": {"type": positive_int, "metavar": "N", "help": "keep sequences of at most N events"},
}

#: The options that say how a file is read (the others select events and sequences).
_FILE_FLAGS = ("--sequence-col", "--event-col", "--time-col", "--label-col", "--sep")


def _dest(flag: str) -> str:
    return flag[2:].replace("-", "_")


def _labels_unused(text: str) -> str:
    raise argparse.ArgumentTypeError(
        "this command does not read classes; a labelled event log's classes are for `ldhmm classify` "
        "and `ldhmm data`"
    )


def add_data_options(p: argparse.ArgumentParser, labels: bool = False) -> None:
    """Add the data options (:data:`DATA_OPTIONS`) to ``p``, as the group "data options".
    ``labels``: the command reads each sequence's class (``--label-col``); elsewhere the option is
    hidden and refused in one line naming the commands that read it (not read and dropped)."""
    group = p.add_argument_group(
        "data options", "how a data file is read, and which of its events and sequences are used"
    )
    for flag, keywords in DATA_OPTIONS.items():
        if flag == "--label-col" and not labels:
            keywords = {"type": _labels_unused, "help": argparse.SUPPRESS}
        group.add_argument(flag, default=None, **keywords)


def data_options(args: argparse.Namespace) -> DataOptions:
    """The :class:`ldhmm.data.DataOptions` of the parsed data options (the event map read)."""
    if args.min_length is not None and args.max_length is not None and args.min_length > args.max_length:
        raise ValueError(f"--min-length {args.min_length} is larger than --max-length {args.max_length}")
    values = {_dest(flag): getattr(args, _dest(flag)) for flag in DATA_OPTIONS}
    if values["event_map"] is not None:
        values["event_map"] = read_event_map(values["event_map"])
    return DataOptions(**values)


def given_data_options(args: argparse.Namespace, selection: bool = True) -> list[str]:
    """The data options given on the command line (with ``selection`` False: only those that
    say how a file is read: columns and separator)."""
    flags = DATA_OPTIONS if selection else _FILE_FLAGS
    return [flag for flag in flags if getattr(args, _dest(flag), None) is not None]


def refuse_data_options(args: argparse.Namespace, source: str, selection: bool = True) -> None:
    """A ``ValueError`` naming the data options given (see :func:`given_data_options`), which do
    not apply to ``source`` (e.g. ``"--dataset msnbc"``)."""
    given = given_data_options(args, selection)
    if given:
        verb = "applies" if len(given) == 1 else "apply"
        raise ValueError(f"{', '.join(given)} {verb} to a data file, not to {source}")


def read_data(
    args: argparse.Namespace, path=None, model=None, unknown: str | None = None
) -> SequenceDatabase:
    """The data file ``path`` (default ``args.data``) read with the parsed data options.

    With ``model`` (a fitted model): its symbols mapped into the model's vocabulary by name
    (:func:`ldhmm.modelfiles.data_for_model`); a symbol the model lacks is an error naming it,
    or (``unknown="map"``) the model's ``<unk>``; ``unknown`` defaults to ``args.unknown`` where
    the command has that option.
    """
    options = data_options(args)
    path = args.data if path is None else path
    check_read_memory(path)
    if model is None:
        return options.read(path)
    if unknown is None:
        unknown = getattr(args, "unknown", "error")
    return data_for_model(path, model, unknown=unknown, options=options)


def check_read_memory(path) -> None:
    """Refuse, before reading, a data file whose content (a gzip file's decompressed, counted
    no further than the limit allows) needs more memory to read than the limit
    (:func:`ldhmm.models.memory.read_bytes`). A partitioned data set's directory or URL is
    read a partition at a time and not checked here."""
    if not Path(path).is_file():
        return
    budget = memory_limit() // READ_BYTES_PER_CONTENT_BYTE
    n = content_bytes(path, budget)
    check_memory(
        read_bytes(n),
        f"reading {path} ({'more than ' if n > budget else ''}{format_size(n)} of content)",
        "a smaller data file",
    )
