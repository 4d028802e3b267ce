"""Special functions for compiled code: lgamma, digamma and trigamma of float64 scalars.

Relative error below 1e-13 against mpmath (tests/test_collapsed_m_step.py): eight upward
recurrence steps, then the asymptotic series. Written once here for the E-step's kernel
(:func:`lgamma_digamma`) and the M-step's (:func:`gamma_functions_scalar`, with the trigamma).
Imports numpy and numba only.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "FASTMATH_SPECIAL",
    "lgamma_psi_asymptotic",
    "lgamma_digamma",
    "digamma",
    "gamma_functions_scalar",
]

# No 'nnan'/'ninf' (finiteness checks must stay), and no reassociation inside the series.
FASTMATH_SPECIAL = {"contract", "nsz"}


@njit(cache=True, nogil=True, fastmath=FASTMATH_SPECIAL, inline="always")
def _psi_series(log_y, inv, inv2):  # pragma: no cover - compiled
    """psi(y) by the asymptotic series from log y, 1/y and 1/y^2, for y >= 8 (error < 1e-15)."""
    return (
        log_y
        - 0.5 * inv
        - inv2
        * (
            1.0 / 12
            - inv2
            * (
                1.0 / 120
                - inv2 * (1.0 / 252 - inv2 * (1.0 / 240 - inv2 * (1.0 / 132 - inv2 * (691.0 / 32760))))
            )
        )
    )


@njit(cache=True, nogil=True, fastmath=FASTMATH_SPECIAL, inline="always")
def _upward_steps(x):  # pragma: no cover - compiled
    """(p(x), p'(x)) of p(x) = x (x+1) ... (x+7), by eight branch-free upward steps (no divisions)."""
    p = 1.0
    dp = 0.0
    for i in range(8):
        y = x + i
        dp = dp * y + p
        p = p * y
    return p, dp


@njit(cache=True, nogil=True, fastmath=FASTMATH_SPECIAL)
def lgamma_psi_asymptotic(y):  # pragma: no cover - compiled
    """(lgamma(y), psi(y), 1/y, 1/y^2) by the asymptotic series, for y >= 8 (error < 1e-15)."""
    inv = 1.0 / y
    inv2 = inv * inv
    log_y = np.log(y)
    lgamma = (
        (y - 0.5) * log_y
        - y
        + 0.91893853320467274178
        + inv
        * (
            1.0 / 12
            + inv2
            * (
                -1.0 / 360
                + inv2 * (1.0 / 1260 + inv2 * (-1.0 / 1680 + inv2 * (1.0 / 1188 + inv2 * (-691.0 / 360360))))
            )
        )
    )
    return lgamma, _psi_series(log_y, inv, inv2), inv, inv2


@njit(cache=True, nogil=True, fastmath=FASTMATH_SPECIAL)
def lgamma_digamma(x):  # pragma: no cover - compiled
    """(lgamma(x), psi(x)) for x > 0, relative error below 1e-13: eight branch-free upward
    steps carried by p(x) = x (x+1) ... (x+7) and p'(x), then the asymptotic series at
    y = x + 8 (lgamma(x) = lgamma(y) - log p, psi(x) = psi(y) - p'/p). The E-step's
    version of :func:`gamma_functions_scalar`, without the trigamma it does not need."""
    p, dp = _upward_steps(x)
    lgamma, psi, _, _ = lgamma_psi_asymptotic(x + 8.0)
    return lgamma - np.log(p), psi - dp / p


@njit(cache=True, nogil=True, fastmath=FASTMATH_SPECIAL)
def digamma(x):  # pragma: no cover - compiled
    """psi(x) for x > 0, bit for bit the second value of :func:`lgamma_digamma` (the same
    operations in the same order, without the lgamma's series and its second log): for passes
    that need E log theta but not the bound."""
    p, dp = _upward_steps(x)
    y = x + 8.0
    inv = 1.0 / y
    return _psi_series(np.log(y), inv, inv * inv) - dp / p


@njit(cache=True, nogil=True, fastmath=FASTMATH_SPECIAL)
def gamma_functions_scalar(x):  # pragma: no cover - compiled
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
    lgamma, psi, inv, inv2 = lgamma_psi_asymptotic(x + 8.0)
    ratio = dp / p
    trigamma = (
        inv
        + 0.5 * inv2
        + inv
        * inv2
        * (
            1.0 / 6
            - inv2
            * (1.0 / 30 - inv2 * (1.0 / 42 - inv2 * (1.0 / 30 - inv2 * (5.0 / 66 - inv2 * (691.0 / 2730)))))
        )
        + ratio * ratio
        - d2p / p
    )
    return lgamma - np.log(p), psi - ratio, trigamma
