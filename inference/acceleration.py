"""SQUAREM: fewer EM iterations along the learned priors' path (issue 44, direction 2).

Varadhan & Roland (2008), scheme S3, on the log concentrations ``theta = log alpha`` of every
learned prior group (docs/math.md, "SQUAREM on the learned priors"). The EM map ``F`` is one
E-step, warm from the per-sequence states, then one M-step. From ``theta0`` and two plain
iterations ``theta1 = F(theta0)``, ``theta2 = F(theta1)``::

    r = theta1 - theta0,  v = theta2 - theta1 - r,  s = min(-||r|| / ||v||, -1)
    theta' = theta0 - 2 s r + s^2 v        (s = -1 gives theta2: the plain step)

clipped to the M-step's box ``[MIN_CONCENTRATION, MAX_CONCENTRATION]``; the groups without a
learned prior (shared posteriors, point estimates) keep their values at ``theta2``. Then one
stabilizing iteration from ``theta'``: its E-step runs warm from the states at ``theta2``, and
the point is *accepted* where that E-step's ELBO is at least the ELBO recorded at ``theta2``
(:func:`accepts`), so that the recorded trace, E- and M-steps alike, never decreases; its
M-step then gives the next cycle's ``theta0``. Otherwise the states saved before it
(``state_arrays``, copies) are put back and the plain iteration from ``theta2`` runs in its
place: the fit continues exactly as plain EM from the last accepted point. A cycle starts
afresh after every E-step that runs every start (the first, and each refresh), whose jump in
the per-sequence states is no step of the map ``F``.

:func:`squarem_step` and :func:`accepts` are pure; :class:`Squarem` runs the cycle over an
EM driver's iterations (:meth:`ldhmm.inference.em.VariationalEM.fit_backend`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .ops.dirichlet import MAX_CONCENTRATION, MIN_CONCENTRATION
from .parameters import VariantParameters
from .sharing import SEQUENCE

__all__ = [
    "ACCELERATIONS",
    "SquaremStep",
    "learned_groups",
    "log_priors",
    "with_log_priors",
    "squarem_step",
    "accepts",
    "Squarem",
]

#: How EM's parameter path may be accelerated: ``"none"`` (plain EM) or ``"squarem"``.
ACCELERATIONS = ("none", "squarem")
#: The bound on the step length ``|s|`` at a run's start, and its factor: multiplied where a
#: step reached it (the extrapolated point kept, or ``s = -1``), divided (to at least the
#: start's) where a point at the bound was not kept: the global step-length control of the
#: SQUAREM package (``step.max0 = 1``, ``mstep = 4``; Du & Varadhan 2020).
MAX_STEP0, STEP_FACTOR = 1.0, 4.0
#: The box of the log concentrations (the M-step's).
LOG_BOUNDS = (math.log(MIN_CONCENTRATION), math.log(MAX_CONCENTRATION))


@dataclass(frozen=True)
class SquaremStep:
    """One extrapolation of :func:`squarem_step`.

    Attributes
    ----------
    theta : ndarray
        The extrapolated point, clipped to the box.
    steplength : float
        ``s`` (<= -1; -1: the plain step, ``theta`` is ``theta2``).
    """

    theta: np.ndarray
    steplength: float


def learned_groups(params: VariantParameters) -> tuple:
    """The groups whose prior the M-step learns (none: nothing to accelerate)."""
    sharing = params.sharing
    return tuple(sharing.groups(SEQUENCE)) if sharing.learn_prior else ()


def log_priors(params: VariantParameters, groups: tuple) -> np.ndarray:
    """The log concentrations of ``groups``' priors, flattened and joined (float64)."""
    return np.concatenate([np.log(params.prior[g].double().numpy()).ravel() for g in groups])


def with_log_priors(params: VariantParameters, groups: tuple, theta: np.ndarray) -> VariantParameters:
    """A copy of ``params`` whose priors of ``groups`` are ``exp(theta)`` (in :func:`log_priors`'
    order and ``params``' dtype)."""
    new, at = params.clone(), 0
    for g in groups:
        a = params.prior[g]
        n = a.numel()
        new.prior[g] = torch.from_numpy(np.exp(theta[at : at + n])).reshape(a.shape).to(a.dtype)
        at += n
    return new


