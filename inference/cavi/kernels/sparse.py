"""Compiled helpers of the sparse emission layout: per-sequence slots and sums by symbol.

In the sparse layout (:mod:`ldhmm.inference.cavi.emissions`) a sequence's emission counts live in a
K x W block, one column per distinct symbol it contains (its *slots*), W at most its length.
These kernels build the slots of a padded batch and add per-slot values up by symbol.
Imports numpy and numba only.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .special import lgamma_digamma

__all__ = [
    "local_symbols",
    "scatter_rows",
    "scatter_blocks",
    "expected_log_terms",
    "sequential_row_sums",
]


@njit(cache=True, nogil=True)
def _local_symbols(tokens, lengths, n_symbols, symbols, slots):  # pragma: no cover - compiled
    """Fill ``symbols`` (M, W) (each row's distinct symbols, ascending) and ``slots`` (M, T);
    return the largest distinct count."""
    M = tokens.shape[0]
    seen = np.full(n_symbols, -1, dtype=np.int64)
    widest = 0
    for m in range(M):
        n_distinct = 0
        for n in range(lengths[m]):
            x = tokens[m, n]
            if seen[x] < 0:
                seen[x] = 0
                symbols[m, n_distinct] = x
                n_distinct += 1
        row = np.sort(symbols[m, :n_distinct])
        for j in range(n_distinct):
            symbols[m, j] = row[j]
            seen[row[j]] = j
        for n in range(lengths[m]):
            slots[m, n] = seen[tokens[m, n]]
        for j in range(n_distinct):  # ready for the next row
            seen[symbols[m, j]] = -1
        widest = max(widest, n_distinct)
    return widest


def local_symbols(tokens, lengths, n_symbols=None):
    """Each row's distinct symbols (ascending) and its tokens as slots.

    Ascending, so that a row's slots run through its symbols in the order the dense layout's
    loops over all V symbols do: sums over a row's entries add in the same order in both
    layouts, and give the same numbers.

    Parameters
    ----------
    tokens : int64 ndarray (M, T), padded; lengths : int64 ndarray (M,)
    n_symbols : int, optional
        Upper bound on the symbols (default: the largest + 1); a scratch array of this size is
        allocated once.

    Returns
    -------
    symbols : int64 ndarray (M, W), W the largest number of distinct symbols of a row (at
        least 1), padded with 0
    slots : int64 ndarray (M, T), 0 on padding
    """
    tokens = np.ascontiguousarray(tokens, dtype=np.int64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    M, T = tokens.shape
    if n_symbols is None:
        n_symbols = int(tokens.max()) + 1 if tokens.size else 1
    symbols = np.zeros((M, max(T, 1)), dtype=np.int64)
    slots = np.zeros((M, T), dtype=np.int64)
    widest = _local_symbols(tokens, lengths, int(n_symbols), symbols, slots)
    return np.ascontiguousarray(symbols[:, : max(1, widest)]), slots


@njit(cache=True, nogil=True)
def _scatter_rows(values, symbols, out):  # pragma: no cover - compiled
    M, R, W = values.shape
    for m in range(M):  # sequential, in sequence order: the same sums whatever the threads
        for w in range(W):
            x = symbols[m, w]
            for r in range(R):
                out[r, x] += values[m, r, w]


def scatter_rows(values, symbols, n_symbols, out=None):
    """Add per-slot values up by symbol: ``out[r, symbols[m, w]] += values[m, r, w]``.

    Parameters
    ----------
    values : float64 ndarray (M, R, W)
        Zero on padding slots (they map to symbol 0).
    symbols : int64 ndarray (M, W)
    n_symbols : int
    out : float64 ndarray (R, V), optional
        Accumulated into (a new zero array by default).

    Returns
    -------
    ndarray (R, V)
    """
    values = np.ascontiguousarray(values, dtype=np.float64)
    if out is None:
        out = np.zeros((values.shape[1], int(n_symbols)))
    _scatter_rows(values, np.ascontiguousarray(symbols, dtype=np.int64), out)
    return out


@njit(cache=True, nogil=True)
def _slot(x, slot_of, order, n):  # pragma: no cover - compiled
    """The slot of symbol ``x`` in a compact array of ``n`` used slots (``slot_of[x]``, -1 where
    none yet): a new one, recorded in ``slot_of`` and ``order``, where none. Returns (slot, n)."""
    j = slot_of[x]
    if j < 0:
        j = n
        slot_of[x] = j
        order[j] = x
        n += 1
    return j, n


@njit(cache=True, nogil=True)
def _scatter_blocks(values, symbols, block, out, block_id, batch_id):  # pragma: no cover - compiled
    """See :func:`scatter_blocks`. Partial sums live in compact arrays indexed through
    ``block_id`` / ``batch_id`` (V,), -1 where untouched and left so."""
    M, R, W = values.shape
    cap = min(out.shape[1], M * W)
    partial = np.zeros((R, cap))
    batch = np.zeros((R, cap))
    block_order = np.empty(cap, dtype=np.int64)
    batch_order = np.empty(cap, dtype=np.int64)
    n_batch = 0
    for start in range(0, M, block):
        n_block = 0
        for m in range(start, min(M, start + block)):
            for w in range(W):
                j, n_block = _slot(symbols[m, w], block_id, block_order, n_block)
                for r in range(R):
                    partial[r, j] += values[m, r, w]
        for j in range(n_block):
            x = block_order[j]
            k, n_batch = _slot(x, batch_id, batch_order, n_batch)
            for r in range(R):
                batch[r, k] += partial[r, j]
                partial[r, j] = 0.0
            block_id[x] = -1
    for k in range(n_batch):
        x = batch_order[k]
        for r in range(R):
            out[r, x] += batch[r, k]
        batch_id[x] = -1


#: Symbol -> compact index maps of :func:`_scatter_blocks` (all -1 between calls) by V, lent to
#: one call at a time (taken out of the dict, atomically under the GIL, and put back), so that
#: they are allocated once, not per call.
_SCRATCH: dict = {}


def _take_scratch(V: int):
    arrays = _SCRATCH.pop(V, None)
    if arrays is None:
        arrays = (np.full(V, -1, dtype=np.int64), np.full(V, -1, dtype=np.int64))
    return arrays


def _return_scratch(V: int, arrays) -> None:
    if len(_SCRATCH) > 4:
        _SCRATCH.clear()
    _SCRATCH[V] = arrays


def scatter_blocks(values, symbols, n_symbols, block, out=None):
    """:func:`scatter_rows` in the dense kernels' order of additions: per block of ``block``
    sequences a partial sum (sequence order), the blocks' partial sums in block order, and that
    batch total added to ``out``.

    The dense layout's kernels sum per block (for threads), then over blocks, then add the
    batch to a running total; adding the sparse layout's per-slot values in the same order
    gives the same floating-point sums (an entry a block does not touch adds an exact 0 there),
    so both layouts give the same numbers, not just close ones. Work and scratch: O(values)
    plus two index maps of V integers kept between calls, not O(R V).

    Parameters
    ----------
    values : float64 (M, R, W); symbols : int64 (M, W); n_symbols : int; block : int
    out : float64 (R, V), optional
        Accumulated into (a new zero array by default).
    """
    values = np.ascontiguousarray(values, dtype=np.float64)
    R = values.shape[1]
    if out is None:
        out = np.zeros((R, int(n_symbols)))
    scratch = _take_scratch(int(n_symbols))
    _scatter_blocks(values, np.ascontiguousarray(symbols, dtype=np.int64), int(block), out, *scratch)
    _return_scratch(int(n_symbols), scratch)  # reset to -1 by the kernel
    return out


@njit(cache=True, nogil=True)
def _expected_log_terms(alpha, alpha_rowsum, counts, symbols, delta, psi_rows):  # pragma: no cover
    M, K, W = counts.shape
    identity = symbols.shape[0] == 0
    for m in range(M):
        for k in range(K):
            total = 0.0
            for w in range(W):
                n = counts[m, k, w]
                total += n
                if n != 0.0:
                    x = w if identity else symbols[m, w]
                    a = alpha[k, x]
                    delta[m, k, w] = lgamma_digamma(a + n)[1] - lgamma_digamma(a)[1]
            psi_rows[k] += lgamma_digamma(alpha_rowsum[k] + total)[1]


def expected_log_terms(alpha, counts, symbols):
    """The per-sequence parts of ``sum_m E log B_m`` (see
    :class:`ldhmm.inference.cavi.emissions.EmissionLogSums`): ``delta`` (M, K, W), at each slot
    with ``n > 0`` ``psi(alpha + n) - psi(alpha)`` (else 0), and ``psi_rows`` (K,),
    ``sum_m psi(alpha_0 + n_m0)``. O(K W) per sequence (plus the row totals of ``alpha``).

    Parameters
    ----------
    alpha : float64 (K, V); counts : float64 (M, K, W); symbols : int64 (M, W) or None
    """
    alpha = np.ascontiguousarray(alpha, dtype=np.float64)
    counts = np.ascontiguousarray(counts, dtype=np.float64)
    M, K, W = counts.shape
    rowsum = sequential_row_sums(alpha)  # left to right, as the kernels do
    delta = np.zeros((M, K, W))
    psi_rows = np.zeros(K)
    sym = (
        np.zeros((0, W), dtype=np.int64) if symbols is None else np.ascontiguousarray(symbols, dtype=np.int64)
    )
    _expected_log_terms(alpha, rowsum, counts, sym, delta, psi_rows)
    return delta, psi_rows


@njit(cache=True, nogil=True)
def sequential_row_sums(alpha):  # pragma: no cover - compiled
    """Row totals added left to right (as the kernels always did: no pairwise summation)."""
    R, D = alpha.shape
    out = np.zeros(R)
    for r in range(R):
        total = 0.0
        for d in range(D):
            total += alpha[r, d]
        out[r] = total
    return out
