"""``ldhmm score``: per-sequence held-out scores of a log under a saved model."""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from ..models.base import importance_estimate
from .common import add_command, add_options, nonneg_int
from .outputs import add_model_data_arguments, sequence_ids, write_model_table

__all__ = ["register", "run_score"]


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``score`` command to the ``ldhmm`` parser's sub-commands."""
    p = add_command(
        subparsers,
        "score",
        run_score,
        help="per-sequence held-out ELBO (and IS estimate) of a log under a saved model",
        description="One row per sequence of DATA: its id, length, the held-out ELBO (a lower "
        "bound on log p(x), nats) and per token, and with --is-samples an importance-sampled "
        "estimate of log p(x) with its standard error and effective sample size.",
    )
    add_model_data_arguments(p, out_default="scores.csv")
    p.add_argument(
        "--is-samples",
        type=nonneg_int,
        default=0,
        help="importance samples per sequence (0: no estimate; default)",
    )
    add_options(p, "--seed", seed={"help": "seed of the importance samples (default 0)"})
    return p


def run_score(args: argparse.Namespace) -> int:
    """The ``score`` command."""
    return write_model_table(args, _score_table, needs="score_samples")


def _score_table(model, db, args, where: dict) -> tuple[pd.DataFrame, str]:
    seqs = db.sequences
    # importance sampling first: its memory check (which grows with --is-samples) refuses
    # before any scoring is done
    found = importance_estimate(model, seqs, args.is_samples, args.seed, **where) if args.is_samples else None
    elbo = model.score_samples(seqs, **where)
    lengths = db.lengths
    table = pd.DataFrame(
        {
            "sequence_id": sequence_ids(db),
            "length": lengths,
            "elbo": elbo,
            "elbo_per_token": elbo / lengths,
        }
    )
    if found is not None:
        table["log_marginal_is"] = found.log_marginal
        table["log_marginal_is_se"] = found.std_error  # its standard error
        table["log_marginal_is_ess"] = found.ess  # effective draws of the is_samples
    total = float(np.sum(elbo))
    return table, (
        f"scored {len(db)} sequences ({db.n_tokens} tokens): held-out ELBO {total:.2f} nats "
        f"({total / db.n_tokens:.4f} per token);"
    )
