"""What the tests check the collapsed M-step against, loaded from this file (not part of the library).

:func:`dirichlet_multinomial_objective`: the collapsed M-step's objective in dense torch;
:func:`dirichlet_multinomial_sums`: the compiled Dirichlet-multinomial sums of one group from
its count batches, and :func:`dirichlet_multinomial_sums_reference`, their dense scipy twin;
:func:`newton_dirichlet_multinomial`: the M-step's maximizer
(:func:`ldhmm.inference.cavi.maximization.maximize_collapsed`) of one group from its count
batches, with either sums.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import special

from ldhmm.inference.cavi.kernels.dirichlet_multinomial import count_table, table_sums
from ldhmm.inference.cavi.maximization import DirichletMultinomialResult, maximize_collapsed
from ldhmm.inference.ops.dirichlet import MAX_CONCENTRATION, MIN_CONCENTRATION

__all__ = [
    "dirichlet_multinomial_objective",
    "dirichlet_multinomial_sums",
    "dirichlet_multinomial_sums_reference",
    "newton_dirichlet_multinomial",
]


def dirichlet_multinomial_objective(concentration: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """``sum_m log B(a + n_m) - log B(a)`` per row: the collapsed M-step objective.

    Reference implementation (dense torch) for tests; the fit uses
    the compiled sums (:func:`ldhmm.inference.cavi.kernels.dirichlet_multinomial.table_sums`).

    Parameters
    ----------
    concentration : Tensor, shape (R, D)
    counts : Tensor, shape (M, R, D), non-negative (expected counts)

    Returns
    -------
    Tensor, shape (R,)
    """
    a = concentration
    total = counts.sum(-1)
    return (
        (torch.lgamma(a + counts) - torch.lgamma(a)).sum(-1)
        - torch.lgamma(a.sum(-1) + total)
        + torch.lgamma(a.sum(-1))
    ).sum(0)


def dirichlet_multinomial_sums(alpha, count_batches, rows=None):
    """:func:`ldhmm.inference.cavi.kernels.dirichlet_multinomial.table_sums` of one group from its
    count batches (the table built here).

    Parameters
    ----------
    alpha : ndarray float64 (R, D)
    count_batches : list of ndarray float64 (M_b, R, D), or of pairs (counts (M_b, R, W),
        symbols (M_b, W)) in the sparse emission layout
    rows : ndarray of bool (R,), optional

    Returns
    -------
    entry : ndarray (3, R, D); row : ndarray (3, R)
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    table = count_table({"": (alpha.shape, count_batches)})
    return table_sums(table, {"": alpha}, None if rows is None else {"": rows})[""]


def dirichlet_multinomial_sums_reference(concentration, count_batches, rows=None):
    """Dense scipy twin of :func:`dirichlet_multinomial_sums` (same output)."""
    a = np.asarray(concentration, dtype=np.float64)
    entry = np.zeros((3,) + a.shape)
    row = np.zeros((3, a.shape[0]))
    functions = (special.gammaln, special.digamma, lambda x: special.polygamma(1, x))
    for counts in count_batches:
        n = np.asarray(counts, dtype=np.float64)
        positive = n > 0
        n0 = n.sum(-1)
        for i, f in enumerate(functions):
            entry[i] += np.where(positive, f(a + n) - f(a), 0.0).sum(0)
            row[i] += np.where(n0 > 0, f(a.sum(-1) + n0) - f(a.sum(-1)), 0.0).sum(0)
    if rows is not None:
        entry[:, ~np.asarray(rows)] = 0.0
        row[:, ~np.asarray(rows)] = 0.0
    return entry, row


def newton_dirichlet_multinomial(
    initial,
    count_batches,
    max_iter: int = 50,
    tol: float = 1e-8,
    objective_tol: float = 1e-12,
    progress_tol: float = 0.0,
    min_value: float = MIN_CONCENTRATION,
    max_value: float = MAX_CONCENTRATION,
    sums=None,
) -> DirichletMultinomialResult:
    """:func:`maximize_collapsed` of one group from its count batches (by default to
    convergence: ``progress_tol = 0``).

    Parameters
    ----------
    initial : array (R, D), positive
    count_batches : list of arrays (M_b, R, D)
        Expected counts of every sequence (rows with no counts contribute nothing), or pairs
        (counts, symbols) of the sparse emission layout.
    max_iter, tol, objective_tol, progress_tol, min_value, max_value
        As :func:`maximize_collapsed`.
    sums : callable, optional
        ``sums(a, count_batches, rows) -> (entry (3, R, D), row (3, R))``; default: the
        compiled pass
        (:func:`ldhmm.inference.cavi.kernels.dirichlet_multinomial.table_sums`, the table
        built once here); its twin
        :func:`dirichlet_multinomial_sums_reference` gives the same.

    Returns
    -------
    DirichletMultinomialResult
        With the group's arrays.
    """
    initial = np.asarray(initial, dtype=np.float64)
    if sums is None:
        table = count_table({"": (initial.shape, count_batches)})
        group_sums = lambda alphas, rows: table_sums(table, alphas, rows)
    else:
        group_sums = lambda alphas, rows: {"": sums(alphas[""], count_batches, rows[""])}
    res = maximize_collapsed(
        {"": initial},
        group_sums,
        max_iter=max_iter,
        tol=tol,
        objective_tol=objective_tol,
        progress_tol=progress_tol,
        min_value=min_value,
        max_value=max_value,
    )
    return DirichletMultinomialResult(res.concentration[""], res.gain[""], res.n_passes, res.capped)
