"""``ldhmm posterior``: per-sequence posterior means and state marginals (features)."""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from ..output_files import POSTERIOR_KEY, posterior_metadata
from .outputs import add_model_data_arguments, sequence_ids, write_model_table

__all__ = ["DESCRIPTION", "add_arguments", "run_posterior", "posterior_table"]


#: The description of ``ldhmm posterior --help``.
DESCRIPTION = """\
One row per sequence of DATA: its id, length, held-out ELBO, the posterior means E_q[pi] (K), E_q[A]
(K*K, row-major) and E_q[B] (K*V, row-major) of each per-sequence group, and the state marginals
q(z_n) (N*K, row-major), as list columns of a Parquet file (in a .csv file: each list as a JSON
array): features for downstream models. The Parquet file's metadata holds K, V, the vocabulary and
each column's shape; ldhmm.output_files.read_posterior_file(PATH) reads it back as arrays (M, K, K),
(M, K, V), .... Models with a large vocabulary (sparse emission layout) write E_q[B] only at each
sequence's own symbols: B_symbols (D), B_mean (K*D, row-major) and B_row_total (K), with E_q[B_kv] =
beta_kv / B_row_total_k at every other symbol v. A model of the SVI route (--factory) gives Monte
Carlo means over draws of each sequence's q(theta) (docs/writing-a-variant.md, Step 6).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``ldhmm posterior`` and its handler."""
    p.set_defaults(func=run_posterior)
    add_model_data_arguments(p, out_default="posterior.parquet")


def posterior_table(model, db, where: dict | None = None) -> pd.DataFrame:
    """The rows of ``ldhmm posterior``: ids, lengths, ELBO, flattened posterior means, marginals."""
    post = model.posterior(db.sequences, **(where or {}))
    table = pd.DataFrame({"sequence_id": sequence_ids(db), "length": db.lengths, "elbo": post["elbo"]})
    for group in ("pi", "A", "B"):
        if f"g_{group}" in post:  # the closed form: Dirichlet parameters of q
            conc = np.asarray(post[f"g_{group}"], dtype=np.float64)
            mean = conc / conc.sum(axis=-1, keepdims=True)
        elif f"{group}_mean" in post:  # the SVI route: Monte Carlo means over draws of q
            mean = np.asarray(post[f"{group}_mean"], dtype=np.float64)
        else:
            continue
        table[f"{group}_mean"] = list(mean.reshape(mean.shape[0], -1))
    if "B_contexts" in post:
        _contextual_columns(table, post, model.beta_)
    elif "B_symbols" in post:
        # Sparse emission layout: q(B_m) = Dir(beta + n_m) with n_m zero off the sequence's own
        # symbols; its mean there, and the row totals that give it everywhere else.
        beta = model.params_.prior["B"].double().numpy()
        beta_rows = beta.sum(axis=1)
        means, totals = [], []
        for symbols, counts in zip(post["B_symbols"], post["B_counts"]):
            total = beta_rows + counts.sum(axis=1)
            means.append(((beta[:, symbols] + counts) / total[:, None]).reshape(-1))
            totals.append(total)
        table["B_symbols"] = [np.asarray(v, dtype=np.int64) for v in post["B_symbols"]]
        table["B_mean"] = means
        table["B_row_total"] = totals
    table["state_marginals"] = [np.asarray(m, dtype=np.float64).reshape(-1) for m in post["state_marginals"]]
    vocabulary = getattr(model, "vocabulary_", None) or [str(v) for v in range(model.n_symbols_)]
    table.attrs[POSTERIOR_KEY] = posterior_metadata(
        model.n_states,
        vocabulary,
        table.columns,
        sparse="B_symbols" in post,
        context_labels=post.get("context_labels"),
    )
    return table


def _contextual_columns(table: pd.DataFrame, post: dict, beta: np.ndarray) -> None:
    """A contextual model's emissions at each sequence's own (context, symbol) pairs:
    ``B_contexts`` and ``B_symbols`` (P), ``E_q[B_m[k, c, v]]`` there (``B_mean``, K*P) and the
    total of each pair's row (``B_row_total``, K*P): ``E_q[B_m[k, c, v]] = beta[k, c, v] / total``
    at a symbol the sequence never emitted after context c, ``beta[k, c] / beta[k, c].sum()`` in a
    row it never used."""
    beta_rows = beta.sum(axis=-1)  # (K, C)
    means, totals = [], []
    for contexts, symbols, counts in zip(post["B_contexts"], post["B_symbols"], post["B_counts"]):
        # a row's total: its prior total plus every count in that row (pairs of one context)
        per_row = np.zeros((beta.shape[0], beta.shape[1]))
        np.add.at(per_row.T, contexts, counts.T)
        total = beta_rows[:, contexts] + per_row[:, contexts]
        means.append(((beta[:, contexts, symbols] + counts) / total).reshape(-1))
        totals.append(total.reshape(-1))
    table["B_contexts"] = [np.asarray(c, dtype=np.int64) for c in post["B_contexts"]]
    table["B_symbols"] = [np.asarray(v, dtype=np.int64) for v in post["B_symbols"]]
    table["B_mean"] = means
    table["B_row_total"] = totals


def run_posterior(args: argparse.Namespace) -> int:
    """The ``posterior`` command."""
    return write_model_table(args, _posterior_rows, needs="posterior")


def _posterior_rows(model, db, args, where: dict) -> tuple[pd.DataFrame, str]:
    report = f"posterior of {len(db)} sequences (K={model.n_states}, V={model.n_symbols_})"
    return posterior_table(model, db, where), report
