"""Pyro's route: any model of a padded sequence database, fitted by ``pyro.infer.SVI`` in minibatches.

:func:`fit_svi` takes a Pyro ``model`` and ``guide`` of one
:class:`~ldhmm.inference.svi.minibatch.SequenceBatch` (see that module for the conventions: one
plate ``"sequences"``, subsampled) and runs stochastic variational inference (the steps of
``pyro.infer.SVI``: an ELBO's ``loss_and_grads``, Adam) over length-sorted minibatches of the
database until the stopping rule :class:`~ldhmm.inference.monitor.SmoothedPatience` says stop
(or ``max_epochs`` epochs ran; :class:`~ldhmm.inference.monitor.ConvergenceMonitor`):

* the hidden chain is summed out exactly inside the model (the forward algorithm of
  :class:`~ldhmm.inference.svi.hmm_distribution.MaskedCategoricalHMM`), and any discrete site marked
  ``infer={"enumerate": "parallel"}`` by ``TraceEnum_ELBO``: nothing discrete is sampled;
* the model's ``pyro.param`` sites are the global parameters (type-II maximum likelihood of
  the bound), stepped by Pyro's Adam; a guide parameter declared inside the plate with
  ``event_dim`` is *local* (one row per sequence): :class:`~ldhmm.inference.svi.local_rows.LocalRows`
  serves a step only its batch's rows and gives each row one Adam step per visit, so a step
  costs one batch, not the database; any other guide parameter is global;
* a guide with a method ``initialize(batches)`` is given every minibatch once before the first
  step, to start its local parameters (:class:`~ldhmm.inference.svi.dirichlet_guide.DirichletMeanField`);
* a guide with a method ``local_start(batch)`` gets the local step in closed form: before every
  step of a fit the batch's rows are set to it under the current global parameters, and the
  step moves the globals (``refresh_locals``; sticky LDHMM on the MSNBC subset: a training
  bound of -1.2072 nats per token after 25 epochs with it, -1.3602 after 40 without);
* a run is seeded (minibatch order, Monte Carlo draws) and leaves the caller's parameter
  store and random state as they were: it runs inside its own parameter-store scope and
  returns the scope's state.

Scoring new sequences is the same call with the fitted global parameters in ``param_state``
and frozen (``frozen``): only the new sequences' local parameters move.

:func:`guide_init_from_state` is the warm start of Pyro's guides from a closed-form fit: the
values of a PF or FF guide's parameters (``init`` of :class:`~ldhmm.inference.cavi.guides.ChainGuide`)
that make it the closed form's q, on the original (sampled-Z) model; the check of the closed-form
ELBO against Pyro's ``Trace_ELBO`` starts there (``tests/test_pyro_elbo.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pyro
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO, TraceEnum_ELBO
from pyro.infer.util import zero_grads
from pyro.optim import Adam
from tqdm.auto import tqdm

from ..batch import Bucket
from ..cavi.expectation import BucketState
from ..monitor import ConvergenceMonitor, ConvergenceReport, SmoothedPatience
from ..ops.dirichlet import kl_dirichlet
from ..ops.potentials import emission_potentials, expected_complete_log_lik
from ..parameters import VariantParameters
from ..sharing import LDHMM_SHARING
from .device import as_device, on_device
from .local_rows import LocalRows
from .minibatch import length_batches
from .model_check import check_model, in_sequence_plate

__all__ = [
    "fit_svi",
    "SVIResult",
    "NonFiniteSVIError",
    "guide_init_from_state",
    "local_param_names",
    "copy_param_state",
    "set_param_values",
]


class NonFiniteSVIError(ValueError):
    """The ELBO estimate of an epoch was not finite; the message names the epoch.

    Attributes
    ----------
    convergence : ConvergenceReport or None
        The fit's stopping report (reason ``"non_finite"``).
    """

    def __init__(self, message: str, convergence: ConvergenceReport | None = None):
        super().__init__(message)
        self.convergence = convergence


@dataclass
class SVIResult:
    """Outcome of :func:`fit_svi`.

    Attributes
    ----------
    params : dict of str to Tensor
        The global parameters (constrained values, detached): the model's ``pyro.param`` sites
        and the guide's parameters outside the plate.
    param_state : dict
        Pyro's parameter-store state at the end (``ParamStoreDict.get_state()``: globals and
        locals); pass it back as ``param_state`` to continue or to score.
    local_params : tuple of str
        The names of the local (per-sequence) guide parameters.
    elbo_history : list of float
        After each epoch, the sum of its minibatch ELBO estimates: an estimate of the whole
        database's ELBO in nats.
    per_token_history : list of float
        The monitored value: ``elbo_history`` per token.
    smoothed_history : list of float
        The smoothed ELBO per token that a :class:`~ldhmm.inference.monitor.SmoothedPatience`
        rule reads (``per_token_history`` under another rule).
    epoch_seconds : list of float
    convergence : ConvergenceReport
        How the fit stopped; ``n_epochs`` and ``converged`` (stopped by the rule's patience,
        not by ``max_epochs``) read it.
    """

    params: dict
    param_state: dict
    local_params: tuple
    convergence: ConvergenceReport
    elbo_history: list = field(default_factory=list)
    per_token_history: list = field(default_factory=list)
    smoothed_history: list = field(default_factory=list)
    epoch_seconds: list = field(default_factory=list)

    @property
    def n_epochs(self) -> int:
        return self.convergence.n_iter

    @property
    def converged(self) -> bool:
        return self.convergence.converged


def copy_param_state(state: dict, names=None, device=None) -> dict:
    """A detached copy of a parameter-store state, restricted to ``names`` if given, on
    ``device`` if given."""
    keep = state["params"].keys() if names is None else [n for n in names if n in state["params"]]
    params = {n: state["params"][n].detach().clone() for n in keep}
    if device is not None:
        params = {n: value.to(device) for n, value in params.items()}
    params = {n: value.requires_grad_(True) for n, value in params.items()}
    return {"params": params, "constraints": {n: state["constraints"][n] for n in keep}}


def local_param_names(guide, batch) -> tuple:
    """Names of the guide's parameters declared inside plate ``"sequences"`` (one row per sequence)."""
    trace = poutine.block(poutine.trace(guide).get_trace)(batch)
    return tuple(
        name
        for name, site in trace.nodes.items()
        if site["type"] == "param" and in_sequence_plate(site) and site["kwargs"].get("event_dim") is not None
    )


