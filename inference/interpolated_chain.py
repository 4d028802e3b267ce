"""The interpolated Markov chain's pure kernels: context keys, counts, the interpolation and the
choice of its concentrations by leave-one-sequence-out log-likelihood.

The recursion (hierarchical Dirichlet smoothing, MacKay & Peto 1995)::

    p_(-1)(v)       = 1 / V
    p_k(v | h_k)    = (C(h_k v) + beta_k p_(k-1)(v | h_(k-1))) / (C(h_k) + beta_k)

``h_k`` the last ``k`` symbols (a begin marker ``V`` before the first), ``C`` training counts.
Used by the MARKOV baselines (:mod:`ldhmm.baselines.markov_smoothed`) and by the contextual
emissions' smoothing (:func:`ldhmm.inference.contexts.chain_pseudocounts`), so that both
interpolate the same way. Pure numpy/scipy functions.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize

__all__ = [
    "CONCENTRATION_BOUNDS",
    "context_keys",
    "lookup_counts",
    "interpolated_proba",
    "leave_one_out_counts",
    "log_likelihood_and_gradient",
    "choose_concentrations",
]

#: The range of every concentration beta_k searched.
CONCENTRATION_BOUNDS = (1e-4, 1e6)


# ------------------------------------------------------------------------ pure kernels
def context_keys(sequences, order: int, n_symbols: int) -> np.ndarray:
    """The key of every token's length-k context, k = 0..order.

    Parameters
    ----------
    sequences : list of 1-D int64 arrays, symbols in ``0..V-1``
    order : int >= 0
    n_symbols : int
        V; the begin-of-sequence marker is ``V``, so a context is a number in base ``V + 1``.

    Returns
    -------
    np.ndarray, shape (T, order + 1), int64
        ``[t, k]``: the context ``(x_(n-k), ..., x_(n-1))`` of token t (BOS before the start)
        as ``sum_j x_(n-j) (V+1)^(j-1)``; column 0 is 0 (the empty context).
    """
    base = n_symbols + 1
    padded = [np.concatenate([np.full(order, n_symbols, dtype=np.int64), s]) for s in sequences]
    flat = np.concatenate(padded) if padded else np.zeros(0, np.int64)
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    # index in `flat` of every token: its sequence's offset plus `order` plus its position
    starts = np.concatenate([[0], np.cumsum(lengths + order)[:-1]]) + order
    pos = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths) + np.arange(
        lengths.sum()
    )
    keys = np.zeros((pos.size, order + 1), dtype=np.int64)
    for k in range(1, order + 1):
        keys[:, k] = keys[:, k - 1] + flat[pos - k] * base ** (k - 1)
    return keys


def lookup_counts(table_keys: np.ndarray, table_counts: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Counts of ``query`` keys in a sorted table (0 for a key not in it); float64, query's shape."""
    if table_keys.size == 0:
        return np.zeros(query.shape)
    i = np.clip(np.searchsorted(table_keys, query), 0, table_keys.size - 1)
    return np.where(table_keys[i] == query, table_counts[i], 0).astype(np.float64)


def interpolated_proba(pair_counts, context_counts, concentrations, n_symbols: int) -> np.ndarray:
    """The interpolated probability of each token (the module docstring's recursion).

    Parameters
    ----------
    pair_counts, context_counts : np.ndarray, shape (..., L + 1)
        ``C(h_k v)`` and ``C(h_k)`` for every token and order k.
    concentrations : array-like, shape (L + 1,)
        beta_0..beta_L, each > 0.
    n_symbols : int

    Returns
    -------
    np.ndarray, shape (...,): ``p_L(v | h_L)``.
    """
    p = np.full(pair_counts.shape[:-1], 1.0 / n_symbols)
    for k, beta in enumerate(concentrations):
        p = (pair_counts[..., k] + beta * p) / (context_counts[..., k] + beta)
    return p


def _per_row_counts(keys: np.ndarray, groups: np.ndarray):
    """For each row: how many rows share its key, and how many share its key and its group."""
    _, ids, total = np.unique(keys, return_inverse=True, return_counts=True)
    ids = ids.reshape(-1)
    # (group, key id) as one int64: groups * (number of keys) + id stays far below 2**63
    _, inv, own = np.unique(groups * np.int64(total.size) + ids, return_inverse=True, return_counts=True)
    return total[ids], own[inv.reshape(-1)]


