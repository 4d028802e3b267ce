"""When an SVI fit stops: an exponentially smoothed ELBO per token, and a patience.

A stochastic ELBO estimate never settles, so the relative-change test of variational EM does
not apply. After every epoch ``e`` (each minibatch once) the route records the epoch's ELBO
estimate per token ``y_e`` and smooths it,

``s_0 = y_0,    s_e = rho s_(e-1) + (1 - rho) y_e``

An epoch *improves* when ``s_e > best + tol |best|``, ``best`` the highest smoothed value
before it (then ``best = s_e``). The fit stops, converged, after ``patience`` epochs in a row
without improvement, and in any case after ``max_epochs``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["ConvergenceRule", "ConvergenceState"]


@dataclass(frozen=True)
class ConvergenceRule:
    """The stopping rule of the module docstring.

    Attributes
    ----------
    tol : float
        Relative improvement of the smoothed ELBO per token that counts (>= 0).
    patience : int
        Epochs in a row without improvement before stopping (>= 1).
    smoothing : float
        ``rho`` in ``[0, 1)``; 0 reads the raw epoch estimates.
    max_epochs : int
        Epochs at most (>= 0; 0: start the parameters and stop).
    """

    tol: float = 1e-4
    patience: int = 10
    smoothing: float = 0.5
    max_epochs: int = 1000

    def __post_init__(self):
        if not (self.tol >= 0 and math.isfinite(self.tol)):
            raise ValueError(f"tol must be finite and >= 0, got {self.tol}")
        if int(self.patience) < 1:
            raise ValueError(f"patience must be >= 1, got {self.patience}")
        if not 0 <= self.smoothing < 1:
            raise ValueError(f"smoothing must be in [0, 1), got {self.smoothing}")
        if int(self.max_epochs) < 0:
            raise ValueError(f"max_epochs must be >= 0, got {self.max_epochs}")


@dataclass
class ConvergenceState:
    """The rule's running state; :meth:`update` after each epoch says whether to stop."""

    rule: ConvergenceRule
    smoothed: list = field(default_factory=list)
    best: float = -math.inf
    stale: int = 0
    converged: bool = False

    def update(self, per_token: float) -> bool:
        """Record one epoch's ELBO per token; True when the fit should stop."""
        rho = self.rule.smoothing
        s = per_token if not self.smoothed else rho * self.smoothed[-1] + (1 - rho) * per_token
        self.smoothed.append(s)
        if s > self.best + self.rule.tol * abs(self.best) or not math.isfinite(self.best):
            self.best, self.stale = s, 0
        else:
            self.stale += 1
        self.converged = self.stale >= self.rule.patience
        return self.converged or len(self.smoothed) >= self.rule.max_epochs