def set_param_values(values: dict, where: str = "model") -> set:
    """Overwrite existing entries of Pyro's parameter store, keeping their constraints.

    Names the store does not hold are skipped; a value of another shape, or one outside the
    parameter's constraint, is a ValueError naming it. Returns the names that were set.
    """
    store = pyro.get_param_store()
    constraints = store.get_state()["constraints"]
    done = set()
    for name, value in values.items():
        if name not in store:
            continue
        old = store[name]
        value = torch.as_tensor(value, dtype=old.dtype, device=old.device)
        if value.shape != old.shape:
            raise ValueError(
                f"init value of {name!r} has shape {tuple(value.shape)}, "
                f"the {where} declares {tuple(old.shape)}"
            )
        if not bool(constraints[name].check(value).all()):
            raise ValueError(f"init value of {name!r} violates its constraint {constraints[name]}")
        store[name] = value
        done.add(name)
    return done


def _initialize(model, guide, batch, init: dict) -> bool:
    """Create every parameter (model first, so that the guide's local rows start from the
    initial model), set ``init``, check model and guide; whether the model enumerates."""
    done = set()
    if init:
        poutine.block(poutine.trace(model).get_trace)(batch)
        done = set_param_values(init, "model")
    enumerates = check_model(model, guide, batch)
    if init:
        done |= set_param_values({k: v for k, v in init.items() if k not in done}, "guide")
        unknown = sorted(set(init) - done)
        if unknown:
            raise ValueError(f"init names {unknown[0]!r}, which neither the model nor the guide declares")
    return enumerates


