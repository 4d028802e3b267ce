"""Compiled sums over sequences for the collapsed (Dirichlet-multinomial) M-step.

The expected counts do not change during an M-step, only the concentrations do. So the counts
of every learned group are gathered once per E-step into a :class:`CountTable`, entry by
entry: for each entry ``(r, d)`` the positive counts of every sequence (in sequence order),
and for each row ``r`` the positive row totals. A pass at new concentrations
(:func:`table_sums`) is then one compiled call over every group, whatever the number of
buckets: each entry's sum is added up by one thread in a fixed order, so the result does not
depend on the number of threads, and the sparse and dense emission layouts (the same counts,
gathered from other places) give the same numbers.

Imports numpy and numba only.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, prange

from .sparse import sequential_row_sums
from .special import gamma_functions_scalar

__all__ = [
    "SUM_BLOCK",
    "PARALLEL_MIN_VALUES",
    "CountTable",
    "count_table",
    "table_sums",
]

# Sequences per block of the E-step kernels' parallel sums (fused_sweeps, emissions): each block
# has its own partial sums, added in block order afterwards, so results do not depend on the
# number of threads.
SUM_BLOCK = 64

#: A pass over fewer counts than this runs on one thread. Starting numba's threads costs more
#: than such a pass on a busy machine (on 2 shared cores, 3 to 5 ms a start against 17 ns a
#: count); the numbers are the same either way.
PARALLEL_MIN_VALUES = 1 << 20


class CountTable(NamedTuple):
    """Every sequence's expected counts of some Dirichlet groups, entry by entry.

    A *task* is one entry ``(r, d)`` of a group that has at least one positive count, or one
    row ``r`` that has at least one positive row total; its values are
    ``values[bounds[t]:bounds[t + 1]]``, in sequence order. Group ``g``'s entry tasks are
    ``entry_tasks[g]`` (a slice of the tasks) with flat indices ``keys`` (``r * D + d``), its
    row tasks ``row_tasks[g]`` with ``keys`` the row ``r``.

    Attributes
    ----------
    shapes : dict[str, tuple[int, int]]
        (R, D) of each group.
    entry_tasks, row_tasks : dict[str, slice]
    keys : int64 ndarray (n_tasks,)
    bounds : int64 ndarray (n_tasks + 1,)
    values : float64 ndarray (bounds[-1],)
    weights : float64 ndarray (bounds[-1],) or (0,)
        How many sequences each value stands for (identical sequences computed once); empty:
        one each.
    """

    shapes: dict
    entry_tasks: dict
    row_tasks: dict
    keys: np.ndarray
    bounds: np.ndarray
    values: np.ndarray
    weights: np.ndarray = np.zeros(0)

    @property
    def n_tasks(self) -> int:
        return int(self.keys.shape[0])


@njit(cache=True, nogil=True)
def _walk_positive(  # pragma: no cover - compiled
    counts, symbols, D, entry_cursor, row_cursor, values, write, seq_weights, weights
):
    """One batch (M, R, W) whose slot w of sequence m is column ``symbols[m, w]`` (``symbols``
    (1, W) for the dense layout: the same columns for every sequence): each positive count
    advances its entry's cursor, each positive row total its row's; with ``write``, each is first
    written to ``values`` at its cursor. The counting pass (``write`` False: the cursors start at
    0 and end as the numbers of values) and the filling pass are the same loop, so the row totals
    add up in the dense layout's order in both layouts (a sequence's symbols are ascending).
    With ``weights`` (not empty), each value's sequence weight ``seq_weights[m]`` is written
    beside it."""
    M, R, W = counts.shape
    weighted = weights.shape[0] > 0
    shared = symbols.shape[0] == 1
    for m in range(M):
        s = 0 if shared else m
        for r in range(R):
            total = 0.0
            for w in range(W):
                n = counts[m, r, w]
                if n > 0.0:
                    total += n
                    key = r * D + symbols[s, w]
                    if write:
                        values[entry_cursor[key]] = n
                        if weighted:
                            weights[entry_cursor[key]] = seq_weights[m]
                    entry_cursor[key] += 1
            if total > 0.0:
                if write:
                    values[row_cursor[r]] = total
                    if weighted:
                        weights[row_cursor[r]] = seq_weights[m]
                row_cursor[r] += 1


_NO_VALUES = np.zeros(0)  # the counting pass writes nothing


def _as_batch(batch, D: int):
    """(counts (M, R, W) float64, symbols (M or 1, W) int64) of a dense or sparse batch."""
    if isinstance(batch, tuple):
        values, symbols = batch
        return np.ascontiguousarray(values, dtype=np.float64), np.ascontiguousarray(symbols, dtype=np.int64)
    return np.ascontiguousarray(batch, dtype=np.float64), np.arange(D, dtype=np.int64)[None, :]


def count_table(groups: dict, weights: list | None = None) -> CountTable:
    """Gather the counts of several groups into one :class:`CountTable`.

    Parameters
    ----------
    groups : dict[str, tuple[tuple[int, int], list]]
        Per group its (R, D) and its count batches: arrays (M_b, R, D), or pairs
        (counts (M_b, R, W), symbols (M_b, W)) in the sparse emission layout (counts at those
        columns of D; padding slots hold 0).
    weights : list of (float64 (M_b,) or None), optional
        Per batch (the same batches in every group), how many sequences each row stands for;
        None (or all None): one each.

    Returns
    -------
    CountTable
    """
    shapes, entry_tasks, row_tasks = {}, {}, {}
    keys, lengths, filled = [], [], []
    n_tasks = 0
    for g, ((R, D), batches) in groups.items():
        R, D = int(R), int(D)
        batches = [_as_batch(b, D) for b in batches]
        entry_counts = np.zeros(R * D, dtype=np.int64)
        row_counts = np.zeros(R, dtype=np.int64)
        for counts, symbols in batches:
            _walk_positive(
                counts, symbols, D, entry_counts, row_counts, _NO_VALUES, False, _NO_VALUES, _NO_VALUES
            )
        entry_keys = np.flatnonzero(entry_counts)
        row_keys = np.flatnonzero(row_counts)
        shapes[g] = (R, D)
        entry_tasks[g] = slice(n_tasks, n_tasks + entry_keys.size)
        n_tasks += entry_keys.size
        row_tasks[g] = slice(n_tasks, n_tasks + row_keys.size)
        n_tasks += row_keys.size
        keys += [entry_keys, row_keys]
        lengths += [entry_counts[entry_keys], row_counts[row_keys]]
        filled.append((batches, D, entry_counts, row_counts))
    keys = np.concatenate(keys).astype(np.int64) if keys else np.zeros(0, dtype=np.int64)
    lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    bounds = np.zeros(n_tasks + 1, dtype=np.int64)
    np.cumsum(lengths, out=bounds[1:])
    values = np.empty(int(bounds[-1]))
    weighted = weights is not None and any(w is not None for w in weights)
    value_weights = np.empty(int(bounds[-1])) if weighted else _NO_VALUES
    for (batches, D, entry_counts, row_counts), g in zip(filled, shapes):
        entry_cursor = np.zeros(entry_counts.size, dtype=np.int64)
        entry_cursor[keys[entry_tasks[g]]] = bounds[entry_tasks[g].start : entry_tasks[g].stop]
        row_cursor = np.zeros(row_counts.size, dtype=np.int64)
        row_cursor[keys[row_tasks[g]]] = bounds[row_tasks[g].start : row_tasks[g].stop]
        for b, (counts, symbols) in enumerate(batches):
            seq_weights = _NO_VALUES
            if weighted:
                w = weights[b]
                seq_weights = np.ones(counts.shape[0]) if w is None else np.asarray(w, dtype=np.float64)
            _walk_positive(
                counts, symbols, D, entry_cursor, row_cursor, values, True, seq_weights, value_weights
            )
    return CountTable(shapes, entry_tasks, row_tasks, keys, bounds, values, value_weights)


@njit(cache=True, nogil=True)
def _task_sums(x, values, weights, start, stop, out):  # pragma: no cover - compiled
    """``out[:] = sum_i w_i (f(x + values[i]) - f(x))`` over ``start <= i < stop``, for f in
    (lgamma, psi, psi'); ``w_i = weights[i]``, or 1 where ``weights`` is empty. A value with
    ``x + n == x`` in floating point adds exactly 0 and is skipped (after a few EM iterations a
    third to a half of the counts are that small next to their concentration)."""
    lg0, psi0, tri0 = gamma_functions_scalar(x)
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    if weights.shape[0] == 0:
        for i in range(start, stop):
            y = x + values[i]
            if y != x:
                lg, psi, tri = gamma_functions_scalar(y)
                s0 += lg - lg0
                s1 += psi - psi0
                s2 += tri - tri0
    else:
        for i in range(start, stop):
            y = x + values[i]
            if y != x:
                lg, psi, tri = gamma_functions_scalar(y)
                w = weights[i]
                s0 += w * (lg - lg0)
                s1 += w * (psi - psi0)
                s2 += w * (tri - tri0)
    out[0] = s0
    out[1] = s1
    out[2] = s2


# Two compiled passes, one on a single thread for small passes and one on numba's threads, as
# two functions: numba's cache tells compilations apart by function, not by their options.
@njit(cache=True, nogil=True, inline="always")
def _table_task(alpha, active, bounds, values, weights, out, t):  # pragma: no cover - compiled
    """:func:`_task_sums` of task ``t`` into ``out[t]`` (3,) if it is active, else 0."""
    if active[t]:
        _task_sums(alpha[t], values, weights, bounds[t], bounds[t + 1], out[t])
    else:
        out[t, :] = 0.0


@njit(cache=True, nogil=True)
def _table_pass_serial(alpha, active, bounds, values, weights, out):  # pragma: no cover - compiled
    """:func:`_table_task` of every task into ``out`` (n_tasks, 3)."""
    for t in range(alpha.shape[0]):
        _table_task(alpha, active, bounds, values, weights, out, t)


@njit(parallel=True, cache=True, nogil=True)
def _table_pass_parallel(alpha, active, bounds, values, weights, out):  # pragma: no cover - compiled
    """:func:`_table_pass_serial` over numba's threads (each task on one thread: the same sums)."""
    for t in prange(alpha.shape[0]):
        _table_task(alpha, active, bounds, values, weights, out, t)


def table_sums(table: CountTable, alphas: dict, rows: dict | None = None) -> dict:
    """Sums over sequences of the Dirichlet-multinomial terms and their first two derivatives,
    for every group of ``alphas`` in one compiled pass.

    For rows ``r`` with concentration ``alpha[r]`` (D,) and every sequence's expected counts
    ``n_mr`` (D,), ``entry[f, r, d] = sum_m f(alpha_rd + n_mrd) - f(alpha_rd)`` and
    ``row[f, r] = sum_m f(a_r + n_mr) - f(a_r)`` (``a_r``, ``n_mr`` the row totals, ``a_r``
    added left to right) for ``f`` = lgamma, digamma, trigamma; each sequence's terms times
    its weight where the table has weights. Entries with ``n = 0`` contribute exactly 0 and are
    not in the table.

    Parameters
    ----------
    table : CountTable
    alphas : dict[str, ndarray float64 (R, D)]
        Concentrations of some of the table's groups (only those are computed).
    rows : dict[str, ndarray of bool (R,)], optional
        Compute only these rows of each group (the others are returned as 0).

    Returns
    -------
    dict[str, tuple[ndarray (3, R, D), ndarray (3, R)]]
    """
    task_alpha = np.zeros(table.n_tasks)
    task_active = np.zeros(table.n_tasks, dtype=np.bool_)
    for g, alpha in alphas.items():
        R, D = table.shapes[g]
        alpha = np.ascontiguousarray(alpha, dtype=np.float64)
        if alpha.shape != (R, D):
            raise ValueError(f"concentration of group {g!r} has shape {alpha.shape}, expected {(R, D)}")
        active = np.ones(R, dtype=np.bool_) if rows is None else np.asarray(rows[g], dtype=np.bool_)
        entries, totals = table.entry_tasks[g], table.row_tasks[g]
        task_alpha[entries] = alpha.reshape(-1)[table.keys[entries]]
        task_active[entries] = active[table.keys[entries] // D]
        task_alpha[totals] = sequential_row_sums(alpha)[table.keys[totals]]
        task_active[totals] = active[table.keys[totals]]
    out = np.empty((table.n_tasks, 3))
    work = int(np.diff(table.bounds)[task_active].sum())
    kernel = _table_pass_parallel if work >= PARALLEL_MIN_VALUES else _table_pass_serial
    kernel(task_alpha, task_active, table.bounds, table.values, table.weights, out)
    result = {}
    for g in alphas:
        R, D = table.shapes[g]
        entry = np.zeros((3, R * D))
        row = np.zeros((3, R))
        entries, totals = table.entry_tasks[g], table.row_tasks[g]
        entry[:, table.keys[entries]] = out[entries].T
        row[:, table.keys[totals]] = out[totals].T
        result[g] = (entry.reshape(3, R, D), row)
    return result
