"""``ldhmm next-event``: a parser over :func:`ldhmm.experiments.next_event.next_event`."""

from __future__ import annotations

import argparse
import sys

from ..experiments.next_event import DEFAULT_MODELS, next_event
from ..experiments.tables import failure_lines
from .cluster import add_cluster_arguments, dask_client
from .common import (
    GRID_FLAGS,
    TASKS_BACKEND_HELP,
    add_data_arguments,
    experiment_data,
    print_files,
    task_options,
)
from .options import add_options

__all__ = ["DESCRIPTION", "add_arguments", "run_next_event"]


#: The description of ``ldhmm next-event --help``.
DESCRIPTION = """\
Predict each held-out sequence's last event from its prefix: LDHMM under the sequence's own
posterior, HMM by the forward filter, and Markov chains over the events (no K: MARKOV1 first order
and MARKOV3 orders 0..3, smoothing chosen on the training folds; MARKOV first order, add-0.5).
Default: the MSNBC paper subset (31,071 sequences), 5 folds, K = 2 4 8.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``ldhmm next-event`` and its handler."""
    p.set_defaults(func=run_next_event)
    add_data_arguments(
        p,
        datasets=["msnbc", "entree", "synthetic"],
        file_help="a user's data file (any format `ldhmm data info` reads; default data: msnbc)",
    )
    add_options(
        p,
        *GRID_FLAGS,
        "--restarts",
        "--max-iter",
        "--tol",
        "--effort",
        "--out",
        "--jobs",
        "--seed",
        "--force",
        "--quiet",
        "--max-memory",
        n_sequences={"help": "a seeded random sample of this many"},
        states={
            "default": ["2", "4", "8"],
            "help": "K values: integers or ranges like 2..6 (also 2-6; default 2 4 8)",
        },
        folds={"default": 5, "help": "cross-validation folds (default 5)"},
        models={"default": list(DEFAULT_MODELS), "help": "models (default: %(default)s)"},
        max_iter={"help": "EM iterations at most (default: each model's)"},
        tol={"help": "EM relative tolerance (default: each model's)"},
        out={"help": "output directory (default results/next-event-<data>)"},
    )
    add_cluster_arguments(p, TASKS_BACKEND_HELP)


#: The sections of ``summary.md`` printed in the terminal: every measure of the tables, the verdict.
TERMINAL_SECTIONS = ("Log loss", "hit@1", "hit@3", "Verdict")


def terminal_summary(summary: str) -> str:
    """The sections of ``summary.md`` that the terminal shows (:data:`TERMINAL_SECTIONS`), each
    under its title: the log loss, hit@1 and hit@3 tables, and the verdict."""
    sections = summary.split("\n## ")[1:]
    return "\n\n".join(s.strip() for s in sections if s.startswith(TERMINAL_SECTIONS))


def run_next_event(args: argparse.Namespace) -> int:
    """The ``next-event`` command."""
    data = experiment_data(args, args.dataset or "msnbc")
    with dask_client(args) as client:
        result = next_event(args.models, data, client=client, **task_options(args, args.data_dir))
    print(f"data: {result.data}\n")
    print(terminal_summary(result.summary))
    print()
    print_files(result.out, ["folds.csv", "summary.md", "next_event.png"])
    for line in failure_lines(result.errors):
        print(f"ldhmm next-event: warning: {line}", file=sys.stderr)
    return 1 if result.errors else 0
