"""The generic Pyro route as a harness model: a user's Pyro model and guide, fitted by SVI.

>>> from ldhmm.models.pyro_sequence import PyroSequenceModel
>>> from ldhmm.models.pyro_model import ldhmm_sequence_model, ldhmm_init
>>> model = PyroSequenceModel(ldhmm_sequence_model, "dirichlet", 3, init=ldhmm_init)  # doctest: +SKIP
>>> model.fit(train).score_samples(test)   # per-sequence held-out bound, nats  # doctest: +SKIP

The ``model`` is a Pyro model of one padded, masked minibatch
(:class:`~ldhmm.inference.svi.minibatch.SequenceBatch`; conventions in
:mod:`ldhmm.inference.svi.model_check`); :func:`ldhmm.inference.svi.svi_fit.fit_svi` fits it. Held-out
sequences are scored with the fitted global parameters frozen: their local variational
parameters are fitted by the same SVI loop, then ``score_samples`` is the Monte Carlo mean of
``log p(x_m, theta_m) - log q(theta_m)`` over ``score_draws`` draws (a lower bound on
``log p(x_m)``, ``score_kind = "lower_bound"``) and :meth:`PyroSequenceModel.log_marginal_is`
its importance-sampled ``log p(x_m)`` (:mod:`ldhmm.inference.svi.log_weights`).

It follows the harness protocol (:class:`ldhmm.models.base.SequenceModel`), so a factory
``factory(n_states, n_symbols, seed)`` that returns one joins ``ldhmm.compare``
(:mod:`ldhmm.models.sticky`, :mod:`ldhmm.models.mixture`).
"""

from __future__ import annotations

import functools
import math
import time

import numpy as np
import pyro
import torch
from pyro import poutine
from pyro.infer.autoguide import AutoGuide, AutoNormal

from ..inference import validate_sequences
from ..inference.monitor import SmoothedPatience
from ..inference.ops.forward import gather_emissions
from ..inference.ops.importance import ImportanceEstimate, importance_diagnostics
from ..inference.ops.viterbi import unpad_paths, viterbi_log
from ..inference.svi.chain_draws import ChainSummary, chain_summary
from ..inference.svi.device import as_device, on_device
from ..inference.svi.dirichlet_guide import DirichletMeanField, held_out_offsets
from ..inference.svi.log_weights import sequence_log_weights
from ..inference.svi.minibatch import auto_batch_size, length_batches, pad_batch
from ..inference.svi.svi_fit import copy_param_state, fit_svi, set_param_values
from .base import SequenceModel, check_n_symbols
from .file_format import read_pyro_model_file, write_pyro_model_file
from .import_path import import_path_of

__all__ = ["PyroSequenceModel", "GUIDES"]

#: Guides named by a string: ``"dirichlet"`` (per-sequence Dirichlet mean field) and
#: ``"normal"`` (Pyro's ``AutoNormal``, a per-sequence Gaussian in unconstrained space).
GUIDES = ("dirichlet", "normal")

_DTYPES = {"float64": torch.float64, "float32": torch.float32}


#: ``score_lr=None`` with a guide that starts its rows itself: the fit's rate divided by this.
STARTED_SCORE_LR_RATIO = 5


def _is_autoguide_class(guide) -> bool:
    target = guide.func if isinstance(guide, functools.partial) else guide
    return isinstance(target, type) and issubclass(target, AutoGuide)


def _sequence_plates(batch):
    return batch.plate()


