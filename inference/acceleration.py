"""Fewer EM iterations along the learned priors' path (issue 44, direction 2): SQUAREM and
damped Anderson acceleration.

**SQUAREM.** Varadhan & Roland (2008), scheme S3, on the log concentrations ``theta = log
alpha`` of every learned prior group (docs/math.md, "SQUAREM on the learned priors"). The EM
map ``F`` is one E-step, warm from the per-sequence states, then one M-step. From ``theta0`` and two plain
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

**Damped Anderson acceleration** (type II, Walker & Ni 2011; the damping and restarts of
Henderson & Varadhan's DAAREM, 2019), on the same ``theta`` and the same map ``F``. From the
last ``m + 1`` points ``x_j`` at which ``F`` was evaluated and their images ``g_j = F(x_j)``,
residuals ``f_j = g_j - x_j``::

    gamma = argmin ||f_k - dF gamma||,   dF = [f_{j+1} - f_j],  dG = [g_{j+1} - g_j]
    x' = g_k - delta dG gamma             (delta = 0: g_k, the plain step)

clipped to the box. ``x'`` replaces ``g_k`` as the next E-step's point where that E-step ends at
or above the ELBO recorded at ``g_k`` (the same :func:`accepts` test and fall-back as SQUAREM's:
the states put back, the plain iteration from ``g_k`` run in its place, the memory emptied).
The damping ``delta`` starts at :data:`ANDERSON_DAMPING0`, doubles (to at most 1) where a point
is kept and halves where one is refused. The memory is emptied after every E-step that runs
every start, as SQUAREM's cycle.

:func:`squarem_step`, :func:`anderson_step` and :func:`accepts` are pure; :class:`Squarem` and
:class:`Anderson` run over an EM driver's iterations
(:meth:`ldhmm.inference.em.VariationalEM.fit_backend`), each called as its plain iteration is.
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
    "anderson_step",
    "accepts",
    "Squarem",
    "Anderson",
    "ACCELERATORS",
]

#: How EM's parameter path may be accelerated: ``"none"`` (plain EM), ``"squarem"`` or
#: ``"anderson"``.
ACCELERATIONS = ("none", "squarem", "anderson")
#: The bound on the step length ``|s|`` at a run's start, and its factor: multiplied where a
#: step reached it (the extrapolated point kept, or ``s = -1``), divided (to at least the
#: start's) where a point at the bound was not kept: the global step-length control of the
#: SQUAREM package (``step.max0 = 1``, ``mstep = 4``; Du & Varadhan 2020).
MAX_STEP0, STEP_FACTOR = 1.0, 4.0
#: Anderson acceleration's memory (the number of differences ``m``) and its first damping.
ANDERSON_MEMORY, ANDERSON_DAMPING0 = 3, 0.5
#: The least damping before a refusal leaves it where it is (``delta`` halves down to it).
ANDERSON_DAMPING_MIN = 1.0 / 16.0
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


def anderson_step(points, images, damping: float = 1.0, bounds: tuple = LOG_BOUNDS) -> np.ndarray | None:
    """Type-II Anderson's extrapolation from the points ``x_j`` (oldest first) at which the map
    was evaluated and their ``images`` ``g_j`` (see the module docstring): ``g_k - damping dG
    gamma``, clipped to ``bounds``; None (the plain step ``g_k``, nothing to try) from a single
    point, at no damping, or where the least-squares problem gives no finite answer.

    Parameters
    ----------
    points, images : sequence of ndarray, each shape (n,)
        ``x_0 .. x_k`` and ``g_0 .. g_k``; every one used (the caller keeps ``m + 1``).
    damping : float
        ``delta`` in [0, 1]: 1 is Anderson's step, 0 the plain one.
    """
    x = np.asarray(points, dtype=np.float64)
    g = np.asarray(images, dtype=np.float64)
    if len(x) < 2 or damping <= 0:
        return None
    f = g - x
    d_f, d_g = np.diff(f, axis=0).T, np.diff(g, axis=0).T
    if not (np.all(np.isfinite(d_f)) and np.all(np.isfinite(d_g))):
        return None
    gamma = np.linalg.lstsq(d_f, f[-1], rcond=None)[0]
    theta = g[-1] - damping * (d_g @ gamma)
    return np.clip(theta, *bounds) if np.all(np.isfinite(theta)) else None


def accepts(candidate: float, plain: float) -> bool:
    """Whether an extrapolated point whose E-step ended at ELBO ``candidate`` is kept against
    the plain point's recorded ``plain``: finite and not below it."""
    return math.isfinite(candidate) and candidate >= plain


