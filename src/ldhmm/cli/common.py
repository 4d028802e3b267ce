"""What the experiment commands' parsers share: the data source (``--dataset``/``--file``), the
K grid, folds and models, the experiment's output, and its keyword arguments from the options.
Argument types and the options of every command are in :mod:`ldhmm.cli.options`."""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from ..data import DATA_ENV_VAR, DATASETS, ChecksumError, fetch, resolve_data_dir
from ..experiments.datasets import data_files_present
from ..experiments.lineup import model_names
from ..experiments.tables import failure_lines
from .cluster import add_cluster_arguments
from .data_options import add_data_options, read_data, refuse_data_options
from .options import add_options, add_run_options

__all__ = [
    "add_common_arguments",
    "add_data_arguments",
    "experiment_data",
    "common_options",
    "task_options",
    "TASK_OPTIONS",
    "GRID_FLAGS",
    "report_failures",
    "default_data",
    "print_files",
    "OFFLINE_ENV_VAR",
]

#: Set to 1 to never download a data set the command would otherwise fetch.
OFFLINE_ENV_VAR = "LDHMM_OFFLINE"


def add_data_arguments(
    p: argparse.ArgumentParser, datasets, file_help: str | None = None, labels: bool = False
) -> None:
    """``--dataset`` or ``--file`` (with the data options of :mod:`ldhmm.cli.data_options`;
    ``labels``: the command reads each sequence's class, ``--label-col``)."""
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--dataset", choices=list(datasets), help="a named data set (entree/msnbc: the paper's subsets)"
    )
    src.add_argument(
        "--file",
        help=file_help
        or "a user's data file: one sequence of tokens per line, the ldhmm-sequences text format, "
        "or a CSV/TSV/Parquet event log (with --sequence-col and --event-col)",
    )
    add_data_options(p, labels=labels)


def experiment_data(args: argparse.Namespace, data):
    """The ``data`` argument of an experiment function: the ``--file`` read with the data options
    (:func:`ldhmm.cli.data_options.read_data`), else ``data`` (a data set name or None), which
    the data options do not apply to."""
    if args.file is not None:
        if getattr(args, "data_dir", None) is not None:  # nothing would be read from it
            raise ValueError("--data-dir holds the named data sets (--dataset): not with --file")
        return read_data(args, args.file)
    refuse_data_options(args, f"--dataset {data}" if data else "the default data set")
    return data


#: ``--backend`` of the experiment commands: where their (model, fold) tasks run.
TASKS_BACKEND_HELP = (
    "where the (model, fold) tasks run: --jobs processes of this machine (local, the default) or "
    "the workers of a Dask cluster (dask: --scheduler ADDRESS, or --workers N for a LocalCluster); "
    "the same numbers either way (docs/operations.md)"
)


#: The data and grid options of the cross-validated experiment commands, in their ``--help`` order.
GRID_FLAGS = ("--data-dir", "--n-sequences", "--states", "--folds", "--models")


def add_common_arguments(p: argparse.ArgumentParser, states_default, folds_default: int = 10) -> None:
    """The options ``compare`` and ``classify`` share (data, K grid, folds, models, EM, output)."""
    add_options(
        p,
        *GRID_FLAGS,
        states={
            "default": states_default,
            "help": "numbers of hidden states, integers or ranges like 2..6 (also 2-6 or 2:6; default "
            f"{' '.join(states_default)})",
        },
        folds={"default": folds_default, "help": f"cross-validation folds (default {folds_default})"},
        models={
            "help": "'all' (the built-in models and installed plug-ins) or some of "
            f"{', '.join(model_names())}"
        },
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
        "--effort",
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
    add_cluster_arguments(p, TASKS_BACKEND_HELP)


#: The options of the cross-validated experiment commands (``compare``, ``classify``,
#: ``next-event``) that their API functions take under the same name.
TASK_OPTIONS = (
    "states",
    "folds",
    "jobs",
    "out",
    "seed",
    "n_sequences",
    "max_iter",
    "tol",
    "effort",
    "restarts",
    "force",
    "quiet",
    "backend",
)


def task_options(args: argparse.Namespace, data_dir) -> dict:
    """The keyword arguments of an experiment's API function (``compare``, ``classify``,
    ``next_event``) that the options :data:`TASK_OPTIONS` give, with ``data_dir``."""
    return {**{name: getattr(args, name) for name in TASK_OPTIONS}, "data_dir": data_dir}


def common_options(args: argparse.Namespace, data_dir) -> dict:
    """The keyword arguments of the API (``compare``, ``classify``) that the options of
    :func:`add_data_arguments` and :func:`add_common_arguments` give, with ``data_dir``."""
    return {**task_options(args, data_dir), "m_step": args.m_step, "plugins": args.model}


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
