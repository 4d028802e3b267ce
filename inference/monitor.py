"""When an iterative fit stops: one monitor, pluggable rules, one report.

:class:`ConvergenceMonitor` holds what every iterative fit of the project shares: the history
of the monitored value (one per iteration or epoch), the cap ``max_iter`` and the reason the
fit stopped, one of :data:`STOP_REASONS`:

``"converged"``
    the rule's test was met;
``"max_iter"``
    ``max_iter`` values were recorded without it (also at once when ``max_iter = 0``);
``"non_finite"``
    a value was NaN or infinite (the fit raises; the value is not added to the history).

The test itself is a rule, a frozen configuration with a pure ``verdict(history, verdicts)``
(:class:`StoppingRule`): ``history`` the values recorded so far, the newest last, and
``verdicts`` the rule's earlier answers. A verdict is ``"continue"``, ``"converged"`` or
``"refresh"`` (not converged yet: run the next iteration from every start, see
:class:`RelativeChange`). Three rules:

* :class:`RelativeChange`: variational EM (``ldhmm.inference.em``), the total ELBO ``L_t``
  changes by ``|L_t - L_(t-1)| <= tol |L_t|``, with refreshes.
* :class:`SmoothedPatience`: Pyro's SVI route (``ldhmm.inference.svi.svi_fit``). A stochastic
  ELBO estimate never settles, so the relative-change test does not apply: each epoch's ELBO
  estimate per token ``y_e`` is smoothed, ``s_0 = y_0, s_e = rho s_(e-1) + (1 - rho) y_e``; an
  epoch *improves* when ``s_e > best + tol |best|``, ``best`` the highest smoothed value before
  it (then ``best = s_e``); converged after ``patience`` epochs in a row without improvement.
* :class:`AbsoluteGain`: hmmlearn's test, which the HMM baseline (``ldhmm.baselines.hmm``)
  runs through this monitor: the objective gained less than ``tol`` (nats) in one iteration,
  ``L_t - L_(t-1) < tol``.

:meth:`ConvergenceMonitor.report` freezes the outcome in a :class:`ConvergenceReport`, which
fit results carry (``FitResult.convergence``, ``SVIResult.convergence``) and fitted models
expose as ``convergence_`` beside ``n_iter_`` and ``converged_``; ``str(report)`` is the
one-line stopping report that ``ldhmm fit`` prints.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "STOP_REASONS",
    "VERDICTS",
    "StoppingRule",
    "RelativeChange",
    "SmoothedPatience",
    "AbsoluteGain",
    "ConvergenceMonitor",
    "ConvergenceReport",
]

#: Why a fit stopped (:attr:`ConvergenceMonitor.reason`).
STOP_REASONS = ("converged", "max_iter", "non_finite")
#: What a rule answers after each value.
VERDICTS = ("continue", "converged", "refresh")


def _check_tol(tol) -> None:
    if not (tol >= 0 and math.isfinite(tol)):
        raise ValueError(f"tol must be finite and >= 0, got {tol}")


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


class StoppingRule(Protocol):
    """What :class:`ConvergenceMonitor` asks of a rule.

    Attributes
    ----------
    tol : float
        The tolerance (reported).
    """

    tol: float

    def verdict(self, history: list, verdicts: list) -> str:
        """One of :data:`VERDICTS` after ``history[-1]``; ``len(verdicts) == len(history) - 1``."""
        ...

    def describe(self) -> str:
        """The test in a few words, for the stopping report."""
        ...


@dataclass(frozen=True)
class RelativeChange:
    """Variational EM's rule: ``|L_t - L_(t-1)| <= tol |L_t|``, with refreshes.

    When the test is met and fewer than ``refresh_max`` refreshes were asked for, the verdict
    is ``"refresh"``: the driver runs the next E-step from every start. After a refresh the
    test is one-sided, ``L_t - L_(t-1) <= tol |L_t|``: a refresh that gains no more than an
    ordinary converged iteration ends the fit; one that gains more continues it (and the
    ordinary test applies again from the iteration after).

    Attributes
    ----------
    tol : float
        Relative change of the monitored value (>= 0).
    refresh_max : int
        Refreshes at most (>= 0; 0: converged as soon as the test is met).
    span : int
        Iterations the ordinary test looks back (>= 1): ``|L_t - L_(t-span)| <= span tol |L_t|``,
        the mean change per iteration over the last ``span``. EM with a rotating start every
        ``span`` E-steps (``start_every``) gains in steps of that period; a one-iteration test
        would stop it at the first iteration without a start.
    """

    tol: float = 1e-4
    refresh_max: int = 0
    span: int = 1

    def __post_init__(self):
        _check_tol(self.tol)
        if not _is_int(self.refresh_max) or self.refresh_max < 0:
            raise ValueError(f"refresh_max must be an integer >= 0, got {self.refresh_max!r}")
        if not _is_int(self.span) or self.span < 1:
            raise ValueError(f"span must be an integer >= 1, got {self.span!r}")

    def verdict(self, history: list, verdicts: list) -> str:
        if verdicts and verdicts[-1] == "refresh":
            # history[-2] is the value before the refresh
            return "converged" if history[-1] - history[-2] <= self.tol * abs(history[-1]) else "continue"
        span = self.span
        if len(history) > span and abs(history[-1] - history[-1 - span]) <= span * self.tol * abs(
            history[-1]
        ):
            return "converged" if verdicts.count("refresh") >= self.refresh_max else "refresh"
        return "continue"

    def describe(self) -> str:
        refreshes = f", {self.refresh_max} refreshes at most" if self.refresh_max else ""
        over = f" per iteration over the last {self.span}" if self.span > 1 else ""
        return f"relative change{over} <= tol {self.tol:g}{refreshes}"


@dataclass(frozen=True)
class SmoothedPatience:
    """The SVI route's rule (see the module docstring): the smoothed value has not risen by
    ``tol`` (relative) for ``patience`` epochs in a row.

    Attributes
    ----------
    tol : float
        Relative improvement of the smoothed value that counts (>= 0).
    patience : int
        Epochs in a row without improvement before stopping (>= 1).
    smoothing : float
        ``rho`` in ``[0, 1)``; 0 reads the raw values.
    """

    tol: float = 1e-4
    patience: int = 10
    smoothing: float = 0.5

    def __post_init__(self):
        _check_tol(self.tol)
        if not _is_int(self.patience) or self.patience < 1:
            raise ValueError(f"patience must be an integer >= 1, got {self.patience!r}")
        if not 0 <= self.smoothing < 1:
            raise ValueError(f"smoothing must be in [0, 1), got {self.smoothing}")

    def smoothed(self, history: list) -> list:
        """``s_e`` of every value of ``history``."""
        rho, out = self.smoothing, []
        for y in history:
            out.append(y if not out else rho * out[-1] + (1 - rho) * y)
        return out

    def verdict(self, history: list, verdicts: list) -> str:
        # Replayed from the start: the state is a function of the history (a few thousand
        # operations per epoch at most, against an epoch over the whole database).
        best, stale = -math.inf, 0
        for s in self.smoothed(history):
            if s > best + self.tol * abs(best) or not math.isfinite(best):
                best, stale = s, 0
            else:
                stale += 1
        return "converged" if stale >= self.patience else "continue"

    def describe(self) -> str:
        return (
            f"no relative gain over tol {self.tol:g} of the smoothed value (rho {self.smoothing:g}) "
            f"for {self.patience} epochs"
        )


@dataclass(frozen=True)
class AbsoluteGain:
    """hmmlearn's rule: the value gained less than ``tol`` in one iteration, ``L_t - L_(t-1) < tol``
    (a decrease counts as converged, as in hmmlearn's ``ConvergenceMonitor``).

    Attributes
    ----------
    tol : float
        Absolute gain (>= 0), in the unit of the value (nats).
    """

    tol: float = 1e-2

    def __post_init__(self):
        _check_tol(self.tol)

    def verdict(self, history: list, verdicts: list) -> str:
        return "converged" if len(history) > 1 and history[-1] - history[-2] < self.tol else "continue"

    def describe(self) -> str:
        return f"gain < tol {self.tol:g}"


@dataclass(frozen=True)
class ConvergenceReport:
    """How a fit stopped (:meth:`ConvergenceMonitor.report`).

    Attributes
    ----------
    reason : str or None
        One of :data:`STOP_REASONS`; None while the fit runs.
    n_iter : int
        Iterations (or epochs) run; with ``"non_finite"``, counting the one that failed.
    max_iter : int
    tol : float
    rule : str
        The test in words (the rule's ``describe()``).
    unit : str
        What one step is called (``"EM iteration"``, ``"SVI epoch"``, ...).
    last : float or None
        The last finite value recorded.
    bad_value : float or None
        The non-finite value that stopped the fit.
    """

    reason: str | None
    n_iter: int
    max_iter: int
    tol: float
    rule: str
    unit: str
    last: float | None = None
    bad_value: float | None = None

    @property
    def converged(self) -> bool:
        return self.reason == "converged"

    def __str__(self) -> str:
        steps = f"{self.n_iter} {self.unit}{'' if self.n_iter == 1 else 's'} of at most {self.max_iter}"
        last = "" if self.last is None else f", last value {self.last:.10g}"
        if self.reason == "non_finite":
            last = f", the last one gave {self.bad_value}"
        return f"{self.reason or 'running'}: {steps}{last} (rule: {self.rule})"


class ConvergenceMonitor:
    """The history of one fit's monitored value and why the fit stopped.

    Parameters
    ----------
    rule : StoppingRule
        :class:`RelativeChange`, :class:`SmoothedPatience`, :class:`AbsoluteGain` or any
        object with ``tol``, ``verdict(history, verdicts)`` and ``describe()``.
    max_iter : int
        Values at most (>= 0; 0: stopped before the first).
    unit : str
        What one step is called, for the report.

    Attributes
    ----------
    history : list of float
        The finite values recorded, in order.
    verdicts : list of str
        The rule's verdict after each of them.
    reason : str or None
        One of :data:`STOP_REASONS` once stopped.
    """

    def __init__(self, rule: StoppingRule, max_iter: int, unit: str = "iteration"):
        if not _is_int(max_iter) or max_iter < 0:
            raise ValueError(f"max_iter must be an integer >= 0, got {max_iter!r}")
        self.rule = rule
        self.max_iter = int(max_iter)
        self.unit = unit
        self.history: list = []
        self.verdicts: list = []
        self.reason: str | None = "max_iter" if self.max_iter == 0 else None
        self.bad_value: float | None = None

    @property
    def done(self) -> bool:
        """Whether the fit should stop."""
        return self.reason is not None

    @property
    def converged(self) -> bool:
        return self.reason == "converged"

    @property
    def refresh(self) -> bool:
        """Whether the rule asked for the next iteration to start from every start."""
        return bool(self.verdicts) and self.verdicts[-1] == "refresh"

    @property
    def n_iter(self) -> int:
        """Iterations run; a non-finite one counts."""
        return len(self.history) + (self.reason == "non_finite")

    def check_finite(self, value) -> bool:
        """False, and stopped with reason ``"non_finite"``, when ``value`` is NaN or infinite;
        for values that are not monitored but must be finite (EM's E-step ELBO)."""
        if math.isfinite(value):
            return True
        self.reason, self.bad_value = "non_finite", float(value)
        return False

    def record(self, value) -> bool:
        """Record one iteration's value; True when the fit should stop (:attr:`reason` says why)."""
        if self.done:
            raise RuntimeError(f"the monitor has stopped ({self.reason}); a value was recorded after it")
        if not self.check_finite(value):
            return True
        self.history.append(value)
        verdict = self.rule.verdict(self.history, self.verdicts)
        if verdict not in VERDICTS:
            raise ValueError(f"a stopping rule answered {verdict!r}, expected one of {VERDICTS}")
        self.verdicts.append(verdict)
        self._settle(verdict)
        return self.done

    def restore(self, history, verdicts) -> None:
        """Go on from a record of earlier iterations (a checkpoint's): their values and verdicts,
        and whether they had stopped (converged, or at ``max_iter``)."""
        self.history, self.verdicts = list(history), list(verdicts)
        self._settle(self.verdicts[-1])

    def _settle(self, verdict: str) -> None:
        """Why the fit stops after the last iteration's ``verdict``, if it does."""
        if verdict == "converged":
            self.reason = "converged"
        elif len(self.history) >= self.max_iter:
            self.reason = "max_iter"

    def report(self) -> ConvergenceReport:
        """The outcome so far, frozen."""
        return ConvergenceReport(
            reason=self.reason,
            n_iter=self.n_iter,
            max_iter=self.max_iter,
            tol=self.rule.tol,
            rule=self.rule.describe(),
            unit=self.unit,
            last=float(self.history[-1]) if self.history else None,
            bad_value=self.bad_value,
        )
