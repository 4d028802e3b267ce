"""Compiled E-step: every sequence of a batch sweeps q(Z) and q(theta) until it converges.

Per sequence, one thread: the q(Z) update of the family (PF: the chain core of
:mod:`.chain` on exp(E log theta); FF: one exact mean-field pass), then the Dirichlet updates
``g = prior + counts`` with one lgamma+digamma pass that gives both the collapsed ELBO and the
next sweep's E log theta. Emission terms only for the symbols a sequence contains, so a sweep
costs O(N K^2 + K x distinct symbols), not O(K V). Its reference twin is the torch E-step of
:mod:`ldhmm.inference.cavi.expectation` (the same driver, with the guide's ``update_hidden``).

Imports numpy and numba only: everything derived from the priors with other libraries is
computed once by the caller and passed in (:class:`PriorTerms`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, prange

from .dirichlet_multinomial import SUM_BLOCK
from .scaled_chain import FASTMATH, chain_pass, shift_initial, shift_transition
from .special import FASTMATH_SPECIAL, digamma, lgamma_digamma

__all__ = [
    "FAMILIES",
    "PriorTerms",
    "prior_special_values",
    "shifted_potentials",
    "SweepSettings",
    "SequenceArrays",
    "SequenceState",
    "SequenceResults",
    "StatisticSums",
    "fused_e_step",
    "ff_update",
]


# inline="always" (numba inlines the function into the kernel): the Dirichlet pass and the PF
# update run once or twice per sweep of every sequence, with a dozen arrays as arguments; as
# calls, passing them (a reference count taken and dropped on each) cost 13-24% of an HMMV or
# VBHMM E-step (docs/performance.md). Inlined code is compiled under the kernel's fastmath
# flags, so only functions whose rounding those flags cannot change are inlined: _pf_update
# has the kernel's own flags, the others only add, subtract, compare and call (the special
# functions stay calls with their own flags); _weighted, which sums products, stays a call.
@njit(cache=True, nogil=True, inline="always")
def _stage_rows(prior, counts, prior_values, prior_rows, staged, s, n_todo):  # pragma: no cover - compiled
    """Stage the entries ``g = prior + counts`` of rows of pi or A and their row totals (added
    left to right) from position ``s`` of ``staged`` (see :func:`_sequence_terms`): each with the
    prior's lgamma and psi, and listed for evaluation where it differs from the prior's.
    Returns the next position and the length of the list."""
    x, lg, psi, todo = staged
    R, D = prior.shape
    for i in range(R):
        total = 0.0
        for d in range(D):
            p = prior[i, d]
            g = p + counts[i, d]
            total += g
            x[s] = g
            lg[s] = prior_values[0, i, d]
            psi[s] = prior_values[1, i, d]
            todo[n_todo] = s
            n_todo += g != p
            s += 1
        x[s] = total
        lg[s] = prior_rows[1, i]
        psi[s] = prior_rows[2, i]
        todo[n_todo] = s
        n_todo += total != prior_rows[0, i]
        s += 1
    return s, n_todo


@njit(cache=True, nogil=True, fastmath=FASTMATH_SPECIAL, inline="always")
def _evaluate_staged(staged, n_todo, with_lgamma):  # pragma: no cover - compiled
    """lgamma and psi of the listed staged entries (psi only if not ``with_lgamma``): one
    branch-free loop of independent evaluations."""
    x, lg, psi, todo = staged
    if with_lgamma:
        for j in range(n_todo):
            s = todo[j]
            lg[s], psi[s] = lgamma_digamma(x[s])
    else:
        for j in range(n_todo):
            s = todo[j]
            psi[s] = digamma(x[s])


@njit(cache=True, nogil=True, inline="always")
def _rows_log_beta_and_expected_logs(out, staged, s):  # pragma: no cover - compiled
    """out[i] = psi(g_i) - psi(sum g_i) for rows staged by :func:`_stage_rows` from position
    ``s``; returns sum_i [sum_d lgamma(g_id) - lgamma(sum_d g_id)] and the next position."""
    _, lg, psi, _ = staged
    R, D = out.shape
    value = 0.0
    for i in range(R):
        for d in range(D):
            value += lg[s]
            out[i, d] = psi[s]
            s += 1
        value -= lg[s]
        psi_total = psi[s]
        s += 1
        for d in range(D):
            out[i, d] -= psi_total
    return value, s


@njit(cache=True, nogil=True, fastmath=FASTMATH_SPECIAL, inline="always")
def _sequence_terms(
    groups,
    prior,
    prior_B_terms,
    tables,
    counts,
    present,
    n_present,
    sym_map,
    theta,
    psi_rowsum_B,
    staged,
    with_lgamma,
):  # pragma: no cover - compiled
    """For the per-sequence groups at g = prior + counts: E log theta (for B only the
    columns of the symbols present; psi of B's row sums in ``psi_rowsum_B``), and the
    collapsed ELBO part sum log B(g), less log B(prior) for B (the caller subtracts the
    constant log B(prior) of pi and A). Counts and E log B are indexed by slot, the prior by
    symbol (``sym_map[slot]``).

    ``groups``: (seq_pi, seq_A, seq_B), whether each group is per sequence; ``prior``:
    (pi (K,), A (K, K), B (K, V)); ``prior_B_terms``: B's row sums (K,), lgamma of B (K, V) and
    of its row sums (K,); ``tables``: the kernel's own lgamma and psi of the priors, pi
    (2, 1, K) and (3, 1), A (2, K, K) and (3, K), B (2, K, V) and (2, K) (see
    :func:`prior_special_values`); ``counts`` (pi (1, K), A (K, K), B (K, W)) and ``theta``
    (E log pi (1, K), E log A (K, K), E log B (K, W)): the sequence's, ``theta`` written here.
    ``staged``: scratch, the entries' values x, lgamma, psi and the list of those to evaluate
    (float64, float64, float64, int64, each of length at least K + 1 + K (K + 1) +
    K (n_present + 1)). ``with_lgamma`` False: E log theta only (a warm start's), the value
    returned is not the bound.

    In three passes, with the same numbers as evaluating every entry in place: stage every
    entry with the prior's lgamma and psi, evaluate the special functions where the entry
    differs from the prior (its counts are zero or too small to change it in float64: on
    short sequences most transitions out of unvisited states), then add up in the order of
    the entries."""
    seq_pi, seq_A, seq_B = groups
    prior_pi, prior_A, prior_B = prior
    prior_B_rowsum, lgamma_prior_B, lgamma_prior_B_rowsum = prior_B_terms
    values_pi, rows_pi, values_A, rows_A, values_B, rows_B = tables
    c_pi, c_A, c_B = counts
    elog_pi, elog_A, elog_B = theta
    x_staged, lg, psi, todo = staged
    K = prior_A.shape[0]
    s = 0
    n_todo = 0
    if seq_pi:
        s, n_todo = _stage_rows(prior_pi.reshape((1, K)), c_pi, values_pi, rows_pi, staged, s, n_todo)
    if seq_A:
        s, n_todo = _stage_rows(prior_A, c_A, values_A, rows_A, staged, s, n_todo)
    if seq_B:
        for k in range(K):
            rowsum = prior_B_rowsum[k]
            for j in range(n_present):
                v = present[j]
                x = sym_map[v]
                p = prior_B[k, x]
                g = p + c_B[k, v]
                rowsum += c_B[k, v]
                x_staged[s] = g
                lg[s] = values_B[0, k, x]
                psi[s] = values_B[1, k, x]
                todo[n_todo] = s
                n_todo += g != p
                s += 1
            x_staged[s] = rowsum
            lg[s] = rows_B[0, k]
            psi[s] = rows_B[1, k]
            todo[n_todo] = s
            n_todo += rowsum != prior_B_rowsum[k]
            s += 1
    _evaluate_staged(staged, n_todo, with_lgamma)
    s = 0
    value = 0.0
    if seq_pi:
        part, s = _rows_log_beta_and_expected_logs(elog_pi, staged, s)
        value += part
    if seq_A:
        part, s = _rows_log_beta_and_expected_logs(elog_A, staged, s)
        value += part
    if seq_B:
        for k in range(K):
            for j in range(n_present):
                v = present[j]
                value += lg[s] - lgamma_prior_B[k, sym_map[v]]
                elog_B[k, v] = psi[s]
                s += 1
            value += lgamma_prior_B_rowsum[k] - lg[s]
            psi_total = psi[s]
            psi_rowsum_B[k] = psi_total
            s += 1
            for j in range(n_present):
                elog_B[k, present[j]] -= psi_total
    return value


@njit(cache=True, nogil=True, fastmath=FASTMATH_SPECIAL)
def _fill_special_values(x, values):  # pragma: no cover - compiled
    """values[0], values[1] = the kernel's lgamma and psi of every entry of ``x`` (R, D)."""
    R, D = x.shape
    for i in range(R):
        for d in range(D):
            values[0, i, d], values[1, i, d] = lgamma_digamma(x[i, d])


@njit(cache=True, nogil=True, fastmath=FASTMATH_SPECIAL)
def _fill_row_values(x, rows):  # pragma: no cover - compiled
    """rows[0] = the row totals of ``x`` (R, D) added left to right (as the kernel adds
    ``g``), rows[1], rows[2] their lgamma and psi."""
    R, D = x.shape
    for i in range(R):
        total = 0.0
        for d in range(D):
            total += x[i, d]
        rows[0, i] = total
        rows[1, i], rows[2, i] = lgamma_digamma(total)


def prior_special_values(prior, rowsum_B, sequence_groups) -> dict:
    """The kernel's own lgamma and psi of the priors of the per-sequence groups, for
    :class:`PriorTerms` (O(K^2 + K V), once per E-step).

    Parameters
    ----------
    prior : tuple of float64 ndarray (K,), (K, K), (K, V)
    rowsum_B : float64 ndarray (K,)
        The emission prior's row sums (:attr:`PriorTerms.rowsum_B`).
    sequence_groups : tuple of 3 bool
        Whether pi, A, B are per-sequence groups (the others get zero-filled placeholders of
        the right shapes).

    Returns
    -------
    dict with the fields ``values_pi`` ... ``rows_B`` of :class:`PriorTerms`.
    """
    K, V = np.shape(prior[2])
    out = {}
    for name, x, flag in (
        ("pi", np.reshape(prior[0], (1, K)), sequence_groups[0]),
        ("A", np.reshape(prior[1], (K, K)), sequence_groups[1]),
    ):
        x = np.ascontiguousarray(x, dtype=np.float64)
        values = np.zeros((2,) + x.shape)
        rows = np.zeros((3, x.shape[0]))
        if flag:
            _fill_special_values(x, values)
            _fill_row_values(x, rows)
        out["values_" + name], out["rows_" + name] = values, rows
    values_B = np.zeros((2, K, V))
    rows_B = np.zeros((2, K))
    if sequence_groups[2]:
        _fill_special_values(np.ascontiguousarray(prior[2], dtype=np.float64), values_B)
        _fill_special_values(
            np.ascontiguousarray(rowsum_B, dtype=np.float64).reshape((1, K)), rows_B.reshape((2, 1, K))
        )
    out["values_B"], out["rows_B"] = values_B, rows_B
    return out


@njit(cache=True, nogil=True)
def _weighted(counts, log_values):  # pragma: no cover - compiled
    R, D = counts.shape
    value = 0.0
    for i in range(R):
        for d in range(D):
            if counts[i, d] > 0.0:
                value += counts[i, d] * log_values[i, d]
    return value


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def _shift_emissions(elog_B, columns, table, shifts):  # pragma: no cover - compiled
    """``table[r] = exp(elog_B[:, c] - s)``, ``shifts[r] = s`` (``s`` the column's largest entry)
    for every ``r, c`` of ``columns``: one emission row per symbol, largest entry 1."""
    K = elog_B.shape[0]
    for r in range(columns.shape[0]):
        c = columns[r]
        s = elog_B[0, c]
        for k in range(1, K):
            s = max(s, elog_B[k, c])
        shifts[r] = s
        for k in range(K):
            table[r, k] = np.exp(elog_B[k, c] - s)


def shifted_potentials(fixed, sequence_groups) -> dict:
    """The database-level groups' potentials exponentiated and shifted (largest entry 1), for
    :class:`PriorTerms`: the same for every sequence and every sweep of an E-step, so the PF
    sweeps copy them instead of recomputing ``K + K^2 + K x distinct symbols`` exponentials each.

    Parameters
    ----------
    fixed : tuple of float64 ndarray (K,), (K, K), (K, V)
        E log theta of the database-level groups (read only for those).
    sequence_groups : tuple of 3 bool
        Whether pi, A, B are per-sequence groups (those get placeholders of shape (1,), (1, 1)
        and (1, 1): the sweeps compute their potentials from each sequence's counts).

    Returns
    -------
    dict with the fields ``initial_pi`` ... ``shift_B`` of :class:`PriorTerms`.
    """
    seq_pi, seq_A, seq_B = (bool(f) for f in sequence_groups)
    out = {"initial_pi": np.ones(1), "shift_pi": 0.0, "exp_A": np.ones((1, 1)), "shift_A": 0.0}
    out["table_B"], out["shift_B"] = np.ones((1, 1)), np.zeros(1)
    if not seq_pi:
        log_pi = np.ascontiguousarray(fixed[0], dtype=np.float64).reshape(-1)
        out["initial_pi"] = np.empty(log_pi.shape[0])
        out["shift_pi"] = float(shift_initial(log_pi, out["initial_pi"]))
    if not seq_A:
        log_A = np.ascontiguousarray(fixed[1], dtype=np.float64)
        out["exp_A"] = np.empty(log_A.shape)
        out["shift_A"] = float(shift_transition(log_A, out["exp_A"]))
    if not seq_B:
        log_B = np.ascontiguousarray(fixed[2], dtype=np.float64)
        K, V = log_B.shape
        out["table_B"], out["shift_B"] = np.empty((V, K)), np.empty(V)
        _shift_emissions(log_B, np.arange(V), out["table_B"], out["shift_B"])
    return out


@njit(cache=True, nogil=True, fastmath=FASTMATH, inline="always")
def _pf_update(
    tokens_m, L, theta, present, n_present, symbol_count, counts, scratch, shifted
):  # pragma: no cover - compiled
    """PF q(Z): the chain core on exp(E log theta); new expected counts; returns H[q(Z)] (NaN
    if the scaled recursion failed).

    ``theta`` and ``counts`` as in :func:`_sequence_terms`; ``scratch``: alpha (T, K), scale
    (T,), A (K, K), obs_table (W, K), pair (K, K), emitted (W, K) and four (K,) vectors, from
    the caller (one set per block of sequences). The emission table ``obs_table`` is filled
    only for the symbols present, one row each, shifted per symbol: O(K x distinct symbols),
    not O(K V). ``shifted``: (sequence_groups, sym_map, initial_pi, shift_pi, exp_A, shift_A,
    table_B, shift_B), the database-level groups' potentials exponentiated once per E-step
    (:func:`shifted_potentials`; the same numbers as exponentiating ``theta`` here)."""
    elog_pi, elog_A, elog_B = theta
    c_pi, c_A, c_B = counts
    alpha, scale, A, obs_table, pair, emitted, acc, beta, w, initial = scratch
    groups, sym_map, fixed_initial, shift_pi, fixed_A, shift_A, table_B, shift_B = shifted
    K = elog_A.shape[0]
    for j in range(n_present):
        for k in range(K):
            emitted[present[j], k] = 0.0
    if groups[0]:
        init_shift = shift_initial(elog_pi[0], initial)
    else:
        init_shift = shift_pi
        initial = fixed_initial
    if groups[1]:
        trans_shift = shift_transition(elog_A, A)
    else:
        trans_shift = shift_A
        A = fixed_A
    log_z = init_shift + trans_shift * (L - 1)
    for j in range(n_present):
        v = present[j]
        if groups[2]:
            s = elog_B[0, v]
            for k in range(1, K):
                s = max(s, elog_B[k, v])
            for k in range(K):
                obs_table[v, k] = np.exp(elog_B[k, v] - s)
        else:
            x = sym_map[v]
            s = shift_B[x]
            for k in range(K):
                obs_table[v, k] = table_B[x, k]
        log_z += s * symbol_count[j]
    log_z = chain_pass(tokens_m, L, initial, A, obs_table, log_z, alpha, scale, pair, emitted, acc, beta, w)
    if not np.isfinite(log_z):
        return np.nan
    # A finite normalizer with non-finite marginals (0 * inf inside the scaled recursion, e.g.
    # priors near 1e-3 at a cold start): fail before the counts are touched, so that the
    # log-space redo starts from the last valid ones.
    check = 0.0
    for i in range(K):
        check += alpha[0, i]
        for k in range(K):
            check += pair[i, k]
    for j in range(n_present):
        for k in range(K):
            check += emitted[present[j], k]
    if not np.isfinite(check):
        return np.nan
    for i in range(K):
        for k in range(K):
            c_A[i, k] = pair[i, k]
    for k in range(K):
        c_pi[0, k] = alpha[0, k]
    for j in range(n_present):
        v = present[j]
        for k in range(K):
            c_B[k, v] = emitted[v, k]
    expected = _weighted(c_pi, elog_pi) + _weighted(c_A, elog_A)
    for k in range(K):
        for j in range(n_present):
            v = present[j]
            if c_B[k, v] > 0.0:
                expected += c_B[k, v] * elog_B[k, v]
    return log_z - expected


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def _ff_update(tokens_m, L, theta, present, n_present, phi, initialize, counts, scratch):  # pragma: no cover
    """One FF pass (even positions, then odd: exact coordinate ascent); new expected counts;
    returns H[q(Z)]. Rows, not columns, in the K-long loops so that they vectorize (see
    :func:`_pf_update`). ``theta`` and ``counts`` as in :func:`_sequence_terms`; ``scratch``:
    emission (W, K), pair (K, K) and two (K,) vectors from the caller."""
    elog_pi, elog_A, elog_B = theta
    c_pi, c_A, c_B = counts
    emission, pair, logits, weights = scratch
    K = elog_A.shape[0]
    for j in range(n_present):
        v = present[j]
        for k in range(K):
            emission[v, k] = elog_B[k, v]
    for i in range(K):
        for k in range(K):
            pair[i, k] = 0.0
    entropy = 0.0
    if initialize:
        for n in range(L):
            x = tokens_m[n]
            top = elog_B[0, x]
            for k in range(1, K):
                top = max(top, elog_B[k, x])
            total = 0.0
            for k in range(K):
                phi[n, k] = np.exp(elog_B[k, x] - top)
                total += phi[n, k]
            for k in range(K):
                phi[n, k] /= total
    for parity in range(2):
        for n in range(parity, L, 2):
            e = emission[tokens_m[n]]
            for k in range(K):
                logits[k] = e[k]
            if n == 0:
                for k in range(K):
                    logits[k] += elog_pi[0, k]
            else:
                prev = phi[n - 1]
                for j in range(K):
                    pj = prev[j]
                    Aj = elog_A[j]
                    for k in range(K):
                        logits[k] += pj * Aj[k]
            if n < L - 1:
                nxt = phi[n + 1]
                for k in range(K):
                    Ak = elog_A[k]
                    acc = 0.0
                    for j in range(K):
                        acc += Ak[j] * nxt[j]
                    logits[k] += acc
            top = logits[0]
            for k in range(1, K):
                top = max(top, logits[k])
            total = 0.0
            for k in range(K):
                weights[k] = np.exp(logits[k] - top)
                total += weights[k]
            inv = 1.0 / total
            cur = phi[n]
            # Every position is set once per pass, so its entropy term is final here:
            # -sum_k p_k log p_k = log(total) + top - sum_k p_k logit_k (one log, not K).
            dot = 0.0
            for k in range(K):
                p = weights[k] * inv
                cur[k] = p
                if p > 0.0:
                    dot += p * logits[k]
            entropy += np.log(total) + top - dot
    for n in range(L):
        for k in range(K):
            if not np.isfinite(phi[n, k]):
                return np.nan  # reported as failed; the caller redoes it step by step
    emitted = emission  # reused as the (V, K) table of expected emission counts
    for j in range(n_present):
        v = present[j]
        for k in range(K):
            emitted[v, k] = 0.0
    for k in range(K):
        c_pi[0, k] = phi[0, k]
    for n in range(L):
        cur = phi[n]
        e = emitted[tokens_m[n]]
        for k in range(K):
            e[k] += cur[k]
        if n > 0:
            prev = phi[n - 1]
            for i in range(K):
                pi_ = prev[i]
                Pi = pair[i]
                for k in range(K):
                    Pi[k] += pi_ * cur[k]
    for i in range(K):
        for k in range(K):
            c_A[i, k] = pair[i, k]
    for j in range(n_present):
        v = present[j]
        for k in range(K):
            c_B[k, v] = emitted[v, k]
    return entropy


#: The FF pass of one sequence, for kernels elsewhere whose emission columns are not symbols
#: (:mod:`.factorized_batch`: the contextual model's (context, symbol) pairs).
ff_update = _ff_update


@njit(parallel=True, cache=True, nogil=True, fastmath=FASTMATH)
def _fused_e_step(settings, data, prior, terms, fixed, state, results, sums):  # pragma: no cover - compiled
    """The kernel of :func:`fused_e_step`; its arguments in groups (see :class:`SweepSettings`,
    :class:`SequenceArrays`, :class:`PriorTerms`, :class:`SequenceState`,
    :class:`SequenceResults`, :class:`StatisticSums`; ``prior`` and ``fixed`` per group pi, A, B)."""
    # Unpacked once, outside the parallel loop: the loop body reads plain arrays and scalars.
    family, sequence_groups = settings.family, settings.sequence_groups
    max_iter, tol = settings.max_iter, settings.tol
    tokens, lengths, symbols = data.tokens, data.lengths, data.symbols
    prior_pi, prior_A, prior_B = prior
    fixed_pi, fixed_A, fixed_B = fixed
    prior_log_beta_piA = terms.prior_log_beta_piA
    lgamma_prior_B, psi_prior_B = terms.lgamma_B, terms.psi_B
    prior_B_rowsum, lgamma_prior_B_rowsum = terms.rowsum_B, terms.lgamma_rowsum_B
    elog_prior_pi, elog_prior_A, elog_prior_B = terms.elog_pi, terms.elog_A, terms.elog_B
    tables = (terms.values_pi, terms.rows_pi, terms.values_A, terms.rows_A, terms.values_B, terms.rows_B)
    psi_prior_B_rowsum = terms.rows_B[1]
    fixed_potentials = (
        terms.initial_pi,
        terms.shift_pi,
        terms.exp_A,
        terms.shift_A,
        terms.table_B,
        terms.shift_B,
    )
    counts_pi, counts_A, counts_B = state.counts_pi, state.counts_A, state.counts_B
    phi_all, initialize = state.phi, state.initialize
    entropy, elbo, local = results.entropy, results.elbo, results.local
    sweeps, failed, trace = results.sweeps, results.failed, results.trace
    sum_elog_pi, sum_elog_A = sums.elog_pi, sums.elog_A
    sum_delta_B, sum_psi_rowsum_B = sums.delta_B, sums.psi_rowsum_B
    M = tokens.shape[0]
    K, V = prior_B.shape
    W = counts_B.shape[2]  # V (dense layout) or the bucket's most distinct symbols (sparse)
    sparse = symbols.shape[0] > 0
    identity = np.arange(W)
    seq_pi, seq_A, seq_B = sequence_groups[0], sequence_groups[1], sequence_groups[2]
    groups = (seq_pi, seq_A, seq_B)
    prior_B_terms = (prior_B_rowsum, lgamma_prior_B, lgamma_prior_B_rowsum)
    any_sequence = seq_pi or seq_A or seq_B
    n_blocks = (M + SUM_BLOCK - 1) // SUM_BLOCK
    T = tokens.shape[1]
    T_pf = T if family == 0 else 0  # forward messages: PF only
    for block in prange(n_blocks):
        # Scratch for the block's sequences (one thread runs a block): no allocation per
        # sequence. elog_B, obs_table, emitted, emission: only the present symbols' columns
        # or rows are written and read.
        elog_pi = np.empty((1, K))
        elog_A = np.empty((K, K))
        elog_B = np.empty((K, W))
        alpha_block = np.empty((T_pf, K))
        scale_block = np.empty(T_pf)
        slot = np.full(W, -1, dtype=np.int64)
        present = np.empty(min(T, W), dtype=np.int64)
        symbol_count = np.empty(min(T, W))
        psi_rowsum_B = np.empty(K)
        A = np.empty((K, K))
        table = np.empty((W, K))
        pair = np.empty((K, K))
        emitted = np.empty((W, K))
        vec1 = np.empty(K)
        vec2 = np.empty(K)
        vec3 = np.empty(K)
        vec4 = np.empty(K)
        theta = (elog_pi, elog_A, elog_B)
        n_staged = K + 1 + K * (K + 1) + K * (min(T, W) + 1)
        staged = (
            np.empty(n_staged),
            np.empty(n_staged),
            np.empty(n_staged),
            np.empty(n_staged, dtype=np.int64),
        )
        pf_scratch = (alpha_block, scale_block, A, table, pair, emitted, vec1, vec2, vec3, vec4)
        ff_scratch = (table, pair, vec1, vec2)
        for m in range(block * SUM_BLOCK, min(M, (block + 1) * SUM_BLOCK)):
            L = lengths[m]
            tokens_m = tokens[m]
            n_present = 0
            for n in range(L):
                x = tokens_m[n]
                if slot[x] < 0:
                    slot[x] = n_present
                    present[n_present] = x
                    symbol_count[n_present] = 0.0
                    n_present += 1
                symbol_count[slot[x]] += 1.0
            for j in range(n_present):  # ready for the next sequence
                slot[present[j]] = -1
            c_pi = counts_pi[m].reshape((1, K))
            c_A = counts_A[m]
            c_B = counts_B[m]  # zero outside the present columns, and kept so
            counts = (c_pi, c_A, c_B)
            sym_map = symbols[m] if sparse else identity  # slot -> symbol
            phi = phi_all[m] if family == 1 else phi_all[0]
            shifted = (sequence_groups, sym_map) + fixed_potentials
            # E log theta at the warm start (database-level groups: fixed); afterwards each
            # sweep's special-function pass gives both its collapsed ELBO and the next sweep's
            # E log theta, and the last one gives the M-step's statistics.
            if not seq_pi:
                elog_pi[0, :] = fixed_pi
            if not seq_A:
                elog_A[:, :] = fixed_A
            if not seq_B:
                for k in range(K):
                    for j in range(n_present):
                        elog_B[k, present[j]] = fixed_B[k, sym_map[present[j]]]
            # A sequence without any counts yet (cold start) has q(theta) = the prior, whose
            # E log theta is the same for every sequence: computed once by the caller.
            fresh = True
            for k in range(K):
                if c_pi[0, k] != 0.0:
                    fresh = False
                for j in range(K):
                    if c_A[k, j] != 0.0:
                        fresh = False
                for j in range(n_present):
                    if c_B[k, present[j]] != 0.0:
                        fresh = False
            if fresh:
                if seq_pi:
                    elog_pi[0, :] = elog_prior_pi
                if seq_A:
                    elog_A[:, :] = elog_prior_A
                if seq_B:
                    for k in range(K):
                        psi_rowsum_B[k] = psi_prior_B_rowsum[k]
                        for j in range(n_present):
                            elog_B[k, present[j]] = elog_prior_B[k, sym_map[present[j]]]
            elif any_sequence:  # E log theta only: this bound is not wanted
                _sequence_terms(
                    groups,
                    prior,
                    prior_B_terms,
                    tables,
                    counts,
                    present,
                    n_present,
                    sym_map,
                    theta,
                    psi_rowsum_B,
                    staged,
                    False,
                )
            previous = -np.inf
            for it in range(max_iter):
                if family == 0:
                    h = _pf_update(
                        tokens_m, L, theta, present, n_present, symbol_count, counts, pf_scratch, shifted
                    )
                else:
                    first = initialize and it == 0
                    h = _ff_update(tokens_m, L, theta, present, n_present, phi, first, counts, ff_scratch)
                if not np.isfinite(h):
                    failed[m] = True
                    break
                # Per-sequence groups: log B(prior + counts) - log B(prior) (collapsed form);
                # database-level groups: counts . E log theta (their E log theta is fixed).
                # Without per-sequence groups the first part is 0: nothing to evaluate.
                collapsed = 0.0
                if any_sequence:
                    collapsed = _sequence_terms(
                        groups,
                        prior,
                        prior_B_terms,
                        tables,
                        counts,
                        present,
                        n_present,
                        sym_map,
                        theta,
                        psi_rowsum_B,
                        staged,
                        True,
                    )
                collapsed -= prior_log_beta_piA
                database = 0.0
                if not seq_pi:
                    database += _weighted(c_pi, fixed_pi.reshape((1, K)))
                if not seq_A:
                    database += _weighted(c_A, fixed_A)
                if not seq_B:
                    for k in range(K):
                        for j in range(n_present):
                            v = present[j]
                            if c_B[k, v] > 0.0:
                                database += c_B[k, v] * fixed_B[k, sym_map[v]]
                entropy[m] = h
                local[m] = h + collapsed
                value = h + collapsed + database
                elbo[m] = value
                sweeps[m] = it + 1
                if it < trace.shape[1]:
                    trace[m, it] = value
                if not any_sequence:
                    break
                if abs(value - previous) <= tol * abs(value):
                    break
                previous = value
            if failed[m]:
                continue
            # Sufficient statistics of the paper's M-step at the final q(theta) (E log theta was
            # computed from the final counts), summed per block of sequences: no races, no
            # per-sequence buffers, and the same sums whatever the number of threads. Sparse
            # layout: B's terms per sequence and slot (a (K, V) buffer per block would be
            # O(K V) per 64 sequences); the caller adds them up by symbol.
            if seq_pi:
                for k in range(K):
                    sum_elog_pi[block, k] += elog_pi[0, k]
            if seq_A:
                for i in range(K):
                    for k in range(K):
                        sum_elog_A[block, i, k] += elog_A[i, k]
            if seq_B:
                for k in range(K):
                    sum_psi_rowsum_B[block, k] += psi_rowsum_B[k]
                    for j in range(n_present):
                        v = present[j]
                        delta = elog_B[k, v] + psi_rowsum_B[k] - psi_prior_B[k, sym_map[v]]
                        if sparse:
                            sum_delta_B[m, k, v] = delta
                        else:
                            sum_delta_B[block, k, v] += delta


#: The per-sequence q(Z) updates the compiled E-step runs, and whether each carries a state
#: (FF: the factors ``phi`` (M, T, K)) between sweeps and EM iterations.
FAMILIES = {"pf": (0, False), "ff": (1, True)}


class PriorTerms(NamedTuple):
    """Quantities of the priors (and of the database-level groups' fixed E log theta) the
    kernel needs, computed once per E-step by the caller.

    Attributes
    ----------
    prior_log_beta_piA : float
        ``log B(prior)`` summed over the per-sequence rows of pi and A.
    lgamma_B, psi_B : ndarray (K, V)
        lgamma and digamma of the emission prior.
    rowsum_B, lgamma_rowsum_B : ndarray (K,)
        Row sums of the emission prior and their lgamma.
    elog_pi, elog_A, elog_B : ndarray (K,), (K, K), (K, V)
        E log theta under the prior itself (sequences without counts yet start there).
    values_pi, values_A, values_B : ndarray (2, 1, K), (2, K, K), (2, K, V)
        The kernel's own lgamma and psi of the per-sequence priors (zeros for the other
        groups): an entry whose counts leave ``prior + counts`` equal to the prior takes them
        from here, the same numbers as the special functions would give.
    rows_pi, rows_A : ndarray (3, 1), (3, K)
        The prior's row totals added left to right, their lgamma and psi (the same for a row
        whose total equals the prior's).
    rows_B : ndarray (2, K)
        lgamma and psi of ``rowsum_B``.
    initial_pi, shift_pi : ndarray (K,), float
        ``exp(E log pi - shift_pi)`` of a database-level pi, ``shift_pi`` its largest entry.
    exp_A, shift_A : ndarray (K, K), float
        The same for a database-level A (``shift_A``: the largest entry of the matrix).
    table_B, shift_B : ndarray (V, K), (V,)
        The same for a database-level B, one row and one shift per symbol.

    See :func:`prior_special_values` for ``values_pi`` ... ``rows_B``, and
    :func:`shifted_potentials` for the last six (placeholders for per-sequence groups).
    """

    prior_log_beta_piA: float
    lgamma_B: np.ndarray
    psi_B: np.ndarray
    rowsum_B: np.ndarray
    lgamma_rowsum_B: np.ndarray
    elog_pi: np.ndarray
    elog_A: np.ndarray
    elog_B: np.ndarray
    values_pi: np.ndarray
    rows_pi: np.ndarray
    values_A: np.ndarray
    rows_A: np.ndarray
    values_B: np.ndarray
    rows_B: np.ndarray
    initial_pi: np.ndarray
    shift_pi: float
    exp_A: np.ndarray
    shift_A: float
    table_B: np.ndarray
    shift_B: np.ndarray


# The kernel's other argument groups. numba takes named tuples in nopython mode (and caches the
# compiled kernel per their element types), so an argument is added to its group here and read
# by name in the kernel: one edit where it is made, one where it is used.


class SweepSettings(NamedTuple):
    """What the sweeps of every sequence do.

    Attributes
    ----------
    family : int
        The q(Z) update, a code of :data:`FAMILIES` (0: PF, 1: FF).
    sequence_groups : ndarray bool (3,)
        Whether pi, A, B are per-sequence groups.
    max_iter : int
        Sweeps per sequence at most.
    tol : float
        A sequence stops when its ELBO changes by at most ``tol * |ELBO|``.
    """

    family: int
    sequence_groups: np.ndarray
    max_iter: int
    tol: float


class SequenceArrays(NamedTuple):
    """The bucket's sequences.

    Attributes
    ----------
    tokens : ndarray int64 (M, T)
        Symbols (dense layout) or slots (sparse layout).
    lengths : ndarray int64 (M,)
    symbols : ndarray int64 (M, W), or (0, W) in the dense layout
        Sparse layout: the symbol of every slot of every sequence.
    """

    tokens: np.ndarray
    lengths: np.ndarray
    symbols: np.ndarray


class SequenceState(NamedTuple):
    """Per-sequence variational state: the warm start, overwritten with the final one.

    Attributes
    ----------
    counts_pi, counts_A, counts_B : ndarray (M, K), (M, K, K), (M, K, W)
        Expected counts.
    phi : ndarray (M, T, K)
        FF's factors ((1, 1, K) placeholder for PF).
    initialize : bool
        Start ``phi`` from the emission potentials (FF without a state yet).
    """

    counts_pi: np.ndarray
    counts_A: np.ndarray
    counts_B: np.ndarray
    phi: np.ndarray
    initialize: bool


class SequenceResults(NamedTuple):
    """Per-sequence outputs, written by the kernel (see :func:`fused_e_step`'s return value).

    Attributes
    ----------
    entropy, elbo, local : ndarray (M,)
    sweeps : ndarray int64 (M,)
    failed : ndarray bool (M,)
    trace : ndarray (M, max_iter) or (M, 0)
        The ELBO after every sweep (NaN after the sequence stopped), where recorded.
    """

    entropy: np.ndarray
    elbo: np.ndarray
    local: np.ndarray
    sweeps: np.ndarray
    failed: np.ndarray
    trace: np.ndarray


class StatisticSums(NamedTuple):
    """The M-step's sufficient statistics, summed per block of :data:`SUM_BLOCK` sequences
    (no races, and the same sums whatever the number of threads).

    Attributes
    ----------
    elog_pi : ndarray (n_blocks, K)
    elog_A : ndarray (n_blocks, K, K)
    delta_B : ndarray (n_blocks, K, V), or per sequence and slot (M, K, W) in the sparse layout
    psi_rowsum_B : ndarray (n_blocks, K)
    """

    elog_pi: np.ndarray
    elog_A: np.ndarray
    delta_B: np.ndarray
    psi_rowsum_B: np.ndarray


def fused_e_step(
    family,
    tokens,
    lengths,
    prior,
    prior_terms,
    fixed,
    sequence_groups,
    counts,
    max_iter,
    tol,
    record_trace=False,
    phi=None,
    symbols=None,
):
    """Whole E-step of a batch in compiled code: every sequence sweeps until it converges.

    Parameters
    ----------
    family : {"pf", "ff"}
        ``"ff"`` updates the factors ``phi`` (M, T, K) in place; ``phi=None`` starts them from
        the emission potentials (a softmax of them).
    tokens : ndarray int64 (M, T); lengths : ndarray int64 (M,)
    prior : tuple of float64 ndarray (K,), (K, K), (K, V)
        Dirichlet priors of the groups (ignored for groups that are not per-sequence).
    prior_terms : PriorTerms
    fixed : tuple of float64 ndarray (K,), (K, K), (K, V)
        E log theta of database-level groups (ignored for per-sequence groups).
    sequence_groups : tuple of 3 bool
    counts : tuple of float64 ndarray (M, K), (M, K, K), (M, K, W)
        Warm start; overwritten with the final expected counts. W = V (dense layout), or the
        sparse layout's slots (see ``symbols``); ``tokens`` index the last axis.
    max_iter : int; tol : float
    record_trace : bool
        Also return the per-sweep ELBO of every sequence (M, max_iter), NaN after it stopped.
    phi : float64 ndarray (M, T, K), optional
    symbols : int64 ndarray (M, W), optional
        Sparse layout: the symbol of every slot of every sequence (``tokens`` are then slots).

    Returns
    -------
    dict with ``entropy``, ``elbo``, ``local`` (ELBO less the database-level groups' terms),
    ``sweeps``, ``failed`` (M,), ``trace`` (or None), ``phi`` (FF), and ``sum_expected_log``:
    for each per-sequence group, ``sum_m E_q[log theta_m]`` over the sequences that did not fail;
    for B in parts, ``(n, rows (K,), delta, symbols)``: the sum is ``n psi(beta) + delta -
    rows[:, None]`` with ``delta`` (K, V) in the dense layout and per slot (M, K, W), to be
    added by ``symbols`` (M, W), in the sparse one.
    """
    code, _ = FAMILIES[family]
    M = tokens.shape[0]
    K, V = prior[2].shape
    flags = np.array(sequence_groups, dtype=np.bool_)
    if family == "ff":
        # FF multiplies log-potentials by factors that can be exactly 0 (see ops.mean_field.LOG_ZERO).
        fixed = tuple(np.maximum(f, -1e250) for f in fixed)
    results = SequenceResults(
        entropy=np.zeros(M),
        elbo=np.full(M, -np.inf),
        local=np.zeros(M),
        sweeps=np.zeros(M, dtype=np.int64),
        failed=np.zeros(M, dtype=np.bool_),
        trace=np.full((M, max_iter if record_trace else 0), np.nan),
    )
    n_blocks = -(-M // SUM_BLOCK)  # per-block partial sums (see SUM_BLOCK)
    W = counts[2].shape[2]
    sparse = symbols is not None
    sums = StatisticSums(
        elog_pi=np.zeros((n_blocks, K)),
        elog_A=np.zeros((n_blocks, K, K)),
        delta_B=np.zeros((M, K, W)) if sparse and flags[2] else np.zeros((n_blocks, K, V)),
        psi_rowsum_B=np.zeros((n_blocks, K)),
    )
    initialize = phi is None
    if family == "ff" and phi is None:
        phi = np.zeros((M, tokens.shape[1], K))
    _fused_e_step(
        SweepSettings(code, flags, int(max_iter), float(tol)),
        SequenceArrays(
            np.ascontiguousarray(tokens),
            np.ascontiguousarray(lengths),
            np.ascontiguousarray(symbols, dtype=np.int64) if sparse else np.zeros((0, W), dtype=np.int64),
        ),
        tuple(prior),
        prior_terms._replace(prior_log_beta_piA=float(prior_terms.prior_log_beta_piA)),
        tuple(fixed),
        SequenceState(*counts, phi if family == "ff" else np.zeros((1, 1, K)), initialize),
        results,
        sums,
    )
    out = results._asdict()
    out["phi"] = phi
    n_ok = int((~results.failed).sum())
    expected_log = {}
    if flags[0]:
        expected_log["pi"] = sums.elog_pi.sum(0)
    if flags[1]:
        expected_log["A"] = sums.elog_A.sum(0)
    if flags[2]:
        # B's sums stay in parts (the caller adds them up once per E-step, see
        # ldhmm.inference.cavi.emissions.EmissionLogSums): n_ok psi(beta) + delta - rows, delta
        # per slot in the sparse layout (failed sequences kept zeros there, like their unused
        # slots), its block sums added up in the dense one.
        delta = sums.delta_B if sparse else sums.delta_B.sum(0)
        rows = sums.psi_rowsum_B.sum(0)
        expected_log["B"] = (n_ok, rows, delta, np.ascontiguousarray(symbols) if sparse else None)
    out["trace"] = results.trace if record_trace else None
    out["sum_expected_log"] = expected_log
    return out
