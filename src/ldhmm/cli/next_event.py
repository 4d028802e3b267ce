"""``ldhmm next-event``: a parser over :func:`ldhmm.experiments.next_event.next_event`."""

from __future__ import annotations

import argparse
import sys

from ..experiments.next_event import DEFAULT_MODELS, next_event
from ..experiments.tables import failure_lines
from .common import add_memory_argument, finite_nonneg_float, nonneg_int, positive_int, print_files

__all__ = ["register", "run_next_event"]


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``next-event`` command to the ``ldhmm`` parser's sub-commands."""
    p = subparsers.add_parser(
        "next-event",
        help="cross-validated next-event prediction (log loss, hit@1, hit@3)",
        description="Predict each held-out sequence's last event from its prefix: LDHMM under the "
        "sequence's own posterior, HMM by the forward filter, and a smoothed first-order Markov "
        "chain (MARKOV). Default: the MSNBC paper subset (31,071 sequences), 5 folds, K = 2 4 8.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--dataset", choices=["msnbc", "entree", "synthetic"], default=None, help="default msnbc"
    )
    src.add_argument("--file", help="a user's data file (any format `ldhmm data info` reads)")
    p.add_argument("--data-dir", default=None, help="data directory (default: $LDHMM_DATA)")
    p.add_argument(
        "--n-sequences", type=positive_int, default=None, help="a seeded random sample of this many"
    )
    p.add_argument(
        "--states", nargs="+", default=["2", "4", "8"], metavar="K", help="K values (default 2 4 8)"
    )
    p.add_argument("--folds", type=positive_int, default=5, help="cross-validation folds (default 5)")
    p.add_argument(
        "--models",
        nargs="+",
        default=list(DEFAULT_MODELS),
        metavar="NAME",
        help="models (default: %(default)s)",
    )
    p.add_argument(
        "--restarts", type=positive_int, default=3, help="restart budget of every model (default 3)"
    )
    p.add_argument(
        "--max-iter", type=positive_int, default=None, help="EM iterations at most (default: each model's)"
    )
    p.add_argument(
        "--tol", type=finite_nonneg_float, default=None, help="EM relative tolerance (default: each model's)"
    )
    p.add_argument("--out", default=None, help="output directory (default results/next-event-<data>)")
    p.add_argument("--jobs", type=positive_int, default=1, help="worker processes (default 1)")
    p.add_argument("--seed", type=nonneg_int, default=0, help="seed (default 0)")
    p.add_argument("--force", action="store_true", help="reuse an --out of another configuration")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_memory_argument(p)
    p.set_defaults(func=run_next_event)
    return p


def run_next_event(args: argparse.Namespace) -> int:
    """The ``next-event`` command."""
    result = next_event(
        args.models,
        args.file or args.dataset or "msnbc",
        states=args.states,
        folds=args.folds,
        jobs=args.jobs,
        out=args.out,
        seed=args.seed,
        n_sequences=args.n_sequences,
        data_dir=args.data_dir,
        max_iter=args.max_iter,
        tol=args.tol,
        restarts=args.restarts,
        force=args.force,
        quiet=args.quiet,
    )
    print(f"data: {result.data}\n")
    print(result.summary.split("## hit@1")[0].split("\n## ", 1)[-1].strip())
    print()
    print_files(result.out, ["folds.csv", "summary.md", "next_event.png"])
    for line in failure_lines(result.errors):
        print(f"ldhmm next-event: warning: {line}", file=sys.stderr)
    return 1 if result.errors else 0
