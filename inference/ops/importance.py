"""How far an importance-sampled ``log p(x)`` can be trusted: its standard error and the
effective sample size, per sequence, from the log weights of its draws.

With ``S`` draws ``theta_s ~ q`` and weights ``w_s = p(x, theta_s) / q(theta_s)``, the estimate
is ``log Z_hat = log mean_s w_s``. Its standard error by the delta method is
``sd(w) / (sqrt(S) mean(w))`` (``sd`` with ``ddof=1``), and Kish's effective sample size
``ESS = (sum_s w_s)^2 / sum_s w_s^2`` (between 1 and ``S``): a handful of draws carrying all the
weight (ESS near 1) means the standard error itself is unreliable and the estimate is likely
low. Weights are shifted by their maximum before exponentiation, so neither overflows.

Both are read off the draws themselves, so they see only the weights that were drawn: with a
proposal narrower than the posterior (the fitted mean-field ``q(theta)``) the weights are
heavy-tailed, and the standard error understates the error (measured on a small LDHMM case,
``tests/test_importance.py``: 0.43-0.73 of the spread of the estimate over 40 seeds at 30
draws). Read it as a lower bound on the error.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["LOW_ESS", "ImportanceEstimate", "importance_diagnostics", "pool_estimates", "std_error_of"]

#: An estimate from fewer effective draws than this is flagged (its standard error, computed
#: from the same few weights, is then unreliable too).
LOW_ESS = 10.0


class ImportanceEstimate(NamedTuple):
    """Importance-sampled ``log p(x_m)`` per sequence, with how far it can be trusted.

    Attributes
    ----------
    log_marginal : np.ndarray, shape (M,)
        The estimate ``log mean_s w_s``.
    std_error : np.ndarray, shape (M,)
        Its standard error (delta method; NaN with one draw).
    ess : np.ndarray, shape (M,)
        Kish's effective sample size of the draws, in [1, S].
    n_samples : np.ndarray, shape (M,)
        Draws behind each estimate.
    """

    log_marginal: np.ndarray
    std_error: np.ndarray
    ess: np.ndarray
    n_samples: np.ndarray


def importance_diagnostics(log_w) -> tuple[np.ndarray, np.ndarray]:
    """Standard error of ``log mean exp(log_w)`` and effective sample size, per column.

    Parameters
    ----------
    log_w : array, shape (S, M)
        Log importance weights of ``S`` draws for each of ``M`` sequences.

    Returns
    -------
    std_error, ess : np.ndarray, shape (M,)
    """
    log_w = np.asarray(log_w, dtype=np.float64)
    S = log_w.shape[0]
    w = np.exp(log_w - log_w.max(axis=0, keepdims=True))  # the largest weight is 1
    mean = w.mean(axis=0)
    if S > 1:
        std_error = np.sqrt(w.var(axis=0, ddof=1) / S) / mean
    else:
        std_error = np.full(log_w.shape[1:], np.nan)
    ess = w.sum(axis=0) ** 2 / (w**2).sum(axis=0)
    return std_error, ess


def std_error_of(ess, n_samples) -> np.ndarray:
    """The delta-method standard error from the effective sample size and the number of draws.

    With ``m = mean w`` and ``q = mean w^2``, ``q / m^2 = S / ESS``, so
    ``sd(w)^2 / (S m^2) = (S / ESS - 1) / (S - 1)``: what :func:`importance_diagnostics` computes,
    from two numbers (NaN for one draw).
    """
    ess, S = np.asarray(ess, dtype=np.float64), np.asarray(n_samples, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.sqrt(np.maximum(S / ess - 1.0, 0.0) / (S - 1.0))
    return np.where(S > 1, out, np.nan)


def pool_estimates(a: ImportanceEstimate, b: ImportanceEstimate) -> ImportanceEstimate:
    """Two independent importance-sampled estimates of the same sequences as one of all their draws.

    The pooled mean weight is ``(S_a m_a + S_b m_b) / (S_a + S_b)``; the sums of squared weights
    are recovered from the effective sample sizes (``sum w^2 = (S m)^2 / ESS``), so the pooled
    ESS and standard error (:func:`std_error_of`) are those of the concatenated draws, in log
    space (no weight is exponentiated).
    """
    Sa, Sb = np.asarray(a.n_samples, dtype=np.float64), np.asarray(b.n_samples, dtype=np.float64)
    log_sum_a, log_sum_b = np.log(Sa) + a.log_marginal, np.log(Sb) + b.log_marginal
    log_sum = np.logaddexp(log_sum_a, log_sum_b)
    log_sq = np.logaddexp(2 * log_sum_a - np.log(a.ess), 2 * log_sum_b - np.log(b.ess))
    S = Sa + Sb
    ess = np.exp(2 * log_sum - log_sq)
    n = np.asarray(a.n_samples) + np.asarray(b.n_samples)
    return ImportanceEstimate(log_sum - np.log(S), std_error_of(ess, S), ess, n)
