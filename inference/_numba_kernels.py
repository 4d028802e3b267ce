"""Compiled forward-backward: one sequence per thread, no padding work, no kernel launches.

The torch implementation in :mod:`inference.forward_backward` spends its time launching small
kernels once per time step; for the small K of this field (2..16) a compiled loop over each
sequence is several times faster. Same scaled recursion, same contract; any sequence whose scaled
recursion fails (a zero or non-finite scale) is flagged so the caller recomputes it in log space.
"""

from __future__ import annotations


import numpy as np

try:
    from numba import njit, prange

    AVAILABLE = True
except ImportError:  # pragma: no cover - numba is a declared dependency
    AVAILABLE = False

# Sequences per block of the parallel sums: each block has its own partial sums, added in block
# order afterwards, so results do not depend on the number of threads.
SUM_BLOCK = 64

__all__ = ["AVAILABLE", "scaled_forward_backward", "fused_e_step", "gamma_functions",
           "dirichlet_multinomial_sums"]

if AVAILABLE:

    @njit(parallel=True, cache=True, nogil=True)
    def _forward_backward(log_initial, log_transition, log_obs, lengths, log_z, marginals,
                          transition_counts, failed):  # pragma: no cover - compiled
        M, T, K = log_obs.shape
        shared_initial = log_initial.shape[0] == 1
        shared_transition = log_transition.shape[0] == 1
        for m in prange(M):
            L = lengths[m]
            # int64 on both branches: mixing a literal with prange's index type would give float.
            mi = np.int64(0) if shared_initial else np.int64(m)
            mt = np.int64(0) if shared_transition else np.int64(m)
            # Shifted potentials: largest entry exp(0) = 1; shifts go back into log Z.
            init_shift = log_initial[mi, 0]
            for k in range(1, K):
                init_shift = max(init_shift, log_initial[mi, k])
            trans_shift = log_transition[mt, 0, 0]
            for i in range(K):
                for k in range(K):
                    trans_shift = max(trans_shift, log_transition[mt, i, k])
            A = np.empty((K, K), dtype=log_obs.dtype)
            for i in range(K):
                for k in range(K):
                    A[i, k] = np.exp(log_transition[mt, i, k] - trans_shift)
            obs = np.empty((L, K), dtype=log_obs.dtype)
            total_shift = init_shift + trans_shift * (L - 1)
            for n in range(L):
                s = log_obs[m, n, 0]
                for k in range(1, K):
                    s = max(s, log_obs[m, n, k])
                total_shift += s
                for k in range(K):
                    obs[n, k] = np.exp(log_obs[m, n, k] - s)
            alpha = marginals[m]  # forward messages are written in place, then turned into r_n
            scale = np.empty(L, dtype=log_obs.dtype)
            c = 0.0
            for k in range(K):
                a = np.exp(log_initial[mi, k] - init_shift) * obs[0, k]
                alpha[0, k] = a
                c += a
            scale[0] = c
            bad = not (c > 0.0)
            if not bad:
                for k in range(K):
                    alpha[0, k] /= c
            for n in range(1, L):
                if bad:
                    break
                c = 0.0
                for k in range(K):
                    a = 0.0
                    for i in range(K):
                        a += alpha[n - 1, i] * A[i, k]
                    a *= obs[n, k]
                    alpha[n, k] = a
                    c += a
                scale[n] = c
                if not (c > 0.0) or not np.isfinite(c):
                    bad = True
                    break
                for k in range(K):
                    alpha[n, k] /= c
            if bad:
                failed[m] = True
                continue
            lz = total_shift
            for n in range(L):
                lz += np.log(scale[n])
            log_z[m] = lz
            # Backward pass: beta_L = 1; w_n = obs_n * beta_n / c_n is the message sent back.
            beta = np.ones(K, dtype=log_obs.dtype)
            w = np.empty(K, dtype=log_obs.dtype)
            for i in range(K):
                for k in range(K):
                    transition_counts[m, i, k] = 0.0
            for n in range(L - 1, 0, -1):
                for k in range(K):
                    w[k] = obs[n, k] * beta[k] / scale[n]
                # pair marginal of (n-1, n): alpha_(n-1)[i] A[i,k] w[k]
                for i in range(K):
                    ai = alpha[n - 1, i]
                    for k in range(K):
                        transition_counts[m, i, k] += ai * A[i, k] * w[k]
                # r_n = alpha_n * beta_n (alpha_n is no longer needed after this)
                for k in range(K):
                    alpha[n, k] *= beta[k]
                for i in range(K):
                    b = 0.0
                    for k in range(K):
                        b += A[i, k] * w[k]
                    beta[i] = b
            for k in range(K):
                alpha[0, k] *= beta[k]
            for n in range(L, T):
                for k in range(K):
                    alpha[n, k] = 0.0


