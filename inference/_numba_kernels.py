"""Compiled forward-backward: one sequence per thread, no padding work, no kernel launches.

The torch implementation in :mod:`inference.forward_backward` spends its time launching small
kernels once per time step; for the small K of this field (2..16) a compiled loop over each
sequence is several times faster. Same scaled recursion, same contract; any sequence whose scaled
recursion fails (a zero or non-finite scale) is flagged so the caller recomputes it in log space.
"""

from __future__ import annotations

import numpy as np

try:
    import numba
    from numba import njit, prange

    AVAILABLE = True
except ImportError:  # pragma: no cover - numba is a declared dependency
    AVAILABLE = False

__all__ = ["AVAILABLE", "scaled_forward_backward"]

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
