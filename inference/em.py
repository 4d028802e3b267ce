"""The variational EM loop: configuration and the outer loop, no math.

Alternates :func:`ldhmm.inference.cavi.e_step_totals.e_step` and
:func:`ldhmm.inference.cavi.maximization.m_step`
until the total ELBO's relative change falls below ``tol``, recording the ELBO after every E-
and M-step so that the monotonicity of coordinate ascent can be checked step by step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .acceleration import ACCELERATIONS, ACCELERATORS
from .cavi.e_step_totals import e_step
from .cavi.expectation import BucketState
from .cavi.maximization import M_STEP_METHODS, m_step, total_elbo
from .cavi.sequence_starts import RANDOM_STARTS, default_starts, held_out_starts, rotating_start
from .checkpoint import FitCheckpoint
from .distributed.workers import (
    LocalBackend,
    PartitionWorker,
    as_numpy_params,
    reduce_count_sums,
    reduce_totals,
)
from .em_observers import CallbackObserver, CheckpointObserver, Iteration, ProgressObserver
from .monitor import ConvergenceMonitor, ConvergenceReport, RelativeChange
from .parameters import VariantParameters

__all__ = ["NonFiniteELBOError", "FitResult", "VariationalEM"]


@dataclass
class FitResult:
    """What :meth:`VariationalEM.fit` returns.

    ``elbo_history`` is the monitored value, the total ELBO after each M-step;
    ``convergence`` says how the fit stopped (``n_iter`` and ``converged`` read it).
    """

    params: VariantParameters
    states: list
    elbo_history: list
    e_step_elbo_history: list
    trace: list
    capped: bool
    convergence: ConvergenceReport
    recoveries: list = field(default_factory=list)

    @property
    def n_iter(self) -> int:
        return self.convergence.n_iter

    @property
    def converged(self) -> bool:
        return self.convergence.converged


class NonFiniteELBOError(FloatingPointError):
    """The total ELBO of a fit became NaN or infinite.

    Attributes
    ----------
    iteration : int
        The EM iteration (1-based).
    step : {"E", "M"}
        After which step it was seen.
    group : str
        ``"pi"``, ``"A"`` or ``"B"`` (the first group whose parameters or expected statistics
        are not finite), or ``"q(Z)"`` when those are finite and the hidden-state term is not.
    value : float
    last_params : VariantParameters
        The parameters of the last step whose ELBO was finite (the fit's starting point when
        the first E-step failed).
    convergence : ConvergenceReport or None
        The fit's stopping report (reason ``"non_finite"``).
    """

    def __init__(self, iteration: int, step: str, group: str, value: float, last_params, convergence=None):
        super().__init__(
            f"the total ELBO became {value} at EM iteration {iteration} ({step}-step), in group {group}; "
            f"the last finite parameters are kept"
        )
        self.iteration, self.step, self.group, self.value = iteration, step, group, value
        self.last_params = last_params
        self.convergence = convergence


def _blame(params: VariantParameters, totals) -> str:
    """The first group whose parameters or expected statistics are not all finite."""
    for g in ("pi", "A", "B"):
        tensors = [d[g] for d in (params.prior, params.posterior, params.log_point) if g in d]
        tensors += [d[g] for d in (totals.sum_expected_log, totals.total_counts) if g in d]
        for t in tensors:
            finite = torch.isfinite(t) | (torch.isneginf(t) & (g in params.log_point))
            if not bool(finite.all()):
                return g
    return "q(Z)"


def _resume(backend, checkpoint: FitCheckpoint, run, start: VariantParameters, monitor: ConvergenceMonitor):
    """A checkpointed run in progress, restored on ``backend`` (just reset): its state file's
    per-sequence state set and the journal's E-steps since replayed (the state they left, bit
    for bit), the rule's history and verdicts; returns the parameters after its last M-step."""
    if run.state_file is not None:
        parts = checkpoint.state_parts(run, start, backend.n_partitions)
        try:
            backend.call_each("set_state_arrays", [[part] for part in parts])
        except ValueError as err:
            what = f"its state file {run.state_file} does not fit the partitions ({err})"
            raise checkpoint.refusal(what) from None
    for i, (sent, used) in enumerate(run.journal, start=run.state_after + 1):
        backend.call("e_step", as_numpy_params(sent), used, i, iteration=i, step="E")
    # it may have stopped after its last save, before it was marked done
    monitor.restore(run.history, run.verdicts)
    return run.params


def _finished(run) -> FitResult:
    """The result of a checkpointed run that finished, as its record holds it (no state)."""
    return FitResult(
        run.params, None, list(run.history), list(run.e_history), list(run.trace), run.capped, run.report
    )


