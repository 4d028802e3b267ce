"""``ldhmm timing``: the parser of the command; the experiment is :mod:`ldhmm.experiments.timing`."""

from __future__ import annotations

import argparse

from ..experiments.timing import TIMING_MODELS, run_timing
from .common import add_memory_argument, call_with_args, finite_nonneg_float, nonneg_int, positive_int

__all__ = ["register"]


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``timing`` command to the ``ldhmm`` parser's sub-commands."""
    p = subparsers.add_parser(
        "timing",
        help="training time of LDHMM-FF vs LDHMM-PF against K (Figure 6)",
        description="Wall-clock training time of LDHMM-FF and LDHMM-PF for each K on Entree and MSNBC "
        "(the paper's Figure 6).",
    )
    p.add_argument(
        "--dataset",
        nargs="+",
        default=["entree", "msnbc"],
        choices=["entree", "msnbc", "synthetic"],
        help="data sets (default: entree msnbc)",
    )
    p.add_argument("--data-dir", default=None, help="data directory (default: $LDHMM_DATA)")
    p.add_argument("--states", nargs="+", default=["2..6"], metavar="K", help="K values (default 2..6)")
    p.add_argument(
        "--n-sequences",
        type=nonneg_int,
        default=1000,
        help="msnbc/synthetic: seeded sample size (default 1000; 0 = the whole msnbc subset)",
    )
    p.add_argument(
        "--models",
        nargs="+",
        default=list(TIMING_MODELS),
        metavar="NAME",
        help="models to time (default LDHMM-FF LDHMM-PF; any registry name works)",
    )
    p.add_argument("--out", default="results/timing", help="output directory (default results/timing)")
    p.add_argument("--jobs", type=positive_int, default=1, help="worker processes (default 1: clean timings)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--seed", type=nonneg_int, default=0, help="seed (default 0)")
    p.add_argument("--max-iter", type=positive_int, default=None, help="EM iterations at most (default 100)")
    p.add_argument(
        "--tol", type=finite_nonneg_float, default=None, help="EM relative tolerance (default 1e-4)"
    )
    p.add_argument("--force", action="store_true", help="reuse an --out of another configuration")
    add_memory_argument(p)
    p.set_defaults(func=call_with_args(run_timing))
    return p
