"""Compiled sums over sequences for the collapsed (Dirichlet-multinomial) M-step.

Imports numpy and numba only.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .sparse import scatter_blocks, sequential_row_sums
from .special import gamma_functions, gamma_functions_scalar

__all__ = ["SUM_BLOCK", "dirichlet_multinomial_sums"]

# Sequences per block of the parallel sums: each block has its own partial sums, added in block
# order afterwards, so results do not depend on the number of threads.
SUM_BLOCK = 64


@njit(cache=True, nogil=True)
def _add_row_terms(row_sums, block, r, total, row_functions):  # pragma: no cover - compiled
    """``row_sums[block, f, r] += f(total) - f(a_r)`` for f = lgamma, psi, psi' (``f(a_r)``:
    ``row_functions[f, r]``): the row term of one sequence, in the dense and the sparse pass."""
    lg, psi, tri = gamma_functions_scalar(total)
    row_sums[block, 0, r] += lg - row_functions[0, r]
    row_sums[block, 1, r] += psi - row_functions[1, r]
    row_sums[block, 2, r] += tri - row_functions[2, r]


@njit(parallel=True, cache=True, nogil=True)
def _dirichlet_multinomial_pass(
    alpha, alpha_functions, alpha_rowsum, row_functions, counts, rows, entry_sums, row_sums
):  # pragma: no cover - compiled
    """Sums over sequences of [f(alpha + n) - f(alpha)] for f in (lgamma, psi, psi'), per
    entry (only entries with n > 0 contribute) and per row total, accumulated per block of
    SUM_BLOCK sequences (``entry_sums[block]``): the caller adds the blocks in order, so the
    result does not depend on the number of threads."""
    M, R, D = counts.shape
    n_blocks = (M + SUM_BLOCK - 1) // SUM_BLOCK
    for block in prange(n_blocks):
        for m in range(block * SUM_BLOCK, min(M, (block + 1) * SUM_BLOCK)):
            for r in range(R):
                if not rows[r]:
                    continue
                a0 = alpha_rowsum[r]
                n0 = 0.0
                for d in range(D):
                    n = counts[m, r, d]
                    if n > 0.0:
                        n0 += n
                        lg, psi, tri = gamma_functions_scalar(alpha[r, d] + n)
                        entry_sums[block, 0, r, d] += lg - alpha_functions[0, r, d]
                        entry_sums[block, 1, r, d] += psi - alpha_functions[1, r, d]
                        entry_sums[block, 2, r, d] += tri - alpha_functions[2, r, d]
                if n0 > 0.0:
                    _add_row_terms(row_sums, block, r, a0 + n0, row_functions)


@njit(parallel=True, cache=True, nogil=True)
def _dirichlet_multinomial_pass_sparse(
    alpha, alpha_rowsum, row_functions, counts, symbols, rows, entry_out, row_sums
):  # pragma: no cover - compiled
    """The sparse layout's twin of :func:`_dirichlet_multinomial_pass`: counts (M, R, W) at the
    symbols ``symbols`` (M, W); entry terms per sequence and slot into ``entry_out`` (M, 3, R, W)
    (the caller adds them up by symbol), row terms per block as there. f(alpha) is computed
    here, per entry used, with the function that tabulates it for the dense pass (the same
    numbers): tabulating all R x V entries would cost more than the pass at large V."""
    M, R, W = counts.shape
    n_blocks = (M + SUM_BLOCK - 1) // SUM_BLOCK
    for block in prange(n_blocks):
        for m in range(block * SUM_BLOCK, min(M, (block + 1) * SUM_BLOCK)):
            for r in range(R):
                if not rows[r]:
                    continue
                n0 = 0.0
                for w in range(W):
                    n = counts[m, r, w]
                    if n > 0.0:
                        d = symbols[m, w]
                        n0 += n
                        lg, psi, tri = gamma_functions_scalar(alpha[r, d] + n)
                        lg0, psi0, tri0 = gamma_functions_scalar(alpha[r, d])
                        entry_out[m, 0, r, w] = lg - lg0
                        entry_out[m, 1, r, w] = psi - psi0
                        entry_out[m, 2, r, w] = tri - tri0
                if n0 > 0.0:
                    _add_row_terms(row_sums, block, r, alpha_rowsum[r] + n0, row_functions)


def dirichlet_multinomial_sums(alpha, count_batches, rows=None):
    """Sums over sequences of the Dirichlet-multinomial terms and their first two derivatives.

    For rows ``r`` with concentration ``alpha[r]`` (D,) and every sequence's expected counts
    ``n_mr`` (D,), returns ``entry[f, r, d] = sum_m f(alpha_rd + n_mrd) - f(alpha_rd)`` and
    ``row[f, r] = sum_m f(a_r + n_mr) - f(a_r)`` (``a_r``, ``n_mr`` the row totals) for
    ``f`` = lgamma, digamma, trigamma. Entries with ``n = 0`` contribute exactly 0, so they are
    skipped (a sequence's emission counts are zero outside the symbols it contains).

    Parameters
    ----------
    alpha : ndarray float64 (R, D)
    count_batches : list of ndarray float64 (M_b, R, D), or of pairs (counts (M_b, R, W),
        symbols (M_b, W)) in the sparse emission layout (counts at those columns of D; padding
        slots hold 0)
    rows : ndarray of bool (R,), optional
        Compute only these rows (the others are returned as 0).

    Returns
    -------
    entry : ndarray (3, R, D); row : ndarray (3, R)
    """
    alpha = np.ascontiguousarray(alpha, dtype=np.float64)
    R, D = alpha.shape
    # f(alpha) tabulated for the dense batches only (O(R D))
    dense = any(not isinstance(c, tuple) for c in count_batches)
    alpha_functions = gamma_functions(alpha) if dense else None
    row_functions = gamma_functions(alpha.sum(1))
    alpha_rowsum = sequential_row_sums(alpha)  # the same row totals in both layouts
    rows = np.ones(R, dtype=np.bool_) if rows is None else np.asarray(rows, dtype=np.bool_)
    entry_total = np.zeros((3, R, D))
    row_total = np.zeros((3, R))
    for counts in count_batches:
        if isinstance(counts, tuple):
            values, symbols = counts
            values = np.ascontiguousarray(values, dtype=np.float64)
            n_blocks = -(-values.shape[0] // SUM_BLOCK)
            entry = np.zeros((values.shape[0], 3, R, values.shape[2]))
            row = np.zeros((n_blocks, 3, R))
            _dirichlet_multinomial_pass_sparse(
                alpha,
                alpha_rowsum,
                row_functions,
                values,
                np.ascontiguousarray(symbols, dtype=np.int64),
                rows,
                entry,
                row,
            )
            flat = entry.reshape(values.shape[0], 3 * R, values.shape[2])
            scatter_blocks(flat, symbols, D, SUM_BLOCK, out=entry_total.reshape(3 * R, D))
            row_total += row.sum(0)
            continue
        n_blocks = -(-counts.shape[0] // SUM_BLOCK)
        entry = np.zeros((n_blocks, 3, R, D))
        row = np.zeros((n_blocks, 3, R))
        _dirichlet_multinomial_pass(
            alpha,
            alpha_functions,
            alpha_rowsum,
            row_functions,
            np.ascontiguousarray(counts, dtype=np.float64),
            rows,
            entry,
            row,
        )
        entry_total += entry.sum(0)  # depends on the block count only, not on the threads
        row_total += row.sum(0)
    return entry_total, row_total
