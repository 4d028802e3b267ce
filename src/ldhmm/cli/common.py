"""What the experiment commands' parsers share: argument types, common options, the handler glue."""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ..data import DATA_ENV_VAR, DATASETS, ChecksumError, fetch, resolve_data_dir
from ..data.seeds import MAX_SEED
from ..experiments.datasets import data_files_present
from ..experiments.lineup import model_names
from ..experiments.tables import failure_lines
from ..models.memory import parse_size

__all__ = [
    "int_at_least",
    "positive_int",
    "nonneg_int",
    "seed_int",
    "finite_nonneg_float",
    "SHARED_OPTIONS",
    "add_command",
    "add_options",
    "add_run_options",
    "add_common_arguments",
    "add_data_arguments",
    "memory_size",
    "call_with_args",
    "column_options",
    "common_options",
    "report_failures",
    "default_data",
    "print_files",
    "OFFLINE_ENV_VAR",
]

#: Set to 1 to never download a data set the command would otherwise fetch.
OFFLINE_ENV_VAR = "LDHMM_OFFLINE"

#: argparse bookkeeping in a parsed namespace, never an argument of an experiment function
_BOOKKEEPING = ("command", "func", "data_command", "max_memory")


def int_at_least(minimum: int, maximum: int | None = None):
    """argparse type: an integer >= ``minimum`` (and <= ``maximum``), with a one-line error
    otherwise."""

    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {v}")
        if maximum is not None and v > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {text}")
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
seed_int = int_at_least(0, MAX_SEED)


def memory_size(text: str) -> int:
    """argparse type of ``--max-memory``."""
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


#: The options several commands take, by flag: their argparse keywords (type, default, help).
#: One definition each, so that e.g. every ``--seed`` parses the same way; a command that says
#: more in its help text, or has another default, passes its own keywords to :func:`add_options`.
SHARED_OPTIONS = {
    "--data-dir": {"default": None, "help": "data directory (default: $LDHMM_DATA)"},
    "--n-sequences": {
        "type": positive_int,
        "default": None,
        "help": "use a seeded random sample of this many sequences",
    },
    "--out": {"default": None, "help": "output directory"},
    "--jobs": {"type": positive_int, "default": 1, "help": "worker processes (default 1)"},
    "--quiet": {"action": "store_true", "help": "no progress bar"},
    "--seed": {"type": seed_int, "default": 0, "help": f"seed, 0..{MAX_SEED} (default 0)"},
    "--max-iter": {"type": positive_int, "default": None, "help": "EM iterations at most"},
    "--tol": {"type": finite_nonneg_float, "default": None, "help": "EM relative tolerance"},
    "--m-step": {
        "choices": ["collapsed", "paper"],
        "default": "collapsed",
        "help": "M-step (default collapsed)",
    },
    "--restarts": {
        "type": positive_int,
        "default": 3,
        "help": "restart budget of every model (default 3)",
    },
    "--force": {"action": "store_true", "help": "reuse an --out of another configuration"},
    "--max-memory": {
        "type": memory_size,
        "default": None,
        "metavar": "SIZE",
        "help": "refuse work whose memory estimate exceeds SIZE (e.g. 64G; default: the machine's memory)",
    },
}


def add_options(p: argparse.ArgumentParser, *flags: str, **own: dict) -> None:
    """Add the :data:`SHARED_OPTIONS` ``flags`` to ``p``, in this order (the order of ``--help``).

    ``own[dest]`` (``dest`` of ``--max-iter`` is ``max_iter``) holds keywords of this command
    that replace the table's, e.g. ``out={"default": "results/timing", "help": ...}``.
    """
    unknown = set(own) - {flag[2:].replace("-", "_") for flag in flags}
    if unknown:
        raise TypeError(f"add_options: keywords of options not added: {', '.join(sorted(unknown))}")
    for flag in flags:
        p.add_argument(flag, **{**SHARED_OPTIONS[flag], **own.get(flag[2:].replace("-", "_"), {})})


def add_run_options(
    p: argparse.ArgumentParser, *em_options: str, with_jobs: bool = True, **own: dict
) -> None:
    """An experiment's output and run options, in this order: ``--out``, ``--jobs`` (unless
    ``with_jobs`` is False), ``--quiet``, ``--seed``, ``--max-iter``, ``--tol``, the ``em_options``
    (e.g. ``--m-step``), ``--force``, ``--max-memory``; ``own`` as in :func:`add_options`."""
    flags = ("--out", "--jobs") if with_jobs else ("--out",)
    add_options(
        p, *flags, "--quiet", "--seed", "--max-iter", "--tol", *em_options, "--force", "--max-memory", **own
    )


def add_command(subparsers, name: str, run: Callable, help: str, description: str) -> argparse.ArgumentParser:
    """The parser of the sub-command ``name`` of ``ldhmm``, whose handler is ``run(args) -> int``."""
    p = subparsers.add_parser(name, help=help, description=description)
    p.set_defaults(func=run)
    return p


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
    add_options(p, "--data-dir", "--n-sequences")
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
    add_run_options(
        p,
        "--m-step",
        "--restarts",
        out={"help": "output directory (default: results/<command>-<data>)"},
        seed={"help": "seed of folds, models and sampling (default 0)"},
        max_iter={"help": "EM iterations at most (default: each model's own, 100)"},
        tol={"help": "EM relative tolerance (default: each model's own)"},
        m_step={
            "help": "M-step of the LDHMM models: 'collapsed' (default; Newton on the "
            "Dirichlet-multinomial likelihood of the expected counts) or 'paper' (q(theta) "
            "held fixed, as in the paper; needs many more EM iterations)"
        },
        restarts={
            "help": "restart budget (n_init) of every model that takes restarts: the same for all (default 3)"
        },
        force={"help": "reuse an --out directory that holds results of another configuration"},
    )


def column_options(args: argparse.Namespace) -> dict:
    """The keyword arguments of the event-log column options (:func:`add_column_arguments`)."""
    return {"sequence_col": args.sequence_col, "event_col": args.event_col, "time_col": args.time_col}


def common_options(args: argparse.Namespace, data_dir) -> dict:
    """The keyword arguments of the API (``compare``, ``classify``) that the options of
    :func:`add_data_arguments` and :func:`add_common_arguments` give, with ``data_dir``."""
    return {
        "states": args.states,
        "folds": args.folds,
        "jobs": args.jobs,
        "out": args.out,
        "seed": args.seed,
        "n_sequences": args.n_sequences,
        "data_dir": data_dir,
        **column_options(args),
        "max_iter": args.max_iter,
        "tol": args.tol,
        "m_step": args.m_step,
        "restarts": args.restarts,
        "force": args.force,
        "quiet": args.quiet,
        "plugins": args.model,
    }


def report_failures(command: str, errors, lines=()) -> int:
    """A task-running command's exit code: 1 when tasks failed, else 0. Prints a warning line per
    model with failed tasks on stderr, then ``lines`` (what the command reports last) on stdout,
    then one error line on stderr when tasks failed."""
    for line in failure_lines(errors):
        print(f"ldhmm {command}: warning: {line}", file=sys.stderr)
    for line in lines:
        print(line)
    if errors:
        print(
            f"ldhmm {command}: error: {len(errors)} task(s) failed (summary.md); rerun to retry them",
            file=sys.stderr,
        )
        return 1
    return 0


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
