"""The ``ldhmm data`` sub-commands: ``fetch`` and ``info``.

``register(subparsers)`` adds them to the main ``ldhmm`` parser; each handler is set with
``set_defaults(func=...)`` and returns an exit code. Errors in the data (or a missing file)
print one line ``ldhmm data: error: ...`` on stderr and return a non-zero code, without a
traceback. ``python -m ldhmm.cli data info splice --data-dir DIR`` runs it without the
console script.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
from pathlib import Path

import numpy as np

from ..data import DATASET_NAMES, DATASETS, ChecksumError, DataFormatError, fetch, load_dataset, load_path

__all__ = ["register", "run_fetch", "run_info", "length_histogram"]

EXIT_DATA_ERROR = 1
EXIT_USAGE = 2


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``data`` command (with ``fetch`` and ``info``) to an argparse subparsers object."""
    data = subparsers.add_parser(
        "data",
        help="fetch and inspect data sets",
        description="Fetch the UCI data sets and inspect data files.",
    )
    data.set_defaults(func=lambda args: (data.print_help(), EXIT_USAGE)[1])
    commands = data.add_subparsers(dest="data_command", metavar="{fetch,info}")

    p_fetch = commands.add_parser("fetch", help="download a UCI data set and verify its checksum")
    p_fetch.add_argument("name", choices=sorted(DATASETS), help="data set")
    p_fetch.add_argument("--data-dir", default=None, help="where to put it (default: $LDHMM_DATA)")
    p_fetch.add_argument("--url", default=None, help="download from this URL instead (file:// works)")
    p_fetch.add_argument("--sha256", default=None, help="expected SHA-256 of the standard file")
    p_fetch.add_argument("--force", action="store_true", help="download even if a verified copy exists")
    p_fetch.add_argument("--quiet", action="store_true", help="no progress bar")
    p_fetch.set_defaults(func=run_fetch)

    p_info = commands.add_parser("info", help="describe a data set or a data file")
    p_info.add_argument(
        "target", metavar="NAME|PATH", help=f"a data set ({', '.join(DATASET_NAMES)}) or a file"
    )
    p_info.add_argument("--data-dir", default=None, help="data directory (default: $LDHMM_DATA)")
    p_info.add_argument("--min-length", type=int, default=None, help="keep sequences at least this long")
    p_info.add_argument("--max-length", type=int, default=None, help="keep sequences at most this long")
    p_info.add_argument("--sequence-col", default=None, help="event logs: sequence id column")
    p_info.add_argument("--event-col", default=None, help="event logs: event column")
    p_info.add_argument("--time-col", default=None, help="event logs: time/order column")
    p_info.add_argument("--bins", type=int, default=12, help="length histogram bins (at most)")
    p_info.set_defaults(func=run_info)
    return data


def _fail(message: str, code: int = EXIT_DATA_ERROR) -> int:
    one_line = " ".join(str(message).split())
    print(f"ldhmm data: error: {one_line}", file=sys.stderr)
    return code


def run_fetch(args) -> int:
    """Handler of ``ldhmm data fetch``."""
    data_dir = args.data_dir or os.environ.get("LDHMM_DATA")
    if not data_dir:
        return _fail("no data directory: pass --data-dir DIR or set LDHMM_DATA", EXIT_USAGE)
    try:
        fetch(
            args.name,
            data_dir,
            url=args.url,
            sha256=getattr(args, "sha256", None),
            quiet=args.quiet,
            force=getattr(args, "force", False),
        )
    except (ChecksumError, ValueError, urllib.error.URLError, OSError) as err:
        return _fail(str(err))
    return 0


def length_histogram(lengths: np.ndarray, bins: int = 12, width: int = 40) -> str:
    """A text histogram of sequence lengths with geometric (for wide ranges) or unit bins."""
    lengths = np.asarray(lengths)
    if lengths.size == 0:
        return "(no sequences)"
    lo, hi = int(lengths.min()), int(lengths.max())
    if hi - lo + 1 <= bins:
        edges = np.arange(lo, hi + 2)
    else:
        edges = np.unique(np.round(np.geomspace(lo, hi + 1, bins + 1)).astype(np.int64))
        edges[0], edges[-1] = lo, hi + 1
    counts, _ = np.histogram(lengths, bins=edges)
    top = max(int(counts.max()), 1)
    lines = []
    for a, b, c in zip(edges[:-1], edges[1:], counts):
        label = f"{a}" if b - a == 1 else f"{a}-{b - 1}"
        bar = "#" * int(round(width * c / top))
        lines.append(f"  {label:>13} | {int(c):>9} {bar}")
    return "\n".join(lines)


def run_info(args) -> int:
    """Handler of ``ldhmm data info``."""
    target = args.target
    try:
        if target.lower() in DATASET_NAMES and not Path(target).is_file():
            db = load_dataset(target, args.data_dir)
        else:
            db = load_path(
                target,
                getattr(args, "sequence_col", None),
                getattr(args, "event_col", None),
                getattr(args, "time_col", None),
            )
        total = len(db)
        db = db.filter_length(args.min_length, args.max_length)
    except (DataFormatError, ValueError, OSError) as err:
        return _fail(str(err))
    bounds = ""
    if args.min_length is not None or args.max_length is not None:
        lo = args.min_length if args.min_length is not None else 1
        hi = args.max_length if args.max_length is not None else "inf"
        bounds = f" (length {lo}..{hi}; {total} before the filter)"
    stats = db.length_stats()
    print(f"{db.name or target}: {len(db)} sequences{bounds}, {stats['tokens']} tokens")
    if stats["n"]:
        print(
            f"lengths: min {stats['min']}, median {stats['median']:g}, "
            f"mean {stats['mean']:.2f}, max {stats['max']}"
        )
    if db.labels is not None:
        print("classes: " + ", ".join(f"{k} {v}" for k, v in db.class_counts().items()))
    counts = db.symbol_counts()
    print(f"vocabulary ({db.n_symbols} symbols):")
    for k, (symbol, c) in enumerate(zip(db.vocabulary, counts)):
        print(f"  {k:>3} {symbol:<20} {int(c):>10}")
    print("length histogram:")
    print(length_histogram(db.lengths, bins=max(1, args.bins)))
    return 0
