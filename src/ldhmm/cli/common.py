"""What the experiment commands' parsers share: argument types, common options, the handler glue."""

from __future__ import annotations

import argparse
import inspect
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ..data import DATA_ENV_VAR, DATASETS, ChecksumError, fetch, resolve_data_dir
from ..experiments.datasets import data_files_present
from ..experiments.lineup import model_names
from ..models.memory import parse_size

__all__ = [
    "int_at_least",
    "positive_int",
    "nonneg_int",
    "finite_nonneg_float",
    "add_common_arguments",
    "add_data_arguments",
    "add_memory_argument",
    "memory_size",
    "call_with_args",
    "default_data",
    "print_files",
    "OFFLINE_ENV_VAR",
]

#: Set to 1 to never download a data set the command would otherwise fetch.
OFFLINE_ENV_VAR = "LDHMM_OFFLINE"

#: argparse bookkeeping in a parsed namespace, never an argument of an experiment function
_BOOKKEEPING = ("command", "func", "data_command", "max_memory")


def int_at_least(minimum: int):
    """argparse type: an integer >= ``minimum``, with a one-line error otherwise."""

    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {v}")
        return v

    return parse


def finite_nonneg_float(text: str) -> float:
    """argparse type: a finite number >= 0 (``--tol``)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (v >= 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return v


positive_int = int_at_least(1)
nonneg_int = int_at_least(0)


def add_memory_argument(p: argparse.ArgumentParser) -> None:
    """``--max-memory``: the limit memory estimates are checked against (ldhmm.models.memory)."""
    p.add_argument(
        "--max-memory",
        type=memory_size,
        default=None,
        metavar="SIZE",
        help="refuse work whose memory estimate exceeds SIZE (e.g. 64G; default: the machine's memory)",
    )


def memory_size(text: str) -> int:
    """argparse type of ``--max-memory``."""
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_data_arguments(p: argparse.ArgumentParser, datasets, file_help: str | None = None) -> None:
    """``--dataset`` or ``--file`` (with the event-log column options)."""
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--dataset", choices=list(datasets), help="a named data set (entree/msnbc: the paper's subsets)"
    )
    src.add_argument(
        "--file",
        help=file_help
        or "a user's data file: one sequence of tokens per line, the ldhmm-sequences text format, "
        "or a CSV/Parquet event log (with --sequence-col and --event-col)",
    )
    add_column_arguments(p)


def add_column_arguments(p: argparse.ArgumentParser) -> None:
    """The column options of a CSV/Parquet event log."""
    p.add_argument("--sequence-col", default=None, help="event log: the column of the sequence (session) id")
    p.add_argument("--event-col", default=None, help="event log: the column of the event (symbol)")
    p.add_argument("--time-col", default=None, help="event log: the column that orders a sequence's events")


def add_common_arguments(p: argparse.ArgumentParser, states_default, folds_default: int = 10) -> None:
    """The options ``compare`` and ``classify`` share (data, K grid, folds, models, EM, output)."""
    p.add_argument("--data-dir", default=None, help="data directory (default: $LDHMM_DATA)")
    p.add_argument(
        "--n-sequences",
        type=positive_int,
        default=None,
        help="use a seeded random sample of this many sequences",
    )
    p.add_argument(
        "--states",
        nargs="+",
        default=states_default,
        metavar="K",
        help=f"numbers of hidden states, integers or ranges like 2..6 (default {' '.join(states_default)})",
    )
    p.add_argument(
        "--folds",
        type=positive_int,
        default=folds_default,
        help=f"cross-validation folds (default {folds_default})",
    )
    p.add_argument(
        "--models",
        nargs="+",
        default=["all"],
        metavar="NAME",
        help=f"'all' (the built-in models and installed plug-ins) or some of {', '.join(model_names())}",
    )
    p.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=MODULE:FACTORY",
        help="add a plug-in model: FACTORY(n_states, n_symbols, seed) in the importable module "
        "MODULE returns the model (repeatable)",
    )
    p.add_argument("--out", default=None, help="output directory (default: results/<command>-<data>)")
    p.add_argument("--jobs", type=positive_int, default=1, help="worker processes (default 1)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--seed", type=nonneg_int, default=0, help="seed of folds, models and sampling (default 0)"
    )
    p.add_argument(
        "--max-iter",
        type=positive_int,
        default=None,
        help="EM iterations at most (default: each model's own, 100)",
    )
    p.add_argument(
        "--tol",
        type=finite_nonneg_float,
        default=None,
        help="EM relative tolerance (default: each model's own)",
    )
    p.add_argument(
        "--m-step",
        choices=["collapsed", "paper"],
        default="collapsed",
        help="M-step of the LDHMM models: 'collapsed' (default; Newton on the "
        "Dirichlet-multinomial likelihood of the expected counts) or 'paper' (q(theta) "
        "held fixed, as in the paper; needs many more EM iterations)",
    )
    p.add_argument(
        "--restarts",
        type=positive_int,
        default=3,
        help="restart budget (n_init) of every model that takes restarts: the same for all (default 3)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="reuse an --out directory that holds results of another configuration",
    )
    add_memory_argument(p)


def _default_download_dir(data_dir) -> Path:
    return resolve_data_dir(data_dir, default=Path.home() / ".cache" / "ldhmm" / "data", must_exist=False)


def default_data(args: argparse.Namespace, default: str = "entree"):
    """The data of a command run without ``--dataset``/``--file``: ``default`` from the data
    directory, downloaded there (checksum verified) when missing and a network answers.

    Returns
    -------
    (data, data_dir, note)
        ``data`` for the API (a file, a data set name or None for its own fallback),
        the data directory to use, and a line to print (or "").
    """
    data = args.file or args.dataset
    if data is not None or data_files_present(default, args.data_dir):
        return data, args.data_dir, ""
    cache = _default_download_dir(args.data_dir)
    if cache.is_dir() and data_files_present(default, cache):  # downloaded by an earlier run
        return default, str(cache), ""
    how = f"fetch it with `ldhmm data fetch {default} --data-dir DIR` and set {DATA_ENV_VAR}=DIR"
    if os.environ.get(OFFLINE_ENV_VAR):
        return None, args.data_dir, f"{default} files not found ({OFFLINE_ENV_VAR} is set): {how}"
    target = _default_download_dir(args.data_dir)
    try:
        urllib.request.urlopen(urllib.request.Request(DATASETS[default].urls[0], method="HEAD"), timeout=10)
        fetch(default, target, quiet=args.quiet)
    except (urllib.error.URLError, OSError, ChecksumError, ValueError) as err:
        reason = " ".join(str(getattr(err, "reason", err)).split())
        return None, args.data_dir, f"{default} files not found and not downloaded ({reason}): {how}"
    return default, str(target), f"downloaded {default} into {target} (checksum verified)"


def print_files(out, names) -> None:
    """The line that lists a run's result files."""
    print(f"results in {out}/: {', '.join(n for n in names if (Path(out) / n).exists())}")


def call_with_args(fn: Callable[..., int]) -> Callable[[argparse.Namespace], int]:
    """A sub-command handler that calls the experiment function ``fn`` with the parsed options.

    Each option is passed as the keyword argument of its ``dest`` (``--is-samples`` ->
    ``is_samples``), so a command's options and its experiment function's parameters are one
    list of names; an option without a parameter of that name is a ``TypeError`` (a bug in
    the parser), not silently dropped.
    """
    params = inspect.signature(fn).parameters

    def handler(args: argparse.Namespace) -> int:
        options = {k: v for k, v in vars(args).items() if k not in _BOOKKEEPING}
        unknown = sorted(set(options) - set(params))
        if unknown:
            raise TypeError(f"{fn.__name__} takes no option {', '.join(unknown)}")
        return fn(**options)

    return handler
