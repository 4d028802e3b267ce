"""``ldhmm hinton``: the parser of the command; the experiment is :mod:`ldhmm.experiments.hinton`."""

from __future__ import annotations

import argparse

from ..experiments.hinton import run_hinton
from .options import add_options, add_run_options, call_with_args, nonneg_int, positive_int

__all__ = ["DESCRIPTION", "add_arguments"]


#: The description of ``ldhmm hinton --help``.
DESCRIPTION = """\
Fit LDHMM-PF and draw Hinton diagrams of the database-level hyper-parameters and of one sequence's
variational parameters (the paper's Figure 7).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``ldhmm hinton`` and its handler."""
    p.set_defaults(func=call_with_args(run_hinton))
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--dataset",
        choices=["entree", "msnbc", "splice", "synthetic"],
        default=None,
        help="default: entree when its files are in the data directory, else synthetic",
    )
    src.add_argument("--file", help="a user's sequence file")
    add_options(
        p, "--data-dir", "--n-sequences", n_sequences={"help": "seeded sample of this many sequences"}
    )
    p.add_argument(
        "--states", type=positive_int, default=6, metavar="K", help="K (default 6, as in the paper)"
    )
    p.add_argument("--sequence", type=nonneg_int, default=0, help="index of the sequence to show (default 0)")
    p.add_argument("--guide", choices=["pf", "ff"], default="pf", help="variational form (default pf)")
    add_run_options(
        p,
        with_jobs=False,
        out={"default": "results/hinton", "help": "output directory (default results/hinton)"},
    )
