"""``ldhmm score``: per-sequence held-out scores of a log under a saved model."""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from ..data import is_partitioned, read_manifest
from ..data.storage import is_url
from ..models.base import importance_estimate
from .cluster import dask_client, placement_options
from .options import add_options, check_more_draws, options_given
from .outputs import (
    add_model_data_arguments,
    check_out,
    read_model,
    sequence_ids,
    write_model_table,
    write_table,
)

__all__ = ["DESCRIPTION", "add_arguments", "run_score"]


#: The description of ``ldhmm score --help``.
DESCRIPTION = """\
One row per sequence of DATA: its id, length, the held-out ELBO (a lower bound on log p(x), nats)
and per token, and with --is-samples an importance-sampled estimate of log p(x) with its standard
error and effective sample size.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``ldhmm score`` and its handler."""
    p.set_defaults(func=run_score)
    add_model_data_arguments(p, out_default="scores.csv")
    add_options(p, "--is-samples", "--is-min-ess", "--is-max-samples")
    add_options(p, "--seed", seed={"help": "seed of the importance samples (default 0)"})


def run_score(args: argparse.Namespace) -> int:
    """The ``score`` command."""
    check_more_draws(args)
    if options_given(args, "--seed") and not args.is_samples:  # it would seed nothing
        raise ValueError("--seed seeds the importance samples: it needs --is-samples N > 0")
    placed = args.backend != "local" or args.partitions is not None or is_url(args.data)
    if placed and is_partitioned(args.data):
        return _score_partitioned(args)
    return write_model_table(args, _score_table, needs="score_samples")


def _score_partitioned(args: argparse.Namespace) -> int:
    """``ldhmm score MODEL DIR|URL --backend dask``: a partitioned data set (``ldhmm data
    export``) scored where its partitions live: each worker reads its own files, this process
    reads only ``dataset.json``. Columns ``sequence_id``, ``elbo`` (and ``log_marginal_is``),
    by sequence id."""
    out = check_out(args.out)
    if args.unknown == "map":
        raise ValueError(
            f"{args.data}: --unknown map recodes a data file; a partitioned data set's codes are fixed"
        )
    if args.is_samples and args.is_min_ess:
        raise ValueError("--is-min-ess applies to a data file scored in this process, not to partitions")
    model = read_model(args, "score_samples")
    manifest = read_manifest(args.data)
    theirs = manifest["vocabulary"] or [str(v) for v in range(manifest["n_symbols"])]
    mine = getattr(model, "vocabulary_", None) or [str(v) for v in range(model.n_symbols_)]
    if theirs != mine:
        differ = next(
            (i for i, (a, b) in enumerate(zip(theirs, mine)) if a != b), min(len(theirs), len(mine))
        )
        raise ValueError(
            f"{args.data}: its symbols are coded by another vocabulary than the model's ({len(theirs)} "
            f"symbols against {len(mine)}, first difference at code {differ}); score its data file instead"
        )
    with dask_client(args) as client:
        where = placement_options(args, client)
        elbo = model.score_samples(args.data, **where)
        table = pd.DataFrame({"sequence_id": elbo.index.astype(str), "elbo": elbo.to_numpy()})
        if args.is_samples:
            found = model.log_marginal_is(args.data, args.is_samples, args.seed, **where)
            table["log_marginal_is"] = found.loc[elbo.index].to_numpy()
    impossible = np.flatnonzero(np.isneginf(table["elbo"].to_numpy()))
    if impossible.size:
        raise ValueError(
            f"{table['sequence_id'][impossible[0]]}: the model gives this sequence probability 0 "
            f"({impossible.size} sequences of {len(table)}); `ldhmm score MODEL FILE` names its symbol"
        )
    write_table(table, out)
    if not args.quiet:
        total, n_tokens = float(np.sum(table["elbo"])), int(manifest["n_tokens"])
        print(
            f"scored {len(table)} sequences ({n_tokens} tokens) where their partitions live: held-out "
            f"ELBO {total:.2f} nats ({total / n_tokens:.4f} per token); written to {out}"
        )
    return 0


def _score_table(model, db, args, where: dict) -> tuple[pd.DataFrame, str]:
    seqs = db.sequences
    # importance sampling first: its memory check (which grows with --is-samples) refuses
    # before any scoring is done
    found = None
    if args.is_samples:
        found = importance_estimate(
            model, seqs, args.is_samples, args.seed, args.is_min_ess, args.is_max_samples, **where
        )
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
        if args.is_min_ess:
            table["log_marginal_is_samples"] = found.n_samples  # draws, with the rule's extra ones
    total = float(np.sum(elbo))
    return table, (
        f"scored {len(db)} sequences ({db.n_tokens} tokens): held-out ELBO {total:.2f} nats "
        f"({total / db.n_tokens:.4f} per token);"
    )
