"""What watches an EM run: its checkpoint, its progress bar, a caller's callback.

:meth:`ldhmm.inference.em.VariationalEM.fit_backend` is the loop (E-step, M-step, the monitor's
verdict) and reports to its observers, as hmmlearn's loop reports to its ``monitor_``: before each
E-step (``sent``: the parameters and starts it is sent), after each iteration (``iterated``: an
:class:`Iteration`), and at the end (``finished``, then ``close`` however the run ends).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tqdm.auto import tqdm

from .checkpoint import STATE_EVERY, FitCheckpoint
from .distributed.workers import as_numpy_params
from .monitor import ConvergenceMonitor
from .parameters import VariantParameters
from .progress import progress_options

__all__ = ["Iteration", "EMObserver", "CheckpointObserver", "ProgressObserver", "CallbackObserver"]


@dataclass
class Iteration:
    """One finished EM iteration, as the observers see it.

    Attributes
    ----------
    n_iter : int
        The iteration (1-based).
    params : VariantParameters
        After its M-step.
    m_elbo : float
        The total ELBO after its M-step (the monitored value).
    max_sweeps : int
        The most coordinate-ascent sweeps a bucket of its E-step took.
    monitor : ConvergenceMonitor
    e_history, trace : list
        The run's E-step ELBOs and (step, ELBO) pairs so far.
    capped : bool
        Whether a learned prior reached its cap so far.
    backend
        The run's partitions (for their per-sequence state).
    """

    n_iter: int
    params: VariantParameters
    m_elbo: float
    max_sweeps: int
    monitor: ConvergenceMonitor
    e_history: list
    trace: list
    capped: bool
    backend: object


class EMObserver:
    """An observer that does nothing: subclasses take the calls they need."""

    def sent(self, n_iter: int, params: VariantParameters, starts: tuple) -> None:
        """Before iteration ``n_iter``'s E-step, with what it is sent."""

    def iterated(self, step: Iteration) -> None:
        """After each iteration."""

    def finished(self, monitor: ConvergenceMonitor) -> None:
        """After the last iteration (not when the run raises)."""

    def close(self) -> None:
        """However the run ends."""


class CheckpointObserver(EMObserver):
    """The run's record in a :class:`~ldhmm.inference.checkpoint.FitCheckpoint`: the E-steps sent
    since its last state file (the journal a resume replays), the history after every iteration,
    the per-sequence state every :data:`~ldhmm.inference.checkpoint.STATE_EVERY` iterations, and
    the run marked done at its end; the checkpoint written after each."""

    def __init__(self, checkpoint: FitCheckpoint, run):
        self.checkpoint, self.run = checkpoint, run

    def sent(self, n_iter, params, starts):
        self.run.journal.append((as_numpy_params(params), starts))  # no cached prior terms kept

    def iterated(self, step):
        run = self.run
        run.history, run.verdicts = list(step.monitor.history), list(step.monitor.verdicts)
        run.e_history, run.trace, run.capped, run.params = (
            list(step.e_history),
            list(step.trace),
            step.capped,
            step.params,
        )
        if step.n_iter - run.state_after >= STATE_EVERY:  # a resume replays fewer E-steps
            self.checkpoint.save_state(run, step.backend.call("state_arrays"), step.n_iter)
        self.checkpoint.save()

    def finished(self, monitor):
        run = self.run
        run.done, run.report, run.journal = True, monitor.report(), []
        run.state_file, run.state_after = None, 0  # its state file goes with the next save
        self.checkpoint.save()


class ProgressObserver(EMObserver):
    """A progress bar over EM iterations (tqdm): the ELBO and the E-step's sweeps beside it."""

    def __init__(self, max_iter: int, label: str = ""):
        desc = f"variational EM ({label})" if label else "variational EM"
        self.bar = tqdm(total=max_iter, desc=desc, unit="iter", leave=False, **progress_options())

    def iterated(self, step):
        # the postfix first, without its own redraw: update() redraws at its interval
        self.bar.set_postfix(elbo=f"{step.m_elbo:.6g}", sweeps=step.max_sweeps, refresh=False)
        self.bar.update(1)

    def close(self):
        self.bar.close()


class CallbackObserver(EMObserver):
    """A caller's ``callback(n_iter, elbo)`` after each iteration."""

    def __init__(self, callback: Callable):
        self.callback = callback

    def iterated(self, step):
        self.callback(step.n_iter, step.m_elbo)
