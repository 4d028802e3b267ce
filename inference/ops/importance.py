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

__all__ = ["LOW_ESS", "ImportanceEstimate", "importance_diagnostics"]

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