def scaled_forward_backward(log_initial, log_transition, log_obs, lengths):
    """Run the compiled kernel on numpy arrays.

    Parameters
    ----------
    log_initial : ndarray, shape (M or 1, K)
    log_transition : ndarray, shape (M or 1, K, K)
    log_obs : ndarray, shape (M, T, K)
    lengths : ndarray of int64, shape (M,)

    Returns
    -------
    log_z : ndarray (M,)
    marginals : ndarray (M, T, K)
    transition_counts : ndarray (M, K, K)
    failed : ndarray of bool (M,)
        Sequences the scaled recursion could not handle (recompute them in log space).
    """
    M, T, K = log_obs.shape
    dtype = log_obs.dtype
    log_z = np.zeros(M, dtype=dtype)
    marginals = np.empty((M, T, K), dtype=dtype)
    transition_counts = np.empty((M, K, K), dtype=dtype)
    failed = np.zeros(M, dtype=np.bool_)
    _forward_backward(
        np.ascontiguousarray(log_initial, dtype=dtype),
        np.ascontiguousarray(log_transition, dtype=dtype),
        np.ascontiguousarray(log_obs),
        np.ascontiguousarray(lengths, dtype=np.int64),
        log_z, marginals, transition_counts, failed,
    )
    return log_z, marginals, transition_counts, failed