class PyroSequenceModel(SequenceModel):
    """A Pyro model of a sequence database with its hidden chain summed out, fitted by SVI.

    Parameters
    ----------
    model : callable
        ``model(batch)``, a Pyro model of a :class:`~ldhmm.inference.svi.minibatch.SequenceBatch`
        (e.g. :func:`ldhmm.models.pyro_model.ldhmm_sequence_model`).
    guide : "dirichlet", "normal", an AutoGuide class (or ``functools.partial`` of one), or callable
        ``"dirichlet"``: :class:`~ldhmm.inference.svi.dirichlet_guide.DirichletMeanField` (the closed
        form's family of ``q(theta)``); ``"normal"``: ``AutoNormal``; an AutoGuide class is built
        as ``guide(model, create_plates=...)``, once per data set (fit, each scoring); a callable
        ``guide(batch)`` is used as it is (local parameters: declared inside ``batch.plate()``
        with ``event_dim``). Its draws must have a density (not ``AutoDelta``) for the scores to
        be bounds.
    n_states : int
        K, passed to the model as ``batch.n_states``.
    n_symbols : int, optional
        V; inferred from the training data when omitted.
    init : dict or callable, optional
        Starting values of parameters, or ``init(sequences, n_states, n_symbols, seed, dtype)``
        returning them (e.g. :func:`ldhmm.models.pyro_model.ldhmm_init`); None: the model's own
        defaults.
    batch_size : int or "auto"
        Sequences per minibatch (length-sorted batches, :func:`ldhmm.inference.svi.minibatch.length_batches`).
        ``"auto"``: :func:`~ldhmm.inference.svi.minibatch.auto_batch_size`, 64 up to 8,192
        training sequences, then as many as keep an epoch at 128 steps.
    max_epochs : int
        Epochs at most (each minibatch once per epoch).
    lr : float
        Adam's learning rate in the fit.
    score_lr : float, optional
        Adam's learning rate of the held-out local fit. None: ``lr / 5`` when the guide starts
        each sequence's rows at a closed-form local optimum itself (a guide with ``init_offsets``,
        as the Dirichlet mean field of the worked examples: from the PF E-step, single-draw
        gradients at the fit's rate ended in a noise ball below the start,
        docs/writing-a-variant.md), else ``lr`` (a guide starting far away needs the steps).
    num_particles : int
        Monte Carlo draws per SVI step.
    tol, patience, smoothing : float, int, float
        The stopping rule (:class:`~ldhmm.inference.monitor.SmoothedPatience`): stop after
        ``patience`` epochs in which the exponentially smoothed ELBO per token did not rise by
        ``tol`` relative. The defaults (0.5, 10) suit a guide with a closed-form local step,
        whose curve is flat after a few epochs; a guide without one climbs slowly through
        noisy epoch estimates and wants ``patience=30, smoothing=0.9``
        (docs/writing-a-variant.md).
    refresh_locals : bool
        In the fit, set each minibatch's local rows to the guide's ``local_start(batch)`` before
        every step, if it has one (the local step in closed form; see
        :func:`ldhmm.inference.svi.svi_fit.fit_svi`); False: one Adam step per row and visit.
    score_epochs : int
        Epochs at most of fitting the local parameters of sequences to score (same rule); 0
        scores at the guide's starting point (e.g. the closed-form PF ``q(theta)`` of
        :func:`ldhmm.models.pyro_model.ldhmm_pf_offsets`).
    score_batch_size : int
        Minibatch size when scoring (globals frozen, so only memory limits it).
    score_draws : int
        Monte Carlo draws per sequence of ``score_samples``.
    seed : int
    verbose : bool
        Progress bars.
    dtype : {"float64", "float32"}
    device : str or torch.device
        Where torch runs the fit and the scoring (:func:`ldhmm.inference.svi.device.as_device`):
        ``"cpu"`` (the default, and the tested one), or e.g. ``"cuda:0"``, passed through to
        torch untested. Not saved with the model (a model file is read where it is used).

    Attributes
    ----------
    params_ : dict of str to np.ndarray
        The fitted global parameters.
    param_state_ : dict
        Pyro's parameter-store state after the fit (global and local parameters).
    local_params_ : tuple of str
    elbo_history_ : np.ndarray
        Training ELBO estimate (nats, whole database) after each epoch.
    n_iter_ : int
        Epochs run.
    converged_ : bool
        The stopping rule was met (not ``max_epochs``).
    convergence_ : ldhmm.inference.monitor.ConvergenceReport
        How the fit stopped; ``str(convergence_)`` is the one-line stopping report.
    epoch_seconds_ : np.ndarray
    fit_seconds_ : float
    """

    name = "pyro"
    score_kind = "lower_bound"
    _not_config = ("verbose", "model", "guide", "init", "device")

    def __init__(
        self,
        model,
        guide="dirichlet",
        n_states: int = 2,
        n_symbols: int | None = None,
        init=None,
        batch_size: int | str = "auto",
        max_epochs: int = 1000,
        lr: float = 0.05,
        score_lr: float | None = None,
        num_particles: int = 1,
        tol: float = 1e-4,
        patience: int = 10,
        smoothing: float = 0.5,
        refresh_locals: bool = True,
        score_epochs: int = 200,
        score_batch_size: int = 256,
        score_draws: int = 64,
        seed: int = 0,
        verbose: bool = False,
        dtype: str = "float64",
        device="cpu",
    ):
        super().__init__(n_states, seed)
        if not callable(model):
            raise ValueError(f"model must be a callable Pyro model, got {model!r}")
        if isinstance(guide, str) and guide not in GUIDES:
            raise ValueError(
                f"guide must be one of {GUIDES}, an AutoGuide class or a callable, got {guide!r}"
            )
        if isinstance(guide, AutoGuide):
            raise ValueError(
                "pass the AutoGuide class (or functools.partial of it), not an instance: the route "
                "builds one per data set, so that held-out sequences get their own local parameters"
            )
        if not isinstance(guide, str) and not callable(guide):
            raise ValueError(f"guide must be a string, an AutoGuide class or a callable, got {guide!r}")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
        for label, value in (
            ("batch_size", 1 if batch_size == "auto" else batch_size),
            ("max_epochs", max_epochs),
            ("num_particles", num_particles),
            ("score_batch_size", score_batch_size),
            ("score_draws", score_draws),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{label} must be an integer >= 1, got {value!r}")
        if (
            isinstance(score_epochs, bool)
            or not isinstance(score_epochs, (int, np.integer))
            or score_epochs < 0
        ):
            raise ValueError(f"score_epochs must be an integer >= 0, got {score_epochs!r}")
        for label, value in (("lr", lr), ("score_lr", lr if score_lr is None else score_lr)):
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{label} must be finite and > 0, got {value}")
        SmoothedPatience(tol, patience, smoothing)  # checks them
        self.model = model
        self.guide = guide
        self.n_symbols = check_n_symbols(n_symbols)
        self.init = init
        self.batch_size = batch_size if batch_size == "auto" else int(batch_size)
        self.max_epochs = int(max_epochs)
        self.lr = float(lr)
        self.score_lr = None if score_lr is None else float(score_lr)
        self.num_particles = int(num_particles)
        self.tol = float(tol)
        self.patience = int(patience)
        self.smoothing = float(smoothing)
        self.refresh_locals = bool(refresh_locals)
        self.score_epochs = int(score_epochs)
        self.score_batch_size = int(score_batch_size)
        self.score_draws = int(score_draws)
        self.verbose = verbose
        self.dtype = dtype
        self.device = str(as_device(device))

    @property
    def score_family(self) -> str:
        """The variational family of the held-out bound: the route's, with the hidden chain
        summed out exactly (``"z-summed"``), and the guide's family of ``q(theta)``: ``"Dirichlet
        mean field"`` (any :class:`~ldhmm.inference.svi.dirichlet_guide.DirichletMeanField`,
        whatever its start), ``"AutoNormal"``, an AutoGuide class's name, or a callable guide's
        own ``score_family`` (else its qualified name). Bounds are compared only within one
        family (:mod:`ldhmm.experiments.measures`)."""
        guide = self.guide
        if guide == "dirichlet" or isinstance(guide, DirichletMeanField):
            family = "Dirichlet mean field"
        elif guide == "normal":
            family = "AutoNormal"
        elif getattr(guide, "score_family", None):
            family = str(guide.score_family)
        else:
            target = guide.func if isinstance(guide, functools.partial) else guide
            family = getattr(target, "__qualname__", None) or type(target).__qualname__
        return f"z-summed, {family}"

    # ------------------------------------------------------------------ helpers
    @property
    def _torch_dtype(self):
        return _DTYPES[self.dtype]

    def _make_guide(self):
        """A fresh guide for one data set."""
        if self.guide == "dirichlet":
            return DirichletMeanField(self.model)
        if self.guide == "normal":
            return AutoNormal(self.model, create_plates=_sequence_plates)
        if _is_autoguide_class(self.guide):
            return self.guide(self.model, create_plates=_sequence_plates)
        return self.guide

    @property
    def _torch_device(self) -> torch.device:
        return torch.device(self.device)

    def _initial_values(self, seqs) -> dict:
        if self.init is None:
            return {}
        if callable(self.init):
            return dict(self.init(seqs, self.n_states, self.n_symbols_, self.seed, self._torch_dtype))
        return dict(self.init)

    def _score_lr(self, guide) -> float:
        if self.score_lr is not None:
            return self.score_lr
        started = getattr(guide, "init_offsets", None) is not None
        return self.lr / STARTED_SCORE_LR_RATIO if started else self.lr

    def _rule(self) -> SmoothedPatience:
        return SmoothedPatience(self.tol, self.patience, self.smoothing)

    # --------------------------------------------------------------------- fit
    def _fit(self, seqs, n_symbols):
        start = time.perf_counter()
        result = fit_svi(
            self.model,
            self._make_guide(),
            seqs,
            self.n_states,
            n_symbols,
            init=self._initial_values(seqs),
            batch_size=auto_batch_size(len(seqs)) if self.batch_size == "auto" else self.batch_size,
            lr=self.lr,
            num_particles=self.num_particles,
            rule=self._rule(),
            max_epochs=self.max_epochs,
            seed=self.seed,
            dtype=self._torch_dtype,
            refresh_locals=self.refresh_locals,
            progress=self.verbose,
            desc=f"SVI {type(self).__name__}",
            device=self._torch_device,
        )
        self.fit_seconds_ = time.perf_counter() - start
        self.params_ = {k: v.detach().cpu().double().numpy() for k, v in result.params.items()}
        self.param_state_ = result.param_state
        self.local_params_ = tuple(result.local_params)
        self.elbo_history_ = np.asarray(result.elbo_history)
        self.epoch_seconds_ = np.asarray(result.epoch_seconds)
        self._set_convergence(result.convergence)

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "param_state_")

    @classmethod
    def from_parameters(cls, model, guide, n_states: int, n_symbols: int, params: dict, **kwargs):
        """A model ready to score, with given global parameters (e.g. another fit's).

        Parameters
        ----------
        model, guide, n_states, n_symbols, **kwargs
            As for the constructor.
        params : dict of str to array
            Values of the model's ``pyro.param`` sites (constrained); the others keep the
            model's defaults.
        """
        est = cls(model, guide, n_states, n_symbols=n_symbols, **kwargs)
        dtype = est._torch_dtype
        probe = pad_batch([np.zeros(1, dtype=np.int64)], [0], 1, n_states, n_symbols, dtype)
        with pyro.get_param_store().scope() as state:
            poutine.block(poutine.trace(model).get_trace)(probe)
            values = {k: torch.as_tensor(np.asarray(v), dtype=dtype) for k, v in params.items()}
            unknown = sorted(set(values) - set_param_values(values))
            if unknown:
                raise ValueError(f"params names {unknown[0]!r}, which the model does not declare")
        est.param_state_ = state
        est.local_params_ = ()
        est.params_ = {
            k: torch.distributions.transform_to(state["constraints"][k])(v).detach().cpu().double().numpy()
            for k, v in state["params"].items()
        }
        est.n_symbols_ = int(n_symbols)
        return est

    # ------------------------------------------------------------------ model files
    def save(self, path, factory=None) -> None:
        """Write the fitted model to ``path``: JSON in the model-file format
        (:mod:`ldhmm.models.file_format`: its settings, fitted global parameters, ELBO history
        and training vocabulary), naming the code that rebuilds its Pyro model and guide.

        Parameters
        ----------
        path : str or Path
        factory : callable or str, optional
            ``factory(n_states, n_symbols, seed) -> PyroSequenceModel`` giving this model's Pyro
            model, guide and start (e.g. :func:`ldhmm.models.sticky.sticky_ldhmm`): a
            module-level function or its ``"package.module:factory"``. Default: the
            ``factory`` attribute that the shipped factories set.

        Raises
        ------
        ValueError
            No factory, or one without an import path (a lambda, a closure, ``__main__``).
        """
        self._check_fitted()
        factory = factory if factory is not None else getattr(self, "factory", None)
        if factory is None:
            raise ValueError(
                "save needs factory=: the 'package.module:factory' that rebuilds this model's Pyro "
                "model and guide (a model file holds parameters, never code)"
            )
        write_pyro_model_file(path, self, import_path_of(factory))

    @classmethod
    def load(cls, path, factory=None, guide=None):
        """A model saved by :meth:`save`, rebuilt by ``factory`` with its saved settings and
        parameters (:func:`ldhmm.models.file_format.read_pyro_model_file`).

        ``factory`` (callable or ``"package.module:factory"``) must be given: a model file
        never runs code by itself, and the error names the factory the file records.
        ``guide`` is accepted for the signature that :func:`ldhmm.modelfiles.load_model` calls
        and must be None.
        """
        if guide is not None:
            raise ValueError("a PyroSequenceModel is rebuilt by its factory: pass factory=, not guide=")
        return read_pyro_model_file(path, cls, factory)

    # ------------------------------------------------------------------ scoring
    def fit_local(self, sequences, seed: int | None = None):
        """Fit the local variational parameters of ``sequences`` with the global ones frozen.

        Returns
        -------
        guide, state, batches
            The guide built for these sequences, the parameter-store state (fitted globals
            and the new locals) and the sequences' scoring minibatches.
        """
        self._check_fitted()
        seqs = validate_sequences(sequences, n_symbols=self.n_symbols_)
        seed = self.seed if seed is None else int(seed)
        guide = self._make_guide()
        globals_ = [n for n in self.param_state_["params"] if n not in self.local_params_]
        with held_out_offsets(guide):
            result = self._fit_local_rows(guide, seqs, globals_, seed)
        batches = length_batches(
            seqs, self.score_batch_size, self.n_states, self.n_symbols_, self._torch_dtype, self._torch_device
        )
        return guide, result.param_state, batches

    def _fit_local_rows(self, guide, seqs, globals_, seed: int):
        """:meth:`fit_local`'s SVI run: the local rows of ``seqs`` with ``globals_`` frozen."""
        return fit_svi(
            self.model,
            guide,
            seqs,
            self.n_states,
            self.n_symbols_,
            param_state=copy_param_state(self.param_state_, globals_),
            frozen=globals_,
            refresh_locals=False,
            batch_size=self.score_batch_size,
            lr=self._score_lr(guide),
            num_particles=self.num_particles,
            rule=self._rule(),
            max_epochs=self.score_epochs,
            seed=seed,
            dtype=self._torch_dtype,
            progress=self.verbose,
            desc="SVI local fit",
            device=self._torch_device,
        )

    def _over_batches(self, sequences, seed: int, *passes) -> list:
        """Each of ``passes`` (``f(guide, batch)``) over every scoring batch of ``sequences``,
        one pass after the other, after :meth:`fit_local`, in its parameter-store state; a list
        per pass of ``(batch, result)``. Torch's random stream is seeded by ``seed`` at the start
        of every pass, so that a pass draws the same numbers whichever passes run before it."""
        guide, state, batches = self.fit_local(sequences, seed=seed)
        store = pyro.get_param_store()
        done = []
        with on_device(self._torch_device), store.scope(copy_param_state(state)), torch.random.fork_rng():
            for run in passes:
                torch.manual_seed(seed)
                done.append([(batch, run(guide, batch)) for batch in batches])
        return done

    def _log_weights(self, sequences, n_draws: int, seed: int, *more) -> np.ndarray | tuple:
        """``(n_draws, M)`` log importance weights; with ``more`` passes (see
        :meth:`_over_batches`, run after the weights on the same stream) also their results."""

        def weights(guide, batch):
            return sequence_log_weights(self.model, guide, batch, n_draws)

        done = self._over_batches(sequences, seed, weights, *more)
        out = np.empty((n_draws, len(sequences)))
        for batch, log_w in done[0]:
            out[:, batch.index.cpu().numpy()] = log_w.detach().cpu().double().numpy()
        return (out, *done[1:]) if more else out

    def _score_samples(self, seqs):
        return self._log_weights(seqs, self.score_draws, self.seed).mean(0)

    def log_marginal_is(self, sequences, n_samples: int = 100, seed: int = 0, diagnostics: bool = False):
        """Importance-sampled ``log p(x_m)`` per sequence, proposal the fitted local ``q(theta_m)``.

        ``logmeanexp_s [log p(x_m, theta_s) - log q(theta_s)]``: a stochastic lower bound on
        ``log p(x_m)`` that tightens with ``n_samples``.

        With ``diagnostics``, an :class:`~ldhmm.inference.ops.importance.ImportanceEstimate`: the
        same estimates with each one's standard error and effective sample size.

        Returns
        -------
        np.ndarray, shape (M,), or an ``ImportanceEstimate``
        """
        if n_samples < 1:
            raise ValueError(f"n_samples must be >= 1, got {n_samples}")
        seqs = self._validate_for_score(sequences)
        log_w = self._log_weights(seqs, int(n_samples), int(seed))
        estimate = np.logaddexp.reduce(log_w, axis=0) - math.log(n_samples)
        if not diagnostics:
            return estimate
        std_error, ess = importance_diagnostics(log_w)
        return ImportanceEstimate(estimate, std_error, ess, np.full(len(estimate), int(n_samples)))

    # ------------------------------------------------------- per-sequence posteriors
    def _summaries(self, sequences, with_elbo: bool = False):
        """Each sequence's :class:`~ldhmm.inference.svi.chain_draws.ChainSummary` over
        ``score_draws`` draws of its fitted ``q(theta_m)`` (seeded by ``seed``), in the input
        order as numpy arrays; with ``with_elbo`` also the ELBO of :meth:`score_samples` (its
        pass, seeded as there: the same numbers). The summaries are the same with or without."""
        seqs = self._validate_for_score(sequences)

        def summary(guide, batch):
            return chain_summary(self.model, guide, batch, self.score_draws)

        if with_elbo:
            log_w, done = self._log_weights(seqs, self.score_draws, self.seed, summary)
            elbo = log_w.mean(0)
        else:
            (done,) = self._over_batches(seqs, self.seed, summary)
        out = [[None] * len(seqs) for _ in ChainSummary._fields]
        for batch, part in done:
            values = [v.detach().cpu().double().numpy() for v in part]
            for row, (m, n) in enumerate(zip(batch.index.tolist(), batch.lengths.tolist())):
                for field, value in enumerate(values):
                    out[field][m] = (
                        value[row, :n] if ChainSummary._fields[field] == "state_marginals" else value[row]
                    )
        summaries = ChainSummary(*out)
        return (summaries, elbo) if with_elbo else summaries

    def posterior(self, sequences) -> dict:
        """Per-sequence posterior summaries under the route's variational posterior.

        After :meth:`fit_local`, Monte Carlo means over ``score_draws`` draws
        ``theta_m ~ q(theta_m)`` (seeded by ``seed``) of each sequence's hidden chain
        (:mod:`ldhmm.inference.svi.chain_draws`; whatever the model builds the chain from):
        ``E_q[pi_m]``, ``E_q[A_m]``, ``E_q[B_m]`` and the state marginals
        ``E_q[p(z_mn | x_m, theta_m)]`` (the hidden chain summed exactly given ``theta_m``).

        Returns
        -------
        dict with ``pi_mean`` (M, K), ``A_mean`` (M, K, K), ``B_mean`` (M, K, V),
        ``state_marginals`` (list of (N_m, K) arrays) and ``elbo`` (M,), the
        :meth:`score_samples` of the sequences.
        """
        summaries, elbo = self._summaries(sequences, with_elbo=True)
        out = {key: np.stack(getattr(summaries, key)) for key in ("pi_mean", "A_mean", "B_mean")}
        out["state_marginals"] = list(summaries.state_marginals)
        out["elbo"] = elbo
        return out

    def predict_next_proba(self, sequences) -> np.ndarray:
        """The next symbol's posterior predictive probability after each sequence.

        ``E_q[p(x_(N+1) = v | x_m, theta_m)] = E_q[sum_ij p(z_N = i | x_m, theta_m)
        A_m[i, j] B_m[j, v]]``, a Monte Carlo mean over ``score_draws`` draws of the fitted
        ``q(theta_m)`` (seeded by ``seed``).

        Returns
        -------
        np.ndarray, shape (M, V), float64, in the input order; rows sum to 1.
        """
        return np.stack(self._summaries(sequences).next_proba)

    def decode(self, sequences) -> list:
        """Most probable hidden-state path of each sequence under its posterior-mean chain
        (Viterbi, :func:`ldhmm.inference.viterbi_log`, with ``E_q[pi_m]``, ``E_q[A_m]``,
        ``E_q[B_m]`` of :meth:`posterior`), as the closed form decodes.

        Returns
        -------
        list of np.ndarray, each of shape (N_m,) and dtype int64, in the input order.
        """
        seqs = self._validate_for_score(sequences)
        summaries = self._summaries(seqs)
        paths = []
        for m, seq in enumerate(seqs):
            log_obs = gather_emissions(
                torch.as_tensor(np.log(summaries.B_mean[m])), torch.as_tensor(seq)[None]
            )
            best = viterbi_log(
                torch.as_tensor(np.log(summaries.pi_mean[m])),
                torch.as_tensor(np.log(summaries.A_mean[m])),
                log_obs,
                torch.ones(1, len(seq), dtype=torch.bool),
            )
            paths.extend(unpad_paths(best))
        return paths
