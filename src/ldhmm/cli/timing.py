"""``ldhmm timing``: the parser of the command; the experiment is :mod:`ldhmm.experiments.timing`."""

from __future__ import annotations

import argparse

from ..experiments.timing import TIMING_MODELS, run_timing
from .options import add_options, add_run_options, call_with_args, nonneg_int

__all__ = ["DESCRIPTION", "add_arguments"]


#: The description of ``ldhmm timing --help``.
DESCRIPTION = """\
Wall-clock training time of LDHMM-FF and LDHMM-PF for each K on Entree and MSNBC (the paper's Figure
6).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``ldhmm timing`` and its handler."""
    p.set_defaults(func=call_with_args(run_timing))
    p.add_argument(
        "--dataset",
        nargs="+",
        default=["entree", "msnbc"],
        choices=["entree", "msnbc", "synthetic"],
        help="data sets (default: entree msnbc)",
    )
    add_options(
        p,
        "--data-dir",
        "--states",
        "--n-sequences",
        "--models",
        n_sequences={
            "type": nonneg_int,
            "default": 1000,
            "help": "msnbc/synthetic: seeded sample size (default 1000; 0 = the whole msnbc subset)",
        },
        models={
            "default": list(TIMING_MODELS),
            "help": "models to time (default LDHMM-FF LDHMM-PF; any registry name works)",
        },
    )
    add_run_options(
        p,
        out={"default": "results/timing", "help": "output directory (default results/timing)"},
        jobs={"help": "worker processes (default 1: clean timings)"},
        max_iter={"help": "EM iterations at most (default 100)"},
        tol={"help": "EM relative tolerance (default 1e-4)"},
    )
