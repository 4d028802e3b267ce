"""``ldhmm classify``: the parser of the command; the experiment is :mod:`ldhmm.experiments.classify`."""

from __future__ import annotations

import argparse

from ..experiments.classify import run_classify
from .common import add_common_arguments, call_with_args

__all__ = ["register"]


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``classify`` command to the ``ldhmm`` parser's sub-commands."""
    p = subparsers.add_parser(
        "classify",
        help="generative sequence classification AUCs (the paper's Table 3)",
        description="One model per class, AUC of the log-likelihood ratio on held-out folds, for "
        "binary tasks (splice: EI-IE, EI-N, IE-N), plus LDHMM posterior features in a "
        "logistic regression (model NAME+LR).",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--dataset",
        choices=["splice", "synthetic"],
        default=None,
        help="labelled data set (default splice; synthetic: a built-in two-class database)",
    )
    src.add_argument("--file", help="a labelled file in the ldhmm-sequences text format")
    p.add_argument(
        "--task",
        nargs="+",
        default=None,
        metavar="A-B",
        help="binary tasks as CLASS-CLASS (default: every pair; splice: EI-IE EI-N IE-N)",
    )
    add_common_arguments(p, states_default=["2", "3", "4"])
    p.add_argument("--no-lr", action="store_true", help="skip the LDHMM-features + logistic regression rows")
    p.add_argument("--lr-c", type=float, default=1.0, help="inverse L2 strength C of the logistic regression")
    p.set_defaults(func=call_with_args(run_classify))
    return p