def fit_svi(
    model,
    guide,
    sequences,
    n_states: int,
    n_symbols: int,
    *,
    init: dict | None = None,
    param_state: dict | None = None,
    frozen=(),
    batch_size: int = 64,
    lr: float = 0.05,
    num_particles: int = 1,
    rule: SmoothedPatience | None = None,
    max_epochs: int = 1000,
    seed: int = 0,
    dtype=torch.float64,
    refresh_locals: bool = True,
    progress: bool = False,
    desc: str = "SVI",
    device=None,
) -> SVIResult:
    """Fit a Pyro model of a sequence database by SVI (Adam on an ELBO) in minibatches.

    Parameters
    ----------
    model, guide : callable
        ``model(batch)``, ``guide(batch)`` of a :class:`~ldhmm.inference.svi.minibatch.SequenceBatch`
        (e.g. :func:`ldhmm.models.pyro_model.ldhmm_sequence_model` and
        :class:`ldhmm.inference.svi.dirichlet_guide.DirichletMeanField`); checked first by
        :func:`~ldhmm.inference.svi.model_check.check_model`.
    sequences : list of int64 arrays (validated), symbols < n_symbols
    n_states, n_symbols : int
        K and V, passed to the model in every batch.
    init : dict of str to Tensor, optional
        Starting values of parameters (model or guide), set after they are created.
    param_state : dict, optional
        A parameter-store state to start from (e.g. a fit's, to score new sequences).
    frozen : iterable of str
        Parameters that stay as they are (hidden from the optimizer).
    batch_size : int
        Sequences per minibatch (:func:`~ldhmm.inference.svi.minibatch.length_batches`).
    lr : float
        Adam's learning rate (on unconstrained values: log-concentrations for positive ones).
    num_particles : int
        Monte Carlo draws per step (vectorized).
    rule : SmoothedPatience or another stopping rule, optional
        When the fit has converged (default: ``SmoothedPatience()``), read by a
        :class:`~ldhmm.inference.monitor.ConvergenceMonitor` of the ELBO per token.
    max_epochs : int
        Epochs at most (>= 0; 0: start the parameters and stop).
    seed : int
    dtype : torch.dtype
    refresh_locals : bool
        If the guide has a method ``local_start(batch)`` (e.g.
        :class:`~ldhmm.inference.svi.dirichlet_guide.DirichletMeanField` with ``init_offsets``),
        every step first sets the batch's local rows to it under the current global parameters
        (the local step of stochastic variational inference, in closed form) and the step moves
        only the global parameters (and the locals it did not set). Without it, or with False,
        a local row takes one Adam step per visit. Scoring passes False: with the global
        parameters frozen, a refresh would undo every epoch's progress.
    progress : bool
        A tqdm bar over epochs.
    desc : str
        The bar's label.
    device : torch.device or str, optional
        Where the fit runs (:func:`~ldhmm.inference.svi.device.as_device`; default the CPU):
        the minibatches, the starting values and ``param_state`` are moved there.

    Returns
    -------
    SVIResult

    Raises
    ------
    ldhmm.inference.svi.model_check.ModelCheckError
        A model or guide that breaks the route's conventions (the message names the site).
    NonFiniteSVIError
        An epoch whose ELBO estimate is not finite.
    """
    monitor = ConvergenceMonitor(rule if rule is not None else SmoothedPatience(), max_epochs, "SVI epoch")
    device = as_device("cpu" if device is None else device)
    batches = length_batches(sequences, batch_size, n_states, n_symbols, dtype, device=device)
    M = len(sequences)
    n_tokens = int(sum(len(s) for s in sequences))
    frozen = tuple(frozen)
    order_rng = np.random.default_rng(seed)
    store = pyro.get_param_store()
    state = copy_param_state(param_state, device=device) if param_state is not None else None
    with on_device(device), store.scope(state) as scope, torch.random.fork_rng():
        torch.manual_seed(seed)
        enumerates = _initialize(model, guide, batches[0], init or {})
        start_rows = getattr(guide, "initialize", None)
        if callable(start_rows):  # optional: the guide starts its local rows itself
            start_rows(batches)
        locals_ = local_param_names(guide, batches[0])
        local_start = getattr(guide, "local_start", None) if refresh_locals else None
        if frozen:
            model, guide = poutine.block(model, hide=list(frozen)), poutine.block(guide, hide=list(frozen))
        loss_class = TraceEnum_ELBO if enumerates else Trace_ELBO
        loss = loss_class(
            max_plate_nesting=1, num_particles=num_particles, vectorize_particles=num_particles > 1
        )
        global_optim = Adam({"lr": lr})
        rows = LocalRows([n for n in locals_ if n not in frozen], lr)
        history, seconds = [], []
        with tqdm(total=monitor.max_iter, desc=desc, leave=False, disable=not progress) as bar:
            while not monitor.done:
                start = time.perf_counter()
                total = 0.0
                for b in order_rng.permutation(len(batches)):
                    batch = batches[b]
                    total -= (
                        _step(model, guide, batch, loss, global_optim, rows, local_start)
                        * batch.batch_size
                        / M
                    )
                seconds.append(time.perf_counter() - start)
                if not monitor.check_finite(total):
                    raise NonFiniteSVIError(
                        f"{desc}: the ELBO estimate of epoch {len(history)} is {total}", monitor.report()
                    )
                history.append(total)
                monitor.record(total / n_tokens)
                bar.update(1)
                bar.set_postfix(elbo_per_token=f"{total / n_tokens:.4f}")
    params = {
        name: store_value.detach().clone()
        for name, store_value in _constrained(scope).items()
        if name not in locals_
    }
    return SVIResult(
        params=params,
        param_state=scope,
        local_params=locals_,
        convergence=monitor.report(),
        elbo_history=history,
        per_token_history=list(monitor.history),
        smoothed_history=_smoothed(monitor),
        epoch_seconds=seconds,
    )