if AVAILABLE:

    # No 'nnan'/'ninf' (finiteness checks must stay), and no reassociation inside the special
    # functions' series.
    _FASTMATH_SPECIAL = {"contract", "nsz"}

    @njit(cache=True, nogil=True, fastmath=_FASTMATH_SPECIAL)
    def _lgamma_psi_asymptotic(y):  # pragma: no cover - compiled
        """(lgamma(y), psi(y), 1/y, 1/y^2) by the asymptotic series, for y >= 8 (error < 1e-15)."""
        inv = 1.0 / y
        inv2 = inv * inv
        log_y = np.log(y)
        lgamma = ((y - 0.5) * log_y - y + 0.91893853320467274178
                  + inv * (1.0 / 12 + inv2 * (-1.0 / 360 + inv2 * (1.0 / 1260 + inv2 * (
                      -1.0 / 1680 + inv2 * (1.0 / 1188 + inv2 * (-691.0 / 360360)))))))
        psi = log_y - 0.5 * inv - inv2 * (1.0 / 12 - inv2 * (1.0 / 120 - inv2 * (
            1.0 / 252 - inv2 * (1.0 / 240 - inv2 * (1.0 / 132 - inv2 * (691.0 / 32760))))))
        return lgamma, psi, inv, inv2

    @njit(cache=True, nogil=True, fastmath=_FASTMATH_SPECIAL)
    def _lgamma_digamma(x):  # pragma: no cover - compiled
        """(lgamma(x), psi(x)) for x > 0, relative error below 1e-13: eight branch-free upward
        steps carried by p(x) = x (x+1) ... (x+7) and p'(x), then the asymptotic series at
        y = x + 8 (lgamma(x) = lgamma(y) - log p, psi(x) = psi(y) - p'/p). The E-step's
        version of :func:`_gamma_functions`, without the trigamma it does not need."""
        p = 1.0
        dp = 0.0
        for i in range(8):
            y = x + i
            dp = dp * y + p
            p = p * y
        lgamma, psi, _, _ = _lgamma_psi_asymptotic(x + 8.0)
        return lgamma - np.log(p), psi - dp / p

    @njit(cache=True, nogil=True)
    def _rows_log_beta_and_expected_logs(prior, counts, out):  # pragma: no cover - compiled
        """out[i] = psi(g_i) - psi(sum g_i) with g = prior + counts; returns
        sum_i [sum_d lgamma(g_id) - lgamma(sum_d g_id)] (one special-function call per entry)."""
        R, D = prior.shape
        value = 0.0
        for i in range(R):
            total = 0.0
            for d in range(D):
                g = prior[i, d] + counts[i, d]
                total += g
                lg, psi = _lgamma_digamma(g)
                value += lg
                out[i, d] = psi
            lg, psi_total = _lgamma_digamma(total)
            value -= lg
            for d in range(D):
                out[i, d] -= psi_total
        return value

    @njit(cache=True, nogil=True, fastmath=_FASTMATH_SPECIAL)
    def _sequence_terms(seq_pi, seq_A, seq_B, prior_pi, prior_A, prior_B, prior_B_rowsum,
                        lgamma_prior_B, lgamma_prior_B_rowsum, c_pi, c_A, c_B, present, n_present,
                        elog_pi, elog_A, elog_B, psi_rowsum_B):  # pragma: no cover - compiled
        """For the per-sequence groups at g = prior + counts: E log theta (for B only the
        columns of the symbols present; psi of B's row sums in ``psi_rowsum_B``), and the
        collapsed ELBO part sum log B(g), less log B(prior) for B (the caller subtracts the
        constant log B(prior) of pi and A)."""
        K = prior_A.shape[0]
        value = 0.0
        if seq_pi:
            value += _rows_log_beta_and_expected_logs(prior_pi.reshape((1, K)), c_pi, elog_pi)
        if seq_A:
            value += _rows_log_beta_and_expected_logs(prior_A, c_A, elog_A)
        if seq_B:
            for k in range(K):
                rowsum = prior_B_rowsum[k]
                for j in range(n_present):
                    v = present[j]
                    g = prior_B[k, v] + c_B[k, v]
                    rowsum += c_B[k, v]
                    lg, psi = _lgamma_digamma(g)
                    value += lg - lgamma_prior_B[k, v]
                    elog_B[k, v] = psi
                lg, psi_total = _lgamma_digamma(rowsum)
                value += lgamma_prior_B_rowsum[k] - lg
                psi_rowsum_B[k] = psi_total
                for j in range(n_present):
                    elog_B[k, present[j]] -= psi_total
        return value

    @njit(cache=True, nogil=True)
    def _weighted(counts, log_values):  # pragma: no cover - compiled
        R, D = counts.shape
        value = 0.0
        for i in range(R):
            for d in range(D):
                if counts[i, d] > 0.0:
                    value += counts[i, d] * log_values[i, d]
        return value

    # Reassociation lets LLVM vectorize the K-long reductions; no 'nnan'/'ninf' flags, so the
    # finiteness checks that route underflows to the log-space path stay.
    _FASTMATH = {"reassoc", "contract", "arcp", "nsz"}

    @njit(cache=True, nogil=True, fastmath=_FASTMATH)
    def _pf_update(tokens_m, L, elog_pi, elog_A, elog_B, present, n_present, symbol_count,
                   c_pi, c_A, c_B, alpha, scale, A, obs_table, pair, emitted, acc, beta,
                   w):  # pragma: no cover - compiled
        """Forward-backward on exp(E log theta); new expected counts; returns H[q(Z)] (NaN if the
        scaled recursion failed).

        The inner loops run over contiguous rows (of A, of the transposed emission table
        ``obs_table`` (V, K), of the scratch vectors) and never read-modify-write the message
        being built: this is what lets them vectorize, about 6x faster than updating
        ``alpha[n, k]`` in place. Scratch arrays come from the caller (one set per block of
        sequences); only the rows of the symbols present are touched, O(K x distinct symbols)."""
        K = elog_A.shape[0]
        for i in range(K):
            for k in range(K):
                pair[i, k] = 0.0
        for j in range(n_present):
            for k in range(K):
                emitted[present[j], k] = 0.0
        init_shift = elog_pi[0, 0]
        for k in range(1, K):
            init_shift = max(init_shift, elog_pi[0, k])
        trans_shift = elog_A[0, 0]
        for i in range(K):
            for k in range(K):
                trans_shift = max(trans_shift, elog_A[i, k])
        for i in range(K):
            for k in range(K):
                A[i, k] = np.exp(elog_A[i, k] - trans_shift)
        log_z = init_shift + trans_shift * (L - 1)
        for j in range(n_present):
            v = present[j]
            s = elog_B[0, v]
            for k in range(1, K):
                s = max(s, elog_B[k, v])
            log_z += s * symbol_count[j]
            for k in range(K):
                obs_table[v, k] = np.exp(elog_B[k, v] - s)
        o = obs_table[tokens_m[0]]
        c = 0.0
        for k in range(K):
            a = np.exp(elog_pi[0, k] - init_shift) * o[k]
            alpha[0, k] = a
            c += a
        scale[0] = c
        if not (c > 0.0 and np.isfinite(c)):
            return np.nan
        inv = 1.0 / c
        for k in range(K):
            alpha[0, k] *= inv
        log_z += np.log(c)
        for n in range(1, L):
            prev = alpha[n - 1]
            cur = alpha[n]
            o = obs_table[tokens_m[n]]
            for k in range(K):
                acc[k] = 0.0
            for i in range(K):
                ai = prev[i]
                Ai = A[i]
                for k in range(K):
                    acc[k] += ai * Ai[k]
            c = 0.0
            for k in range(K):
                a = acc[k] * o[k]
                cur[k] = a
                c += a
            scale[n] = c
            if not (c > 0.0 and np.isfinite(c)):
                return np.nan
            inv = 1.0 / c
            for k in range(K):
                cur[k] *= inv
            log_z += np.log(c)
        for k in range(K):
            beta[k] = 1.0
        for n in range(L - 1, -1, -1):
            x = tokens_m[n]
            cur = alpha[n]
            e = emitted[x]
            for k in range(K):
                e[k] += cur[k] * beta[k]
            if n == 0:
                break
            o = obs_table[x]
            inv = 1.0 / scale[n]
            for k in range(K):
                w[k] = o[k] * beta[k] * inv
            prev = alpha[n - 1]
            # pair marginal (n-1, n) = alpha_(n-1)[i] A[i, k] w[k]: accumulate the outer
            # products, multiply by A once at the end.
            for i in range(K):
                ai = prev[i]
                Pi = pair[i]
                Ai = A[i]
                b = 0.0
                for k in range(K):
                    Pi[k] += ai * w[k]
                    b += Ai[k] * w[k]
                beta[i] = b
        for i in range(K):
            for k in range(K):
                c_A[i, k] = pair[i, k] * A[i, k]
        for k in range(K):
            c_pi[0, k] = alpha[0, k] * beta[k]
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

    @njit(cache=True, nogil=True, fastmath=_FASTMATH)
    def _ff_update(tokens_m, L, elog_pi, elog_A, elog_B, present, n_present, phi, initialize,
                   c_pi, c_A, c_B, emission, pair, logits, weights):  # pragma: no cover
        """One FF pass (even positions, then odd: exact coordinate ascent); new expected counts;
        returns H[q(Z)]. Rows, not columns, in the K-long loops so that they vectorize (see
        :func:`_pf_update`); scratch arrays from the caller."""
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

    @njit(parallel=True, cache=True, nogil=True, fastmath=_FASTMATH)
    def _fused_e_step(family, tokens, lengths, prior_pi, prior_A, prior_B, fixed_pi, fixed_A,
                      fixed_B, sequence_groups, prior_log_beta_piA, lgamma_prior_B,
                      prior_B_rowsum, lgamma_prior_B_rowsum, psi_prior_B, elog_prior_pi,
                      elog_prior_A, elog_prior_B, counts_pi, counts_A, counts_B, phi_all,
                      initialize, entropy, elbo, local, sweeps, failed, trace, sum_elog_pi,
                      sum_elog_A, sum_delta_B, sum_psi_rowsum_B, max_iter,
                      tol):  # pragma: no cover - compiled
        M = tokens.shape[0]
        K, V = prior_B.shape
        seq_pi, seq_A, seq_B = sequence_groups[0], sequence_groups[1], sequence_groups[2]
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
            elog_B = np.empty((K, V))
            alpha_block = np.empty((T_pf, K))
            scale_block = np.empty(T_pf)
            slot = np.full(V, -1, dtype=np.int64)
            present = np.empty(min(T, V), dtype=np.int64)
            symbol_count = np.empty(min(T, V))
            psi_rowsum_B = np.empty(K)
            A = np.empty((K, K))
            table = np.empty((V, K))
            pair = np.empty((K, K))
            emitted = np.empty((V, K))
            vec1 = np.empty(K)
            vec2 = np.empty(K)
            vec3 = np.empty(K)
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
                phi = phi_all[m] if family == 1 else phi_all[0]
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
                            elog_B[k, present[j]] = fixed_B[k, present[j]]
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
                            psi_rowsum_B[k] = _lgamma_digamma(prior_B_rowsum[k])[1]
                            for j in range(n_present):
                                elog_B[k, present[j]] = elog_prior_B[k, present[j]]
                else:
                    _sequence_terms(seq_pi, seq_A, seq_B, prior_pi, prior_A, prior_B, prior_B_rowsum,
                                    lgamma_prior_B, lgamma_prior_B_rowsum, c_pi, c_A, c_B, present,
                                    n_present, elog_pi, elog_A, elog_B, psi_rowsum_B)
                previous = -np.inf
                for it in range(max_iter):
                    if family == 0:
                        h = _pf_update(tokens_m, L, elog_pi, elog_A, elog_B, present, n_present,
                                       symbol_count, c_pi, c_A, c_B, alpha_block, scale_block,
                                       A, table,
                                       pair, emitted, vec1, vec2, vec3)
                    else:
                        h = _ff_update(tokens_m, L, elog_pi, elog_A, elog_B, present, n_present,
                                       phi, initialize and it == 0, c_pi, c_A, c_B, table,
                                       pair, vec1, vec2)
                    if not np.isfinite(h):
                        failed[m] = True
                        break
                    # Per-sequence groups: log B(prior + counts) - log B(prior) (collapsed form);
                    # database-level groups: counts . E log theta (their E log theta is fixed).
                    collapsed = _sequence_terms(seq_pi, seq_A, seq_B, prior_pi, prior_A, prior_B,
                                                prior_B_rowsum, lgamma_prior_B,
                                                lgamma_prior_B_rowsum, c_pi, c_A, c_B, present,
                                                n_present, elog_pi, elog_A, elog_B, psi_rowsum_B)
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
                                    database += c_B[k, v] * fixed_B[k, v]
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
                # per-sequence buffers, and the same sums whatever the number of threads.
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
                            sum_delta_B[block, k, v] += elog_B[k, v] + psi_rowsum_B[k] - psi_prior_B[k, v]


