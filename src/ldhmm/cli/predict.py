"""``ldhmm predict``: the next event of each sequence from the model's posterior predictive."""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from .common import positive_int
from .outputs import add_model_data_arguments, check_out, read_model_and_data, sequence_ids, write_table

__all__ = ["register", "run_predict", "top_k_table"]


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``predict`` command to the ``ldhmm`` parser's sub-commands."""
    p = subparsers.add_parser(
        "predict",
        help="the most probable next events of each sequence",
        description="For each sequence x_1..x_n of DATA, the top-k symbols of p(x_(n+1) | x_1..x_n) "
        "under the sequence's own posterior q(theta) after the E-step on x_1..x_n (docs/math.md, "
        "next-event prediction): columns next_1, p_1, ..., next_k, p_k.",
    )
    add_model_data_arguments(p, out_default="next.csv")
    p.add_argument(
        "--top-k", type=positive_int, default=3, help="how many candidates per sequence (default 3)"
    )
    p.set_defaults(func=run_predict)
    return p


def top_k_table(proba: np.ndarray, ids, vocabulary, k: int) -> pd.DataFrame:
    """``next_i`` / ``p_i`` columns of the ``k`` most probable symbols (ties: lower code first)."""
    k = min(int(k), proba.shape[1])
    order = np.argsort(-proba, axis=1, kind="stable")[:, :k]
    table = pd.DataFrame({"sequence_id": list(ids)})
    names = np.asarray(vocabulary, dtype=object)
    for i in range(k):
        table[f"next_{i + 1}"] = names[order[:, i]]
        table[f"p_{i + 1}"] = proba[np.arange(proba.shape[0]), order[:, i]]
    return table


def run_predict(args: argparse.Namespace) -> int:
    """The ``predict`` command."""
    out = check_out(args.out)
    model, db = read_model_and_data(args)
    proba = model.predict_next_proba(db.sequences)
    write_table(top_k_table(proba, sequence_ids(db), db.vocabulary, args.top_k), out)
    if not args.quiet:
        print(f"next-event top-{min(args.top_k, proba.shape[1])} of {len(db)} sequences written to {out}")
    return 0