def leave_one_out_counts(keys: np.ndarray, symbols: np.ndarray, sequence_of: np.ndarray, n_symbols: int):
    """``C(h_k v)`` and ``C(h_k)`` of every training token without its own sequence's counts.

    Parameters
    ----------
    keys : np.ndarray, shape (T, L + 1)
        :func:`context_keys` of the training tokens.
    symbols : np.ndarray, shape (T,)
    sequence_of : np.ndarray, shape (T,)
        The index of each token's sequence.
    n_symbols : int

    Returns
    -------
    (pair_counts, context_counts), each shape (T, L + 1), float64.
    """
    pairs = np.empty(keys.shape)
    contexts = np.empty(keys.shape)
    for k in range(keys.shape[1]):
        total, own = _per_row_counts(keys[:, k] * n_symbols + symbols, sequence_of)
        pairs[:, k] = total - own
        total, own = _per_row_counts(keys[:, k], sequence_of)
        contexts[:, k] = total - own
    return pairs, contexts


def log_likelihood_and_gradient(log_concentrations, pair_counts, context_counts, weight, n_symbols: int):
    """``sum_t w_t log p_L(token t)`` and its gradient in ``log beta_0..log beta_L``.

    Parameters
    ----------
    log_concentrations : np.ndarray, shape (L + 1,)
    pair_counts, context_counts : np.ndarray, shape (L + 1, R)
        Counts per order (rows) of R distinct tokens.
    weight : np.ndarray, shape (R,)
        How many tokens each column stands for.
    n_symbols : int

    Returns
    -------
    (float, np.ndarray of shape (L + 1,)). The recursion's derivative:
    ``dp_k / d beta_k = (p_(k-1) - p_k) / (C(h_k) + beta_k)`` and
    ``dp_k / d beta_j = beta_k / (C(h_k) + beta_k) dp_(k-1) / d beta_j`` for ``j < k``.
    """
    betas = np.exp(log_concentrations)
    p = np.full(pair_counts.shape[1], 1.0 / n_symbols)
    grads = np.zeros((betas.size, p.size))
    for k, beta in enumerate(betas):
        denom = context_counts[k] + beta
        new = (pair_counts[k] + beta * p) / denom
        grads[:k] *= beta / denom
        grads[k] = (p - new) / denom
        p = new
    value = float(weight @ np.log(p))
    gradient = (grads / p) @ weight * betas  # d/d log beta = beta d/d beta
    return value, gradient


def choose_concentrations(pair_counts, context_counts, n_symbols: int):
    """beta_0..beta_L maximising the summed log-probability of the tokens.

    L-BFGS-B in ``log beta`` within :data:`CONCENTRATION_BOUNDS`, from every beta = 1, with the
    exact gradient (:func:`log_likelihood_and_gradient`); deterministic.

    Parameters
    ----------
    pair_counts, context_counts : np.ndarray, shape (T, L + 1)
        Leave-one-sequence-out counts (:func:`leave_one_out_counts`).
    n_symbols : int

    Returns
    -------
    (concentrations, log_likelihood): shape (L + 1,) float64 and the objective at them.
    """
    # tokens with the same counts at every order have the same probability: score each distinct
    # row once, weighted by how often it occurs (the same sum, far less work)
    L1 = pair_counts.shape[1]
    rows, weight = np.unique(
        np.concatenate([pair_counts, context_counts], axis=1), axis=0, return_counts=True
    )
    pairs, contexts = np.ascontiguousarray(rows[:, :L1].T), np.ascontiguousarray(rows[:, L1:].T)
    weight = weight.astype(np.float64)

    def loss(x):
        value, gradient = log_likelihood_and_gradient(x, pairs, contexts, weight, n_symbols)
        return -value, -gradient

    bounds = [tuple(np.log(CONCENTRATION_BOUNDS))] * L1
    res = minimize(loss, np.zeros(L1), jac=True, method="L-BFGS-B", bounds=bounds)
    return np.exp(res.x), -float(res.fun)
