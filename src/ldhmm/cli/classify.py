"""``ldhmm classify``: a parser over :func:`ldhmm.experiments.classify.classify` (the API)."""

from __future__ import annotations

import argparse

from ..experiments.classify import classify
from .cluster import dask_client
from .common import (
    add_common_arguments,
    add_data_arguments,
    common_options,
    experiment_data,
    print_files,
    report_failures,
)
from .options import options_given

__all__ = ["DESCRIPTION", "add_arguments", "run_classify"]


#: The description of ``ldhmm classify --help``.
DESCRIPTION = """\
One model per class, AUC of the log-likelihood ratio on held-out folds, for binary tasks (splice:
EI-IE, EI-N, IE-N), plus LDHMM posterior features in a logistic regression (model NAME+LR).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``ldhmm classify`` and its handler."""
    p.set_defaults(func=run_classify)
    add_data_arguments(
        p,
        datasets=["splice", "synthetic"],
        file_help="a labelled file in the ldhmm-sequences text format (default data: splice)",
        labels=True,
    )
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


def run_classify(args: argparse.Namespace) -> int:
    """The ``classify`` command: the API call, then the AUC table."""
    if args.no_lr and options_given(args, "--lr-c"):  # no logistic regression to set
        raise ValueError("--lr-c sets the logistic regression rows: not with --no-lr")
    data = experiment_data(args, args.dataset)
    with dask_client(args) as client:
        result = classify(
            args.models,
            data,
            tasks=args.task,
            lr=not args.no_lr,
            lr_c=args.lr_c,
            client=client,
            **common_options(args, args.data_dir),
        )
    print(f"data: {result.data}")
    if result.config.get("resumed_tasks"):
        print(
            f"resumed: {result.config['resumed_tasks']} of {result.config['n_tasks']} tasks were "
            f"already done in {result.out}"
        )
    print()
    print(result.summary.split("\n## Mean fit seconds")[0].split("## AUC", 1)[-1].strip().split("\n", 1)[-1])
    print()
    print_files(result.out, ["folds.csv", "summary.md"])
    return report_failures("classify", result.errors)