class _Safeguarded:
    """What both accelerators share: the EM driver whose iterations they run, and the trial of
    an extrapolated point that keeps the recorded ELBO from falling (:meth:`_extrapolated`).

    Attributes
    ----------
    engine : VariationalEM
        Its ``_e_step``, ``_m_step`` and ``_iteration``.
    tried, accepted : int
        Extrapolated points tried, and kept.
    """

    def __init__(self, engine):
        self.engine = engine
        self.tried = self.accepted = 0

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


class Squarem(_Safeguarded):
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
        super().__init__(engine)
        self.points: list = []  # log priors of consecutive plain iterates since the cycle began
        self.pending: SquaremStep | None = None
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


class Anderson(_Safeguarded):
    """Damped Anderson acceleration over an EM driver's iterations (see the module docstring):
    called as the driver's plain iteration (``engine._iteration``) is, with the same result, one
    recorded iteration per call.

    Parameters
    ----------
    engine : VariationalEM
        Its ``_e_step``, ``_m_step`` and ``_iteration``.
    memory : int
        ``m``: the differences kept (the last ``m + 1`` evaluations of the map).

    Attributes
    ----------
    tried, accepted : int
        Extrapolated points tried, and kept.
    damping : float
        ``delta`` now (:data:`ANDERSON_DAMPING0`, halved to :data:`ANDERSON_DAMPING_MIN` at the
        least, doubled to 1 at the most).
    """

    def __init__(self, engine, memory: int = ANDERSON_MEMORY):
        super().__init__(engine)
        self.memory = memory
        self.points: list = []  # x_j: the log priors at which the map was evaluated
        self.images: list = []  # g_j = F(x_j)
        self.pending: np.ndarray | None = None  # the point to try next
        self.damping = ANDERSON_DAMPING0

    def __call__(self, backend, params, starts: tuple, n_iter: int, monitor):
        groups = learned_groups(params)
        if not monitor.history or monitor.refresh:  # every start runs: no step of the map F
            self.points, self.images, self.pending = [], [], None
        result = None
        if self.pending is not None:
            theta, self.pending = self.pending, None
            trial = with_log_priors(params, groups, theta)
            result = self._extrapolated(backend, trial, starts, n_iter, monitor)
            if result is not None:  # kept: the map was evaluated at the trial point
                params, self.damping = trial, min(1.0, 2 * self.damping)
            else:  # refused: the fit goes on from g_k, with an empty memory
                self.points, self.images = [], []
                self.damping = max(ANDERSON_DAMPING_MIN, self.damping / 2)
        if result is None:
            result = self.engine._iteration(backend, params, starts, n_iter, monitor)
        if not groups:
            return result
        self.points = (self.points + [log_priors(params, groups)])[-(self.memory + 1) :]
        self.images = (self.images + [log_priors(result[0], groups)])[-(self.memory + 1) :]
        if not monitor.done and not monitor.refresh:
            self.pending = anderson_step(self.points, self.images, self.damping)
        return result


#: The accelerator of each :data:`ACCELERATIONS` name but ``"none"``, called as the driver's
#: plain iteration is.
ACCELERATORS = {"squarem": Squarem, "anderson": Anderson}