FAMILIES = {"pf": 0, "ff": 1}


def fused_e_step(family, tokens, lengths, prior, fixed, sequence_groups, counts, max_iter, tol,
                 record_trace=False, phi=None):
    """Whole E-step of a batch in compiled code: every sequence sweeps until it converges.

    ``family`` is ``"pf"`` (forward-backward q(Z)) or ``"ff"`` (fully factorized q(Z), whose
    factors ``phi`` (M, T, K) are updated in place; ``phi=None`` starts them from the emission
    potentials, as :func:`inference.mean_field.init_mean_field` does).

    Emission terms are computed only for the symbols a sequence contains (its other columns of
    ``g_B`` equal the prior), so a sweep costs O(N K^2 + K * distinct symbols), not O(K V).

    Parameters
    ----------
    tokens : ndarray int64 (M, T); lengths : ndarray int64 (M,)
    prior : tuple of float64 ndarray (K,), (K, K), (K, V)
        Dirichlet priors of the groups (ignored for groups that are not per-sequence).
    fixed : tuple of float64 ndarray (K,), (K, K), (K, V)
        E log theta of database-level groups (ignored for per-sequence groups).
    sequence_groups : tuple of 3 bool
    counts : tuple of float64 ndarray (M, K), (M, K, K), (M, K, V)
        Warm start; overwritten with the final expected counts.
    max_iter : int; tol : float
    record_trace : bool
        Also return the per-sweep ELBO of every sequence (M, max_iter), NaN after it stopped.

    Returns
    -------
    dict with ``entropy``, ``elbo``, ``local`` (ELBO less the database-level groups' terms),
    ``sweeps``, ``failed`` (M,), ``trace`` (or None), and ``sum_expected_log``: for each
    per-sequence group, ``sum_m E_q[log theta_m]`` over the sequences that did not fail.
    """
    import torch

    from .dirichlet import expected_log_dirichlet
    from .variational_em import log_multivariate_beta

    M = tokens.shape[0]
    prior_pi, prior_A, prior_B = prior
    K, V = prior_B.shape
    flags = np.array(sequence_groups, dtype=np.bool_)
    lgamma_B = torch.lgamma(torch.from_numpy(prior_B)).numpy()
    psi_B = torch.digamma(torch.from_numpy(prior_B)).numpy()
    prior_log_beta_piA = 0.0
    for flag, a in ((flags[0], prior_pi), (flags[1], prior_A)):
        if flag:
            prior_log_beta_piA += float(log_multivariate_beta(torch.from_numpy(a)).sum())
    if family == "ff":
        # FF multiplies log-potentials by factors that can be exactly 0 (see mean_field.LOG_ZERO).
        fixed = tuple(np.maximum(f, -1e250) for f in fixed)
    out = {
        "entropy": np.zeros(M), "elbo": np.full(M, -np.inf), "local": np.zeros(M),
        "sweeps": np.zeros(M, dtype=np.int64), "failed": np.zeros(M, dtype=np.bool_),
    }
    trace = np.full((M, max_iter if record_trace else 0), np.nan)
    n_blocks = -(-M // SUM_BLOCK)  # per-block partial sums (see SUM_BLOCK)
    sum_elog_pi = np.zeros((n_blocks, K))
    sum_elog_A = np.zeros((n_blocks, K, K))
    sum_delta_B = np.zeros((n_blocks, K, V))
    sum_psi_rowsum_B = np.zeros((n_blocks, K))
    initialize = phi is None
    if family == "ff" and phi is None:
        phi = np.zeros((M, tokens.shape[1], K))
    out["phi"] = phi
    _fused_e_step(FAMILIES[family], np.ascontiguousarray(tokens), np.ascontiguousarray(lengths),
                  prior_pi, prior_A, prior_B, fixed[0], fixed[1], fixed[2], flags,
                  float(prior_log_beta_piA), lgamma_B, prior_B.sum(1),
                  torch.lgamma(torch.from_numpy(prior_B.sum(1))).numpy(), psi_B,
                  *(expected_log_dirichlet(torch.from_numpy(np.ascontiguousarray(a))).numpy()
                    for a in (prior_pi, prior_A, prior_B)),
                  counts[0], counts[1], counts[2],
                  phi if family == "ff" else np.zeros((1, 1, K)), initialize,
                  out["entropy"], out["elbo"], out["local"], out["sweeps"], out["failed"], trace,
                  sum_elog_pi, sum_elog_A, sum_delta_B, sum_psi_rowsum_B,
                  int(max_iter), float(tol))
    n_ok = int((~out["failed"]).sum())
    sums = {}
    if flags[0]:
        sums["pi"] = sum_elog_pi.sum(0)
    if flags[1]:
        sums["A"] = sum_elog_A.sum(0)
    if flags[2]:
        sums["B"] = n_ok * psi_B + sum_delta_B.sum(0) - sum_psi_rowsum_B.sum(0)[:, None]
    out["trace"] = trace if record_trace else None
    out["sum_expected_log"] = sums
    return out


if AVAILABLE:

    @njit(cache=True, nogil=True, fastmath=_FASTMATH_SPECIAL)
    def _gamma_functions(x):  # pragma: no cover - compiled
        """(lgamma(x), psi(x), psi'(x)) for x > 0, relative error below 1e-13.

        Always eight upward steps (branch-free, no divisions: the product p(x) = x (x+1) ...
        (x+7) and its first two derivatives carry the recurrence), then the asymptotic series at
        y = x + 8: lgamma(x) = lgamma(y) - log p, psi(x) = psi(y) - p'/p and
        psi'(x) = psi'(y) + (p'/p)^2 - p''/p.
        """
        p = 1.0
        dp = 0.0
        d2p = 0.0
        for i in range(8):
            y = x + i
            d2p = d2p * y + 2.0 * dp
            dp = dp * y + p
            p = p * y
        lgamma, psi, inv, inv2 = _lgamma_psi_asymptotic(x + 8.0)
        ratio = dp / p
        trigamma = (inv + 0.5 * inv2 + inv * inv2 * (1.0 / 6 - inv2 * (1.0 / 30 - inv2 * (
            1.0 / 42 - inv2 * (1.0 / 30 - inv2 * (5.0 / 66 - inv2 * (691.0 / 2730))))))
            + ratio * ratio - d2p / p)
        return lgamma - np.log(p), psi - ratio, trigamma

    @njit(parallel=True, cache=True, nogil=True)
    def _dirichlet_multinomial_pass(alpha, alpha_functions, row_functions, counts, rows,
                                    entry_sums, row_sums):  # pragma: no cover - compiled
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
                    a0 = 0.0
                    n0 = 0.0
                    for d in range(D):
                        a0 += alpha[r, d]
                        n = counts[m, r, d]
                        if n > 0.0:
                            n0 += n
                            lg, psi, tri = _gamma_functions(alpha[r, d] + n)
                            entry_sums[block, 0, r, d] += lg - alpha_functions[0, r, d]
                            entry_sums[block, 1, r, d] += psi - alpha_functions[1, r, d]
                            entry_sums[block, 2, r, d] += tri - alpha_functions[2, r, d]
                    if n0 > 0.0:
                        lg, psi, tri = _gamma_functions(a0 + n0)
                        row_sums[block, 0, r] += lg - row_functions[0, r]
                        row_sums[block, 1, r] += psi - row_functions[1, r]
                        row_sums[block, 2, r] += tri - row_functions[2, r]

    @njit(cache=True)
    def _gamma_functions_array(x, out):  # pragma: no cover - compiled
        flat = x.ravel()
        for i in range(flat.shape[0]):
            out[0].ravel()[i], out[1].ravel()[i], out[2].ravel()[i] = _gamma_functions(flat[i])


def gamma_functions(x):
    """``(lgamma, digamma, trigamma)`` of a float64 array, stacked on a new first axis."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    out = np.empty((3,) + x.shape)
    _gamma_functions_array(x, out)
    return out


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
    count_batches : list of ndarray float64 (M_b, R, D)
    rows : ndarray of bool (R,), optional
        Compute only these rows (the others are returned as 0).

    Returns
    -------
    entry : ndarray (3, R, D); row : ndarray (3, R)
    """
    alpha = np.ascontiguousarray(alpha, dtype=np.float64)
    R, D = alpha.shape
    alpha_functions = gamma_functions(alpha)
    row_functions = gamma_functions(alpha.sum(1))
    rows = np.ones(R, dtype=np.bool_) if rows is None else np.asarray(rows, dtype=np.bool_)
    entry_total = np.zeros((3, R, D))
    row_total = np.zeros((3, R))
    for counts in count_batches:
        n_blocks = -(-counts.shape[0] // SUM_BLOCK)
        entry = np.zeros((n_blocks, 3, R, D))
        row = np.zeros((n_blocks, 3, R))
        _dirichlet_multinomial_pass(alpha, alpha_functions, row_functions,
                                    np.ascontiguousarray(counts, dtype=np.float64), rows, entry, row)
        entry_total += entry.sum(0)  # depends on the block count only, not on the threads
        row_total += row.sum(0)
    return entry_total, row_total
