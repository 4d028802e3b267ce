"""Reading back what the model commands write: tables, and posterior files as arrays.

``ldhmm score/posterior/predict/decode`` write one table (CSV or Parquet, written whole or not
at all by :func:`ldhmm.cli.outputs.write_table`); :func:`read_table` reads any of them back value
for value. ``ldhmm posterior`` stores each sequence's posterior means as flat (row-major) list
columns; the Parquet file also carries what a program needs to read them back whole, in its
metadata (``DataFrame.attrs["ldhmm_posterior"]``, kept by pandas in the file's key
``PANDAS_ATTRS``; :func:`posterior_metadata`): K, V, the vocabulary in the model's order and the
shape of each column. :func:`read_posterior_file` gives back the arrays with those shapes::

    from ldhmm.output_files import read_posterior_file

    post = read_posterior_file("post.parquet")
    post.arrays["A"].shape          # (M, K, K): E_q[A_m] of each sequence, rows: from
    post.arrays["B"].shape          # (M, K, V): E_q[B_m], columns in post.vocabulary's order
    post.state_marginals[0].shape   # (N_0, K): q(z_n) of the first sequence

A CSV file has no metadata: K and V are then read from the columns' lengths and the
vocabulary from ``model=`` (the model the file was computed with), else the symbols' codes.

Not to be confused with the Parquet parts of ``VariantHMM.posterior(..., out=DIR)`` (the
partitioned route: the Dirichlet parameters of q, with their own schema metadata), which
:func:`ldhmm.inference.cavi.posterior.read_posterior` reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["POSTERIOR_KEY", "PosteriorFile", "posterior_metadata", "read_table", "read_posterior_file"]

#: The key of the posterior metadata in ``DataFrame.attrs`` (and so in the Parquet file).
POSTERIOR_KEY = "ldhmm_posterior"
#: The version of that metadata.
POSTERIOR_FORMAT = 1
#: Each flat column's shape per sequence, in names: K states, V symbols, D the sequence's own
#: symbols (sparse layout), N its length. Row-major (C order).
COLUMN_SHAPES = {
    "pi_mean": ["K"],
    "A_mean": ["K", "K"],
    "B_mean": ["K", "V"],
    "B_symbols": ["D"],
    "B_row_total": ["K"],
    "state_marginals": ["N", "K"],
}


def posterior_metadata(n_states: int, vocabulary, columns, sparse: bool = False, context_labels=None) -> dict:
    """What ``ldhmm posterior`` stores beside its table (``attrs[POSTERIOR_KEY]``).

    Parameters
    ----------
    n_states : int
        K.
    vocabulary : list of V str
        The model's symbols in code order.
    columns : iterable of str
        The table's columns.
    sparse : bool
        ``B_mean`` holds each sequence's own symbols only (``B_symbols``): shape (K, D).
    context_labels : list of C str, optional
        A contextual model's context rows (:func:`ldhmm.inference.contexts.context_labels`):
        ``B_mean`` and ``B_row_total`` are then at each sequence's (context, symbol) pairs
        (``B_contexts``, ``B_symbols``): shape (K, P).

    Returns
    -------
    dict: ``format``, ``K``, ``V``, ``vocabulary``, ``order`` ("C": row-major) and ``shapes``
    (each list column's shape per sequence, by the names K, V, D, N).
    """
    shapes = {c: list(s) for c, s in COLUMN_SHAPES.items() if c in set(columns)}
    if sparse and "B_mean" in shapes:
        shapes["B_mean"] = ["K", "D"]
    extra = {}
    if context_labels is not None:
        shapes.update(
            {"B_contexts": ["P"], "B_symbols": ["P"], "B_mean": ["K", "P"], "B_row_total": ["K", "P"]}
        )
        extra = {"contexts": [str(c) for c in context_labels]}
    return {
        "format": POSTERIOR_FORMAT,
        "K": int(n_states),
        "V": len(vocabulary),
        "vocabulary": [str(v) for v in vocabulary],
        "order": "C",
        "shapes": shapes,
        **extra,
    }


def read_table(path) -> pd.DataFrame:
    """A table the model commands wrote, read back value for value: a CSV file's JSON-list
    cells as arrays (floats parsed exactly: each is written in its shortest round-trip form),
    its ``sequence_id`` as strings; a Parquet file as it is (with its ``attrs``)."""
    path = Path(path)
    if path.suffix.lower() != ".csv":
        return pd.read_parquet(path)
    df = pd.read_csv(path, dtype={"sequence_id": str}, keep_default_na=False)
    for column in df.columns:
        values = df[column]
        listed = len(values) and values.map(lambda v: isinstance(v, str) and v.startswith("[")).all()
        if listed:
            df[column] = [np.asarray(json.loads(v)) for v in values]
    return df


@dataclass
class PosteriorFile:
    """A posterior file read back (:func:`read_posterior_file`).

    Attributes
    ----------
    table : DataFrame
        The file's rows (``sequence_id``, ``length``, ``elbo``, the flat list columns).
    n_states : int
        K.
    vocabulary : list of V str
        The symbols in the order of B's columns (codes ``"0".."V-1"`` when not known).
    arrays : dict of str to np.ndarray
        ``"pi"`` (M, K), ``"A"`` (M, K, K), ``"B"`` (M, K, V): the posterior means of the groups
        the file holds (dense ``B`` only; a sparse file's ``B`` is in :attr:`sparse_B`).
    sparse_B : list of (np.ndarray (D,), np.ndarray (K, D), np.ndarray (K,)) or None
        Per sequence: its own symbols, ``E_q[B]`` at them, and the row totals (``E_q[B_kv] =
        beta_kv / total_k`` at any other symbol v). A contextual model's file: its (context,
        symbol) pairs' symbols (P,), ``E_q[B]`` at the pairs (K, P) and their rows' totals (K, P).
    state_marginals : list of np.ndarray, each (N_m, K)
        ``q(z_n = k)`` of each sequence.
    B_contexts : list of np.ndarray (P,) or None
        A contextual model's file: the context row of each of a sequence's pairs.
    context_labels : list of C str or None
        A contextual model's context rows by name (from the Parquet metadata).
    """

    table: pd.DataFrame
    n_states: int
    vocabulary: list
    arrays: dict
    sparse_B: list | None
    state_marginals: list
    B_contexts: list | None = None
    context_labels: list | None = None


def _model_vocabulary(model) -> list | None:
    if model is None:
        return None
    if isinstance(model, (str, Path)):
        doc = json.loads(Path(model).read_text(encoding="utf-8"))
        vocabulary = doc.get("vocabulary")
    else:
        vocabulary = getattr(model, "vocabulary_", None)
    return None if vocabulary is None else [str(v) for v in vocabulary]


def _stack(values, shape, path, column) -> np.ndarray:
    try:
        return np.stack([np.asarray(v, dtype=np.float64).reshape(shape) for v in values])
    except ValueError:
        raise ValueError(f"{path}: column {column} does not hold arrays of shape {tuple(shape)}") from None


def read_posterior_file(path, model=None) -> PosteriorFile:
    """An ``ldhmm posterior`` file (Parquet or CSV) as arrays of their shapes.

    Parameters
    ----------
    path : str or Path
    model : fitted model or path of its model file, optional
        Where a CSV file (no metadata) takes its vocabulary from; ignored for a Parquet file
        that carries its own.

    Returns
    -------
    PosteriorFile

    Raises
    ------
    ValueError
        One line naming the file and the column that is not a posterior file's.
    """
    table = read_table(path)
    meta = table.attrs.get(POSTERIOR_KEY)
    if "state_marginals" not in table.columns:
        raise ValueError(f"{path}: not an ldhmm posterior file (no column state_marginals)")
    first = np.asarray(table["state_marginals"].iloc[0]) if len(table) else np.zeros(0)
    if meta is not None:
        K, vocabulary = int(meta["K"]), list(meta["vocabulary"])
    else:
        K = len(table["pi_mean"].iloc[0]) if "pi_mean" in table and len(table) else None
        K = K or (
            int(round(np.sqrt(len(table["A_mean"].iloc[0])))) if "A_mean" in table and len(table) else None
        )
        K = K or (first.size // int(table["length"].iloc[0]) if len(table) else 0)
        vocabulary = _model_vocabulary(model)
        if vocabulary is None and "B_mean" in table and "B_symbols" not in table and len(table):
            vocabulary = [str(v) for v in range(len(table["B_mean"].iloc[0]) // K)]
    vocabulary = vocabulary or []
    V = len(vocabulary)
    arrays = {}
    for group, shape in (("pi", (K,)), ("A", (K, K)), ("B", (K, V))):
        column = f"{group}_mean"
        if column in table and not (group == "B" and "B_symbols" in table):
            arrays[group] = (
                _stack(table[column], shape, path, column) if len(table) else np.zeros((0, *shape))
            )
    sparse = None
    if "B_symbols" in table:
        sparse = [
            (
                np.asarray(s, dtype=np.int64),
                np.asarray(m, dtype=np.float64).reshape(K, -1),
                np.asarray(t, dtype=np.float64).reshape(K, -1) if "B_contexts" in table else np.asarray(t),
            )
            for s, m, t in zip(table["B_symbols"], table["B_mean"], table["B_row_total"])
        ]
    marginals = [
        np.asarray(m, dtype=np.float64).reshape(int(n), K)
        for m, n in zip(table["state_marginals"], table["length"])
    ]
    contexts = [np.asarray(c, dtype=np.int64) for c in table["B_contexts"]] if "B_contexts" in table else None
    labels = meta.get("contexts") if meta is not None else None
    return PosteriorFile(table, K, vocabulary, arrays, sparse, marginals, contexts, labels)
