"""``ldhmm hinton``: the parser of the command; the experiment is :mod:`ldhmm.experiments.hinton`."""

from __future__ import annotations

import argparse

from ..experiments.hinton import run_hinton
from .common import add_memory_argument, call_with_args, finite_nonneg_float, nonneg_int, positive_int

__all__ = ["register"]


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``hinton`` command to the ``ldhmm`` parser's sub-commands."""
    p = subparsers.add_parser(
        "hinton",
        help="Hinton diagrams of LDHMM-PF's hyper-parameters and one sequence (Figure 7)",
        description="Fit LDHMM-PF and draw Hinton diagrams of the database-level hyper-parameters "
        "and of one sequence's variational parameters (the paper's Figure 7).",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--dataset",
        choices=["entree", "msnbc", "splice", "synthetic"],
        default=None,
        help="default: entree when its files are in the data directory, else synthetic",
    )
    src.add_argument("--file", help="a user's sequence file")
    p.add_argument("--data-dir", default=None, help="data directory (default: $LDHMM_DATA)")
    p.add_argument(
        "--n-sequences", type=positive_int, default=None, help="seeded sample of this many sequences"
    )
    p.add_argument(
        "--states", type=positive_int, default=6, metavar="K", help="K (default 6, as in the paper)"
    )
    p.add_argument("--sequence", type=nonneg_int, default=0, help="index of the sequence to show (default 0)")
    p.add_argument("--guide", choices=["pf", "ff"], default="pf", help="variational form (default pf)")
    p.add_argument("--out", default="results/hinton", help="output directory (default results/hinton)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--seed", type=nonneg_int, default=0, help="seed (default 0)")
    p.add_argument("--max-iter", type=positive_int, default=None, help="EM iterations at most")
    p.add_argument("--tol", type=finite_nonneg_float, default=None, help="EM relative tolerance")
    p.add_argument("--force", action="store_true", help="reuse an --out of another configuration")
    add_memory_argument(p)
    p.set_defaults(func=call_with_args(run_hinton))
    return p
