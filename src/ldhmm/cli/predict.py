"""``ldhmm predict``: the next event of each sequence from the model's posterior predictive."""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from .options import positive_int
from .outputs import add_model_data_arguments, sequence_ids, write_model_table

__all__ = ["DESCRIPTION", "add_arguments", "run_predict", "top_k_table"]


#: The description of ``ldhmm predict --help``.
DESCRIPTION = """\
For each sequence x_1..x_n of DATA, the top-k symbols of p(x_(n+1) | x_1..x_n) under the sequence's
own posterior q(theta) after the E-step on x_1..x_n (docs/math.md, next-event prediction): columns
next_1, p_1, ..., next_k, p_k.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``ldhmm predict`` and its handler."""
    p.set_defaults(func=run_predict)
    add_model_data_arguments(p, out_default="next.csv")
    p.add_argument(
        "--top-k", type=positive_int, default=3, help="how many candidates per sequence (default 3)"
    )


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
    return write_model_table(args, _next_table, needs="predict_next_proba")


def _next_table(model, db, args, where: dict) -> tuple[pd.DataFrame, str]:
    proba = model.predict_next_proba(db.sequences, **where)
    table = top_k_table(proba, sequence_ids(db), db.vocabulary, args.top_k)
    return table, f"next-event top-{min(args.top_k, proba.shape[1])} of {len(db)} sequences"
