"""The fully factorized (FF) q(Z) update of a batch of sequences whose emission potentials are
read through columns of their own: one compiled pass per sequence, parallel over sequences.

The FF update of :func:`.fused_sweeps.ff_update` (even positions, then odd: exact coordinate
ascent of ``q(z_n)`` given its neighbours) reads a position's emission potential from column
``columns[n]`` of the sequence's ``E log B`` (K, W): for LDHMM the column is the symbol; for
the contextual model (:mod:`ldhmm.inference.cavi.context_vem`) the (context, symbol) pair of
the position. Returns the entropy of each sequence's q(Z) and its expected counts in the same
columns; ``phi`` (the factors) is updated in place, the warm state of the next pass.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .fused_sweeps import ff_update

__all__ = ["factorized_pass"]


@njit(parallel=True, cache=True, nogil=True)
def _factorized_batch(
    columns, lengths, n_columns, elog_pi, elog_A, elog_B, phi, initialize, c_pi, c_A, c_B, entropy
):  # pragma: no cover - compiled
    M = columns.shape[0]
    K = elog_A.shape[1]
    W = elog_B.shape[2]
    for m in prange(M):
        scratch = (np.empty((W, K)), np.empty((K, K)), np.empty(K), np.empty(K))
        present = np.arange(n_columns[m])
        theta = (elog_pi[m : m + 1], elog_A[m], elog_B[m])
        counts = (c_pi[m : m + 1], c_A[m], c_B[m])
        entropy[m] = ff_update(
            columns[m], lengths[m], theta, present, n_columns[m], phi[m], initialize, counts, scratch
        )


def factorized_pass(columns, lengths, n_columns, elog_pi, elog_A, elog_B, phi, initialize: bool):
    """One FF pass over every sequence of a batch.

    Parameters
    ----------
    columns : int64 ndarray (M, T)
        The emission column of each position (any value past a sequence's length).
    lengths : int64 ndarray (M,)
    n_columns : int64 ndarray (M,)
        Columns ``0 .. n_columns[m] - 1`` are sequence m's (every ``columns[m, :L]`` below it).
    elog_pi, elog_A, elog_B : float64 ndarrays (M, K), (M, K, K), (M, K, W)
        ``E log theta`` of each sequence's q(theta).
    phi : float64 ndarray (M, T, K), C-contiguous
        The factors ``q(z_n = k)``, updated in place (``initialize``: first set from the emission
        potentials alone).

    Returns
    -------
    (entropy (M,), counts): ``H[q(Z)]`` of each sequence (NaN where its pass failed) and the
    expected counts ``pi`` (M, K), ``A`` (M, K, K) (of independent neighbours), ``B`` (M, K, W)
    (zero off a sequence's columns).
    """
    M, K = elog_pi.shape
    W = elog_B.shape[2]
    c_pi, c_A, c_B = np.zeros((M, K)), np.zeros((M, K, K)), np.zeros((M, K, W))
    entropy = np.empty(M)
    _factorized_batch(
        np.ascontiguousarray(columns, dtype=np.int64),
        np.ascontiguousarray(lengths, dtype=np.int64),
        np.ascontiguousarray(n_columns, dtype=np.int64),
        np.ascontiguousarray(elog_pi, dtype=np.float64),
        np.ascontiguousarray(elog_A, dtype=np.float64),
        np.ascontiguousarray(elog_B, dtype=np.float64),
        phi,
        bool(initialize),
        c_pi,
        c_A,
        c_B,
        entropy,
    )
    return entropy, {"pi": c_pi, "A": c_A, "B": c_B}
