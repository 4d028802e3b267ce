"""The ``ldhmm data`` sub-commands: ``fetch``, ``info`` and ``export``.

``add_arguments(p)`` adds them to the ``data`` parser of ``ldhmm``; each handler is set with
``set_defaults(func=...)`` and returns an exit code. Errors in the data (or a missing file)
print one line ``ldhmm data: error: ...`` on stderr and return a non-zero code, without a
traceback. ``python -m ldhmm.cli data info splice --data-dir DIR`` runs it without the
console script.

``export`` writes a data set or a data file as a partitioned data set (a directory of Parquet
files plus ``dataset.json``, :mod:`ldhmm.data.partitions`) that cluster workers read without a
driver; ``info`` also describes such a directory.
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
from pathlib import Path

import numpy as np

from ..data import (
    DATA_ENV_VAR,
    DATASET_NAMES,
    DATASETS,
    LAYOUTS,
    ChecksumError,
    DataFormatError,
    fetch,
    load_dataset,
    read_manifest,
    resolve_data_dir,
    select_events,
    write_partitioned,
)
from ..data.partitions import MANIFEST, ROW_GROUP_TOKENS
from ..data.storage import file_sizes, is_url
from .data_options import add_data_options, check_read_memory, data_options, refuse_data_options

__all__ = ["DESCRIPTION", "add_arguments", "run_fetch", "run_info", "run_export", "length_histogram"]

EXIT_DATA_ERROR = 1
EXIT_USAGE = 2


#: The description of ``ldhmm data --help``.
DESCRIPTION = "Fetch the UCI data sets, inspect data files and export them as partitioned data sets."


def add_arguments(data: argparse.ArgumentParser) -> None:
    """The sub-commands of ``ldhmm data`` (``fetch``, ``info``, ``export``), each with its
    handler; ``ldhmm data`` alone prints its help."""
    data.set_defaults(func=lambda args: (data.print_help(), EXIT_USAGE)[1])
    commands = data.add_subparsers(dest="data_command", metavar="{fetch,info,export}")

    p_fetch = commands.add_parser("fetch", help="download a UCI data set and verify its checksum")
    p_fetch.add_argument("name", choices=sorted(DATASETS), help="data set")
    p_fetch.add_argument("--data-dir", default=None, help="where to put it (default: $LDHMM_DATA)")
    p_fetch.add_argument("--url", default=None, help="download from this URL instead (file:// works)")
    p_fetch.add_argument("--sha256", default=None, help="expected SHA-256 of the standard file")
    p_fetch.add_argument("--force", action="store_true", help="download even if a verified copy exists")
    p_fetch.add_argument("--quiet", action="store_true", help="no progress bar")
    p_fetch.set_defaults(func=run_fetch)

    p_info = commands.add_parser("info", help="describe a data set or a data file")
    _add_source_arguments(p_info)
    p_info.add_argument("--bins", type=int, default=12, help="length histogram bins (at most)")
    p_info.set_defaults(func=run_info)

    p_export = commands.add_parser(
        "export",
        help="write a data set or file as partitioned Parquet files for cluster workers",
        description="Write a data set or a data file as a directory of Parquet files plus dataset.json "
        "(layout 'sequences': one row per sequence; 'events': one row per event), written into a "
        "temporary directory and renamed into place.",
    )
    _add_source_arguments(p_export)
    p_export.add_argument(
        "out",
        metavar="OUT",
        help="output directory (absent or empty), or an fsspec URL such as s3://bucket/parts "
        "(credentials and end point from the environment, e.g. AWS_ENDPOINT_URL)",
    )
    p_export.add_argument(
        "--layout", choices=LAYOUTS, default="sequences", help="one row per sequence or event"
    )
    p_export.add_argument(
        "--files", type=_positive_int, default=8, help="number of Parquet files (default 8)"
    )
    p_export.add_argument(
        "--row-group-tokens",
        type=_positive_int,
        default=ROW_GROUP_TOKENS,
        help=f"sequences layout: tokens per row group, the planning unit (default {ROW_GROUP_TOKENS})",
    )
    p_export.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing data set in OUT (one holding nothing but the files its dataset.json lists)",
    )
    p_export.add_argument("--quiet", action="store_true", help="print nothing on success")
    p_export.set_defaults(func=run_export)


def _add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """The data source of ``info`` and ``export``: a data set name or a path, and its options."""
    parser.add_argument(
        "target",
        metavar="NAME|PATH",
        help=f"a data set ({', '.join(DATASET_NAMES)}), a file, or a partitioned data set's directory",
    )
    parser.add_argument("--data-dir", default=None, help="data directory (default: $LDHMM_DATA)")
    add_data_options(parser, labels=True)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _load_source(args):
    """The database ``target`` names, read and selected by the data options, and its number
    of sequences before the length limits."""
    target = args.target
    path = Path(target)
    is_path = is_url(target) or path.is_file() or (path / MANIFEST).is_file()
    options = data_options(args)
    if target.lower() in DATASET_NAMES and not is_path:
        refuse_data_options(args, f"the data set {target}", selection=False)
        db = load_dataset(target, args.data_dir)
    else:
        check_read_memory(target)
        db = options.load(target)
    db = select_events(db, options.events, options.event_map)
    return options.select_lengths(db), len(db)


def _fail(message: str, code: int = EXIT_DATA_ERROR) -> int:
    one_line = " ".join(str(message).split())
    print(f"ldhmm data: error: {one_line}", file=sys.stderr)
    return code


def run_fetch(args) -> int:
    """Handler of ``ldhmm data fetch``."""
    try:
        data_dir = resolve_data_dir(args.data_dir, must_exist=False)  # fetch creates it
    except FileNotFoundError:
        return _fail(f"no data directory: pass --data-dir DIR or set {DATA_ENV_VAR}", EXIT_USAGE)
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
        db, total = _load_source(args)
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


def run_export(args) -> int:
    """Handler of ``ldhmm data export``."""
    if args.layout != "sequences" and args.row_group_tokens != ROW_GROUP_TOKENS:  # it plans nothing there
        return _fail(
            f"--row-group-tokens plans the sequences layout's row groups: not with --layout {args.layout}"
        )
    try:
        db, _ = _load_source(args)
        out = write_partitioned(
            db,
            args.out,
            layout=args.layout,
            n_files=args.files,
            overwrite=args.overwrite,
            row_group_tokens=args.row_group_tokens,
        )
    except (DataFormatError, ValueError, OSError) as err:
        return _fail(str(err))
    if not args.quiet:
        files = [entry["path"] for entry in read_manifest(out)["files"]]
        size = sum(file_sizes(out, files))
        print(
            f"{out}: {args.layout} layout, {len(files)} files, {len(db)} sequences, {db.n_tokens} tokens, "
            f"{size / 1e6:.1f} MB"
        )
    return 0
