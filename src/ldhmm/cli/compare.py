"""``ldhmm compare``: the parser of the command; the experiment is :mod:`ldhmm.experiments.compare`."""

from __future__ import annotations

import argparse

from ..experiments.compare import run_compare
from .common import add_common_arguments, call_with_args

__all__ = ["register"]


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``compare`` command to the ``ldhmm`` parser's sub-commands."""
    p = subparsers.add_parser(
        "compare",
        help="cross-validated held-out log-likelihood of the models against K",
        description="K-fold cross-validated held-out log-likelihood of LDHMM-FF, LDHMM-PF and the "
        "baselines for a list of K (the paper's Figures 4 and 5). Without --dataset or "
        "--file: Entree from the data directory when its files are there, otherwise a "
        "built-in synthetic LDHMM database.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--dataset",
        choices=["entree", "msnbc", "splice", "synthetic"],
        help="a named data set (entree/msnbc: the paper's length-filtered subsets)",
    )
    src.add_argument(
        "--file",
        help="a user's sequence file (one sequence of tokens per line, or the ldhmm-sequences text format)",
    )
    add_common_arguments(p, states_default=["2..6"])
    p.add_argument(
        "--is-samples",
        type=int,
        default=100,
        help="importance samples per test sequence for heldout_is (0: skip; default 100)",
    )
    p.set_defaults(func=call_with_args(run_compare))
    return p