def _smoothed(monitor: ConvergenceMonitor) -> list:
    """What a :class:`SmoothedPatience` rule read; another rule reads the history itself."""
    smooth = getattr(monitor.rule, "smoothed", None)
    return smooth(monitor.history) if callable(smooth) else list(monitor.history)


def _step(model, guide, batch, loss, global_optim, rows: LocalRows, local_start=None) -> float:
    """One SVI step on ``batch``: the local rows set by ``local_start(batch)`` if given, then
    Adam on the global parameters the step touched (Pyro's optimizer, as ``SVI.step``) and on
    the batch's other local rows (:class:`LocalRows`); the loss."""
    refreshed = ()
    if local_start is not None:
        start = {name: value for name, value in local_start(batch).items() if name in rows.names}
        rows.set_rows(batch.index, start)
        refreshed = tuple(start)
    with poutine.trace(param_only=True) as capture, rows.batch(batch.index):
        value = loss.loss_and_grads(model, guide, batch)
    params = {
        site["value"].unconstrained() for name, site in capture.trace.nodes.items() if name not in rows.names
    }
    global_optim(params)
    zero_grads(params)
    rows.step(skip=refreshed)
    return float(value)


def _constrained(state: dict) -> dict:
    """Constrained values of a parameter-store state."""
    out = {}
    for name, unconstrained in state["params"].items():
        out[name] = torch.distributions.transform_to(state["constraints"][name])(unconstrained)
    return out


def guide_init_from_state(guide, params: VariantParameters, bucket: Bucket, state: BucketState):
    """Pyro parameter values that make ``guide`` equal a closed-form q, and that q's ELBO.

    The warm start of a PF or FF guide (:mod:`ldhmm.inference.cavi.guides`) on the original
    model with Z sampled (:func:`ldhmm.models.pyro_model.ldhmm_model`): Pyro's SVI on them starts
    from a closed-form fit instead of the prior. One more q(Z) update is made from
    ``E log theta`` of the stored Dirichlet posteriors, so that q(Z) and q(theta) are exactly
    the ones whose ELBO is returned. For example, from an LDHMM fitted in closed form::

        guide = PFGuide()
        model = LDHMM(3, guide=guide).fit(sequences)
        (bucket,) = make_buckets(sequences, max_cells=1 << 62, max_padding_ratio=float("inf"))
        state = e_step_bucket(bucket, model.params_, guide)
        init, elbo = guide_init_from_state(guide, model.params_, bucket, state)
        prior = model.params_.prior
        args = (bucket.tokens, bucket.lengths, prior["pi"], prior["A"], prior["B"])
        svi = pyro.infer.SVI(ldhmm_model, lambda *a: guide(*a, init=init), optimizer, Trace_ELBO())

    The rows of ``init`` and ``elbo`` are the bucket's rows (``bucket.index`` names their
    sequences).

    Parameters
    ----------
    guide : PFGuide or FFGuide
        The family of the closed-form fit (its ``update_hidden`` and ``pyro_hidden_params``).
    params : VariantParameters
        The fitted parameters with LDHMM sharing (``model.params_``).
    bucket : Bucket
        The sequences, padded (:func:`ldhmm.inference.make_buckets`).
    state : BucketState
        Their closed-form E-step (:func:`ldhmm.inference.e_step_bucket`).

    Returns
    -------
    init : dict
        ``g_pi`` (M, K), ``g_A`` (M, K, K), ``g_B`` (M, K, V) and the guide's hidden parameters.
    elbo : Tensor, shape (M,)
        Closed-form ELBO of every sequence under that q.
    """
    if params.sharing != LDHMM_SHARING:
        raise ValueError("guide_init_from_state is for LDHMM sharing")
    g = {k: params.prior[k] + state.counts[k] for k in ("pi", "A", "B")}
    elog = params.expected_logs(state.counts)
    log_obs = emission_potentials(elog["B"], bucket.tokens)
    update, hidden_state = guide.update_hidden(state.guide_state, elog["pi"], elog["A"], log_obs, bucket.mask)
    expected = expected_complete_log_lik(
        update.state_marginals, update.transition_counts, elog["pi"], elog["A"], log_obs
    )
    kl = (
        kl_dirichlet(g["pi"], params.prior["pi"])
        + kl_dirichlet(g["A"], params.prior["A"]).sum(-1)
        + kl_dirichlet(g["B"], params.prior["B"]).sum(-1)
    )
    elbo = expected + update.entropy - kl
    init = {"g_pi": g["pi"], "g_A": g["A"], "g_B": g["B"]}
    init.update(guide.pyro_hidden_params(hidden_state, elog["pi"], elog["A"], log_obs, bucket.mask))
    return init, elbo