def _round_of_count_sums(backend, iteration: int):
    """The collapsed M-step's sums as a round over the partitions (reduced in partition order)."""

    def count_sums(alphas, rows):
        parts = backend.call("count_sums", alphas, rows, iteration=iteration, step="M")
        return reduce_count_sums(parts)

    return count_sums


class VariationalEM:
    """Variational EM driver: configuration and the outer loop, no math.

    Parameters
    ----------
    guide : guide object
    max_iter : int
        EM iterations at most.
    tol : float
        Stop when the total ELBO's relative change falls below ``tol``
        (:class:`ldhmm.inference.monitor.RelativeChange`, with ``refresh_max`` refreshes).
    e_step_max_iter, e_step_tol : int, float
        Per-sequence coordinate-ascent limits inside each E-step.
    progress : bool
        Show a progress bar over EM iterations (tqdm).
    m_step : {"collapsed", "paper"}
        How learned priors are updated (see :func:`m_step`).
    refresh_max : int
        Refreshes at most: when the ELBO has converged, one more E-step runs every start of
        the guide beside each sequence's warm continuation (best per sequence); if that gains
        more than ``tol``, EM goes on. Fits then end at least as good as a cold re-scoring of
        their own training data (docs/math.md, "Held-out E-step").
    random_starts : int
        Random starts per sequence beside the deterministic ones, in the held-out E-step, the
        first E-step and every refresh (see :data:`ldhmm.inference.cavi.sequence_starts.STARTS`).
    start_every : int
        A rotating start every this many E-steps after the first (0: none): beside each
        sequence's warm run, one of the first E-step's starts in turn, each random draw a new
        one (:func:`ldhmm.inference.cavi.sequence_starts.rotating_start`), the better run kept per
        sequence. The search of a refresh spread over the iterations, while the priors move:
        no E-step ends below its warm run, so the ELBO still never decreases.
    m_step_max_iter : int, optional
        Newton steps per M-step at most (default: 8 for ``"collapsed"``, which stops earlier
        once its next pass would gain little, see
        :func:`ldhmm.inference.cavi.maximization.maximize_collapsed`; 100 for ``"paper"``).
    checkpoint : FitCheckpoint, optional
        Written after every EM iteration of every run, with the per-sequence state every
        :data:`ldhmm.inference.checkpoint.STATE_EVERY` iterations (:mod:`ldhmm.inference.checkpoint`);
        a run it holds finished is returned from it, one in progress resumed where it stopped
        (the numbers of an uninterrupted fit, at the cost of fewer than ``STATE_EVERY`` E-steps).
    acceleration : {"none", "squarem", "anderson"}
        ``"squarem"``: SQUAREM on the learned priors' log concentrations, ``"anderson"``: damped
        Anderson acceleration of them (:mod:`ldhmm.inference.acceleration`; docs/math.md,
        "SQUAREM on the learned priors"), every extrapolated point kept only where the ELBO does
        not fall; not with a checkpoint. ``"none"``: plain EM.
    """

    def __init__(
        self,
        guide,
        max_iter=100,
        tol=1e-4,
        e_step_max_iter=100,
        e_step_tol=1e-6,
        progress=False,
        m_step="collapsed",
        m_step_max_iter=None,
        refresh_max=10,
        random_starts=RANDOM_STARTS,
        checkpoint: FitCheckpoint | None = None,
        start_every=0,
        acceleration="none",
    ):
        if m_step not in M_STEP_METHODS:
            raise ValueError(f"m_step must be one of {M_STEP_METHODS}, got {m_step!r}")
        self.m_step = m_step
        self.m_step_max_iter = (
            m_step_max_iter if m_step_max_iter is not None else (8 if m_step == "collapsed" else 100)
        )
        self.guide = guide
        self.max_iter = max_iter
        self.tol = tol
        self.e_step_max_iter = e_step_max_iter
        self.e_step_tol = e_step_tol
        self.progress = progress
        RelativeChange(tol, refresh_max)  # checks them
        self.refresh_max = refresh_max
        if random_starts < 0:
            raise ValueError(f"random_starts must be >= 0, got {random_starts}")
        self.random_starts = random_starts
        if isinstance(start_every, bool) or not isinstance(start_every, int) or start_every < 0:
            raise ValueError(f"start_every must be an integer >= 0, got {start_every!r}")
        self.start_every = start_every
        if acceleration not in ACCELERATIONS:
            raise ValueError(f"acceleration must be one of {ACCELERATIONS}, got {acceleration!r}")
        if acceleration != "none" and checkpoint is not None:
            raise ValueError(f"acceleration={acceleration!r} is not checkpointed: give one or the other")
        self.acceleration = acceleration
        self.checkpoint = checkpoint

    def worker(self, data, n_symbols: int, **options) -> PartitionWorker:
        """A partition worker over ``data`` (buckets, sequences or a PartitionSpec) with this
        engine's guide and E-step settings (``options``: ``sparse``, ``bucket_cells``, ``index``)."""
        return PartitionWorker(
            data,
            self.guide,
            n_symbols,
            e_step_max_iter=self.e_step_max_iter,
            e_step_tol=self.e_step_tol,
            m_step=self.m_step,
            **options,
        )

    def fit(self, buckets, params: VariantParameters, callback=None) -> FitResult:
        """Alternate E- and M-steps from ``params`` until convergence, in this process: the
        driver :meth:`fit_backend` over one partition holding every bucket.

        ``trace`` records ``("E", elbo)`` after every E-step and ``("M", elbo)`` after every
        M-step, so the monotonicity of coordinate ascent can be checked step by step.

        Raises
        ------
        NonFiniteELBOError
            The total ELBO became NaN or infinite: names the iteration, the step and the group
            (pi, A, B or the hidden states) and carries the last finite parameters.
        """
        return self.fit_backend(LocalBackend([self.worker(buckets, params.n_symbols)]), params, callback)

    def fit_backend(
        self, backend, params: VariantParameters, callback=None, label: str = "", warm_states=None
    ) -> FitResult:
        """The driver: :meth:`fit` over the partitions of ``backend``.

        Every E-step is one round (``backend.call("e_step", params, starts)``: each partition
        updates its own sequences and returns its sums, added in partition order); every
        Newton pass of the collapsed M-step one more (``"count_sums"``). ``backend`` is a
        :class:`ldhmm.inference.distributed.workers.LocalBackend` or a
        :class:`ldhmm.inference.distributed.dask_backend.DaskBackend`: the same workers, the same numbers.
        A backend that lost a worker rebuilds its partitions exactly (``backend.recoveries``):
        the fit is the one without the loss. ``label`` names this run in the progress bar
        (``"restart 2 of 3"``).

        ``warm_states`` (one list of per-sequence states per partition, shaped for ``params``)
        continues each sequence from that state instead of the first E-step's cold starts: the
        run then begins at that state's bound under ``params``, and no step of EM lowers it
        (a fit grown by an unused state, :func:`ldhmm.models.path.continue_previous`). Not with
        a checkpoint.
        """
        run = self.checkpoint.next_run(params) if self.checkpoint is not None else None
        if run is not None and run.done:
            return _finished(run)
        if warm_states is not None and self.checkpoint is not None:
            raise ValueError("warm_states cannot be checkpointed: give one or the other")
        rule = RelativeChange(self.tol, self.refresh_max, max(1, self.start_every))
        monitor = ConvergenceMonitor(rule, self.max_iter, "EM iteration")
        starts, iteration = self.fit_starts(), self._stepper()
        params, use_starts, e_history, trace, capped = self._begin(
            backend, params, starts, run, warm_states, monitor
        )
        observers = self._observers(run, callback, label)
        try:
            while not monitor.done:
                n_iter = monitor.n_iter + 1
                for observer in observers:
                    observer.sent(n_iter, params, use_starts)
                params, totals, e_elbo, m_elbo, was_capped = iteration(
                    backend, params, use_starts, n_iter, monitor
                )
                capped |= was_capped
                trace += [("E", e_elbo), ("M", m_elbo)]
                e_history.append(e_elbo)
                step = Iteration(
                    n_iter, params, m_elbo, totals.max_sweeps, monitor, e_history, trace, capped, backend
                )
                for observer in observers:
                    observer.iterated(step)
                use_starts = starts if monitor.refresh else self.rotating_starts(n_iter, starts)
            for observer in observers:
                observer.finished(monitor)
        finally:
            for observer in observers:
                observer.close()
        recoveries = list(getattr(backend, "recoveries", []))
        return FitResult(
            params, backend.states, monitor.history, e_history, trace, capped, monitor.report(), recoveries
        )

    def _begin(self, backend, params, starts: tuple, run, warm_states, monitor: ConvergenceMonitor):
        """A run's partitions set up (this guide, no state) and where it begins: from ``params``
        with every start, from ``warm_states`` (no start), or where its checkpointed ``run``
        stopped (its E-steps replayed, ``monitor`` restored).

        Returns (parameters, the first E-step's starts, E-step ELBOs, trace, capped) so far."""
        backend.call("set_guide", self.guide)
        backend.call("reset")
        # The first E-step and every refresh the rule asks for run all the starts (best per
        # sequence); the others continue each sequence from where it stopped.
        if warm_states is not None:
            backend.call_each("set_states", [[part] for part in warm_states])
            return params, (), [], [], False
        if run is None or not run.history:
            return params, starts, [], [], False
        params = _resume(backend, self.checkpoint, run, params, monitor)
        use_starts = starts if monitor.refresh else self.rotating_starts(len(monitor.history), starts)
        return params, use_starts, list(run.e_history), list(run.trace), run.capped

    def _observers(self, run, callback, label: str) -> list:
        """Who watches a run: its checkpoint record, the progress bar, the caller's callback."""
        observers = []
        if run is not None:
            observers.append(CheckpointObserver(self.checkpoint, run))
        if self.progress:
            observers.append(ProgressObserver(self.max_iter, label))
        if callback is not None:
            observers.append(CallbackObserver(callback))
        return observers

    def _stepper(self):
        """How a run's iterations go: :meth:`_iteration` (plain EM), or an accelerator over it
        (:data:`ldhmm.inference.acceleration.ACCELERATORS`, called alike)."""
        accelerator = ACCELERATORS.get(self.acceleration)
        return accelerator(self) if accelerator is not None else self._iteration

    def _iteration(self, backend, params, starts: tuple, n_iter: int, monitor: ConvergenceMonitor):
        """One EM iteration over ``backend``'s partitions: the E-step from ``params`` (with
        ``starts``), then the M-step, its ELBO recorded by ``monitor``; a non-finite ELBO of
        either step raises :class:`NonFiniteELBOError` with the last finite parameters.

        Returns (parameters after the M-step, the E-step's totals, E-step ELBO, M-step ELBO,
        whether a learned prior reached its cap)."""
        totals, e_elbo = self._e_step(backend, params, starts, n_iter)
        if not monitor.check_finite(e_elbo):
            raise NonFiniteELBOError(n_iter, "E", _blame(params, totals), e_elbo, params, monitor.report())
        new, m_elbo, capped = self._m_step(backend, params, totals, n_iter, monitor)
        return new, totals, e_elbo, m_elbo, capped

    def _e_step(self, backend, params, starts: tuple, n_iter: int):
        """The E-step of iteration ``n_iter`` from ``params``: (its totals, its ELBO), not checked."""
        # No name keeps the parameters sent: the E-step's O(K V) prior terms cached on them
        # (3 x 8 K V bytes at large V) go before the M-step.
        parts = backend.call("e_step", as_numpy_params(params), starts, n_iter, iteration=n_iter, step="E")
        totals = reduce_totals(parts)
        return totals, total_elbo(params, totals)

    def _m_step(self, backend, params, totals, n_iter: int, monitor: ConvergenceMonitor):
        """The M-step after the E-step from ``params``, its ELBO recorded by ``monitor`` (a
        non-finite one raises): (new parameters, M-step ELBO, whether a prior reached its cap)."""
        new, m_elbo, capped = m_step(
            params,
            totals,
            newton_max_iter=self.m_step_max_iter,
            method=self.m_step,
            count_sums=_round_of_count_sums(backend, n_iter),
            elbo_tol=self.tol,
        )
        monitor.record(m_elbo)
        if monitor.reason == "non_finite":
            raise NonFiniteELBOError(n_iter, "M", _blame(new, totals), m_elbo, params, monitor.report())
        return new, m_elbo, capped

    def score(self, buckets, params: VariantParameters, starts: tuple | None = None) -> list[BucketState]:
        """E-step with fixed parameters: the per-sequence held-out ELBO of new sequences, the
        best of the guide's starts for each (:data:`ldhmm.inference.cavi.sequence_starts.STARTS`).

        ``starts``: default the held-out E-step's (:func:`held_out_starts`); the SVI route's
        local start gives a fit's (:meth:`fit_starts`)."""
        states, _ = e_step(
            buckets,
            params,
            self.guide,
            None,
            max_iter=self.e_step_max_iter,
            tol=self.e_step_tol,
            starts=held_out_starts(self.guide, self.random_starts) if starts is None else starts,
        )
        return states

    def rotating_starts(self, n_iter: int, starts: tuple) -> tuple:
        """The starts of the E-step after EM iteration ``n_iter`` when it is no refresh: the
        rotating start where ``start_every`` says one is due, else none (the warm runs alone)."""
        if not self.start_every or not starts or n_iter % self.start_every:
            return ()
        return rotating_start(starts, n_iter // self.start_every, self.random_starts)

    def fit_starts(self) -> tuple:
        """The starts of a fit's first E-step and its refreshes: the guide's deterministic starts
        and ``random_starts`` random draws (:func:`default_starts`), without the held-out
        E-step's extra ones."""
        return default_starts(self.guide, self.random_starts)