def squarem_step(
    theta0, theta1, theta2, max_step: float = math.inf, bounds: tuple = LOG_BOUNDS
) -> SquaremStep:
    """S3's extrapolation from three consecutive EM iterates (see the module docstring): the
    step length ``s = -||r|| / ||v||`` clamped to ``-max_step <= s <= -1`` (-1 where ``v`` is 0
    or not finite), the point clipped to ``bounds``."""
    theta0, theta1, theta2 = (np.asarray(t, dtype=np.float64) for t in (theta0, theta1, theta2))
    r = theta1 - theta0
    v = theta2 - theta1 - r
    r_norm, v_norm = float(np.linalg.norm(r)), float(np.linalg.norm(v))
    s = -r_norm / v_norm if v_norm > 0 and math.isfinite(r_norm / v_norm) else -1.0
    s = min(max(s, -max_step), -1.0)
    theta = theta0 - 2.0 * s * r + s * s * v
    if s == -1.0:
        theta = theta2.copy()  # the plain step, exactly
    return SquaremStep(np.clip(theta, *bounds), s)


def accepts(candidate: float, plain: float) -> bool:
    """Whether an extrapolated point whose E-step ended at ELBO ``candidate`` is kept against
    the plain point's recorded ``plain``: finite and not below it."""
    return math.isfinite(candidate) and candidate >= plain


class Squarem:
    """SQUAREM's cycle over an EM driver's iterations: called as the driver's plain iteration
    (``engine._iteration``) is, with the same result, one recorded iteration per call.

    Parameters
    ----------
    engine : VariationalEM
        Its ``_e_step``, ``_m_step`` and ``_iteration``.

    Attributes
    ----------
    tried, accepted : int
        Extrapolated points tried, and kept.
    max_step : float
        The bound on ``|s|`` now (:data:`MAX_STEP0`, :data:`STEP_FACTOR`).
    """

    def __init__(self, engine):
        self.engine = engine
        self.points: list = []  # log priors of consecutive plain iterates since the cycle began
        self.pending: SquaremStep | None = None
        self.tried = self.accepted = 0
        self.max_step = MAX_STEP0

    def __call__(self, backend, params, starts: tuple, n_iter: int, monitor):
        groups = learned_groups(params)
        fresh = not monitor.history or monitor.refresh  # every start runs: no step of the map F
        if fresh:
            self.points, self.pending = [], None
        elif self.pending is not None:
            step, self.pending = self.pending, None
            trial = with_log_priors(params, groups, step.theta)
            kept = self._extrapolated(backend, trial, starts, n_iter, monitor)
            self._adapt(step.steplength, kept is not None)
            if kept is not None:
                self.points = [log_priors(kept[0], groups)]
                return kept
        result = self.engine._iteration(backend, params, starts, n_iter, monitor)
        if not groups:
            return result
        after = log_priors(result[0], groups)
        # points[-1], where there is one, is always the log priors of ``params``
        self.points = [after] if fresh else (self.points or [log_priors(params, groups)]) + [after]
        if len(self.points) == 3:
            step, self.points = squarem_step(*self.points, max_step=self.max_step), []
            if step.steplength == -1.0:
                self._adapt(-1.0, True)  # theta2 itself: nothing to try
            elif not monitor.done and not monitor.refresh:
                self.pending = step
        return result

    def _adapt(self, steplength: float, kept: bool) -> None:
        """The step-length bound after a step of ``steplength`` was ``kept`` or not."""
        if -steplength >= self.max_step:
            bound = self.max_step * STEP_FACTOR if kept else self.max_step / STEP_FACTOR
            self.max_step = max(MAX_STEP0, bound)

    def _extrapolated(self, backend, trial, starts: tuple, n_iter: int, monitor):
        """The iteration from ``trial`` where :func:`accepts` keeps it (the driver's result, its
        M-step ELBO recorded), else None with the per-sequence states put back as they were."""
        saved = backend.call("state_arrays")
        if any(part is None for part in saved):
            return None  # a guide state that cannot be copied: plain EM
        self.tried += 1
        totals, e_elbo = self.engine._e_step(backend, trial, starts, n_iter)
        if not accepts(e_elbo, monitor.history[-1]):
            backend.call_each("set_state_arrays", [[part] for part in saved])
            return None
        self.accepted += 1
        new, m_elbo, capped = self.engine._m_step(backend, trial, totals, n_iter, monitor)
        return new, totals, e_elbo, m_elbo, capped
