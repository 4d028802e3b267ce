"""The one compiled chain core: scaled forward-backward of a single chain.

Every compiled forward-backward of the project runs here: the PF E-step (:mod:`.fused_sweeps`,
emission potentials looked up by symbol), the generic potentials entry
:func:`forward_backward_potentials` (one potential row per position: posteriors, importance
sampling, the HMM baseline). The torch route's recursion is
:func:`ldhmm.inference.ops.forward.chain_posterior`; the tests check both against a log-space
reference (``tests/reference_chain.py``).

Imports numpy and numba only.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["FASTMATH", "shift_initial", "shift_transition", "chain_pass", "forward_backward_potentials"]

# No 'reassoc': with it LLVM's vectorized reductions grouped their terms by where an array
# happened to land in memory, so the same E-step differed in the last bits from call to call
# and between thread counts, and EM grew that to ~1e-5 nats (a jobs=1 vs jobs=2 comparison
# could fail). Bitwise reproducibility costs 10-20% of a PF sweep (docs/performance.md). No
# 'nnan'/'ninf' either, so the finiteness checks that route underflows to log space stay.
FASTMATH = {"contract", "arcp", "nsz"}

# Sequences per block of the parallel loop: one set of scratch arrays per block.
BLOCK = 64


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def shift_initial(log_initial, initial):  # pragma: no cover - compiled
    """``initial = exp(log_initial - s)`` with ``s = max log_initial`` (largest entry 1);
    returns ``s``. ``log_initial`` has shape (K,)."""
    K = log_initial.shape[0]
    shift = log_initial[0]
    for k in range(1, K):
        shift = max(shift, log_initial[k])
    for k in range(K):
        initial[k] = np.exp(log_initial[k] - shift)
    return shift


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def shift_transition(log_transition, A):  # pragma: no cover - compiled
    """``A = exp(log_transition - s)`` with ``s`` the largest entry of the (K, K) matrix;
    returns ``s`` (it counts once per transition in log Z)."""
    K = log_transition.shape[0]
    shift = log_transition[0, 0]
    for i in range(K):
        for k in range(K):
            shift = max(shift, log_transition[i, k])
    for i in range(K):
        for k in range(K):
            A[i, k] = np.exp(log_transition[i, k] - shift)
    return shift


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def chain_pass(
    tokens_m, L, initial, A, obs_table, log_z, alpha, scale, pair, emitted, acc, beta, w
):  # pragma: no cover - compiled
    """Scaled forward-backward of one chain of length ``L``.

    The potentials are given exponentiated and shifted (largest entry 1): ``initial`` (K,),
    ``A`` (K, K), and ``obs_table`` (R, K) whose row ``tokens_m[n]`` is the emission potential
    at position n (a symbol's row for the PF E-step, the position's own row for
    :func:`forward_backward_potentials`). ``log_z`` enters holding the shifts; the log of every
    scale factor is added to it.

    Outputs, in the caller's scratch arrays: ``emitted[tokens_m[n]] += r_n`` (the rows must be
    zero on entry), ``pair`` (K, K) the expected transition counts, ``alpha[0]`` the first
    marginal ``r_0``. Returns ``log Z``, or NaN where the scaled recursion failed (a zero or
    non-finite scale: the caller recomputes that chain in log space).

    The inner loops run over contiguous rows (of A, of ``obs_table``, of the scratch vectors)
    and never read-modify-write the message being built: this is what lets them vectorize.
    """
    K = A.shape[0]
    for i in range(K):
        for k in range(K):
            pair[i, k] = 0.0
    o = obs_table[tokens_m[0]]
    c = 0.0
    for k in range(K):
        a = initial[k] * o[k]
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
            pair[i, k] = pair[i, k] * A[i, k]
    for k in range(K):
        alpha[0, k] = alpha[0, k] * beta[k]
    return log_z


@njit(parallel=True, cache=True, nogil=True, fastmath=FASTMATH)
def _forward_backward_potentials(
    log_initial, log_transition, log_obs, lengths, log_z, marginals, transition_counts, failed
):  # pragma: no cover - compiled
    M, T, K = log_obs.shape
    shared_initial = log_initial.shape[0] == 1
    shared_transition = log_transition.shape[0] == 1
    n_blocks = (M + BLOCK - 1) // BLOCK
    for block in prange(n_blocks):
        positions = np.arange(T)  # position n reads row n of its own table
        initial = np.empty(K, dtype=log_obs.dtype)
        A = np.empty((K, K), dtype=log_obs.dtype)
        table = np.empty((T, K), dtype=log_obs.dtype)
        alpha = np.empty((T, K), dtype=log_obs.dtype)
        scale = np.empty(T, dtype=log_obs.dtype)
        acc = np.empty(K, dtype=log_obs.dtype)
        beta = np.empty(K, dtype=log_obs.dtype)
        w = np.empty(K, dtype=log_obs.dtype)
        for m in range(block * BLOCK, min(M, (block + 1) * BLOCK)):
            L = lengths[m]
            # int64 on both branches: mixing a literal with prange's index type gives float.
            mi = np.int64(0) if shared_initial else np.int64(m)
            mt = np.int64(0) if shared_transition else np.int64(m)
            lz = shift_initial(log_initial[mi], initial)
            lz += shift_transition(log_transition[mt], A) * (L - 1)
            for n in range(L):
                s = log_obs[m, n, 0]
                for k in range(1, K):
                    s = max(s, log_obs[m, n, k])
                lz += s
                for k in range(K):
                    table[n, k] = np.exp(log_obs[m, n, k] - s)
            r = marginals[m]
            for n in range(T):
                for k in range(K):
                    r[n, k] = 0.0
            lz = chain_pass(
                positions, L, initial, A, table, lz, alpha, scale, transition_counts[m], r, acc, beta, w
            )
            if not np.isfinite(lz):
                failed[m] = True
                continue
            log_z[m] = lz


def forward_backward_potentials(log_initial, log_transition, log_obs, lengths):
    """Forward-backward of a padded batch of chains given log-potentials.

    Parameters
    ----------
    log_initial : ndarray, shape (M or 1, K)
    log_transition : ndarray, shape (M or 1, K, K)
    log_obs : ndarray, shape (M, T, K)
        Emission log-potential of every position (padding ignored).
    lengths : ndarray of int, shape (M,)

    Returns
    -------
    log_z : ndarray (M,)
    marginals : ndarray (M, T, K)
        Zero on padded positions.
    transition_counts : ndarray (M, K, K)
    failed : ndarray of bool (M,)
        Chains the scaled recursion could not handle (recompute them in log space).
    """
    M, T, K = log_obs.shape
    dtype = log_obs.dtype
    log_z = np.zeros(M, dtype=dtype)
    marginals = np.empty((M, T, K), dtype=dtype)
    transition_counts = np.zeros((M, K, K), dtype=dtype)
    failed = np.zeros(M, dtype=np.bool_)
    _forward_backward_potentials(
        np.ascontiguousarray(log_initial, dtype=dtype),
        np.ascontiguousarray(log_transition, dtype=dtype),
        np.ascontiguousarray(log_obs),
        np.ascontiguousarray(lengths, dtype=np.int64),
        log_z,
        marginals,
        transition_counts,
        failed,
    )
    return log_z, marginals, transition_counts, failed
