"""``ldhmm compare``: a parser over :func:`ldhmm.experiments.compare.compare` (the API)."""

from __future__ import annotations

import argparse

from ..experiments.compare import compare, console_table
from .cluster import dask_client
from .common import (
    add_common_arguments,
    add_data_arguments,
    common_options,
    default_data,
    experiment_data,
    print_files,
    report_failures,
)
from .options import add_options, check_more_draws

__all__ = ["DESCRIPTION", "add_arguments", "run_compare"]


#: The description of ``ldhmm compare --help``.
DESCRIPTION = """\
K-fold cross-validated held-out log-likelihood of LDHMM-FF, LDHMM-PF, the baselines and any plug-in
models (--model) for a list of K (the paper's Figures 4 and 5). Without --dataset or --file: Entree
from the data directory; when its files are not there it is downloaded (checksum verified) where
there is a network, otherwise a built-in synthetic LDHMM database is used.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``ldhmm compare`` and its handler."""
    p.set_defaults(func=run_compare)
    add_data_arguments(p, datasets=["entree", "msnbc", "splice", "synthetic"])
    add_common_arguments(p, states_default=["2..6"])
    add_options(
        p,
        "--is-samples",
        "--is-min-ess",
        "--is-max-samples",
        is_samples={
            "type": int,
            "default": 100,
            "help": "importance samples per test sequence for heldout_is (0: skip; default 100)",
        },
    )


def run_compare(args: argparse.Namespace) -> int:
    """The ``compare`` command: the API call, then the one table a user reads first."""
    check_more_draws(args)
    data, data_dir, note = default_data(args)
    if note:
        print(note, flush=True)
    data = experiment_data(args, data)
    with dask_client(args) as client:
        result = compare(
            args.models,
            data,
            is_samples=args.is_samples,
            is_min_ess=args.is_min_ess,
            is_max_samples=args.is_max_samples,
            client=client,
            **common_options(args, data_dir),
        )
    print(f"data: {result.data}")
    if result.config.get("resumed_tasks"):
        n = len(result.config["models"]) * len(result.config["states"]) * args.folds
        print(f"resumed: {result.config['resumed_tasks']} of {n} tasks were already done in {result.out}")
    print()
    print("held-out log-likelihood per test fold (nats, mean ± std over folds; see summary.md)")
    states = result.config["states"]
    print(console_table(result.folds, result.config["models"], states))
    print()
    print_files(result.out, ["folds.csv", "summary.md", "ttests.csv", "loglik_vs_K.png"])
    return report_failures("compare", result.errors, result.best)
