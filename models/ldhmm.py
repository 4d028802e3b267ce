"""The LDHMM estimator users call (scikit-learn conventions).

>>> from ldhmm import LDHMM
>>> model = LDHMM(n_states=3, guide="pf", seed=0).fit(train)       # doctest: +SKIP
>>> model.score_samples(test)        # per-sequence held-out ELBO, nats   # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np
import torch

from ..data.lazy_modules import LazyModule
from ..inference import LDHMM_SHARING, VariantParameters
from ..inference.monitor import SmoothedPatience
from .registry import EM_SETTINGS, register
from .variant_hmm import VariantHMM

# The SVI route and sampling need Pyro; fitting in closed form and scoring do not, and a command
# that only scores does not load it (docs/performance.md, start-up).
svi_fit = LazyModule("..inference.svi.svi_fit", __package__)
dirichlet_guide = LazyModule("..inference.svi.dirichlet_guide", __package__)
minibatch = LazyModule("..inference.svi.minibatch", __package__)
pyro_model = LazyModule(".pyro_model", __package__)

__all__ = ["LDHMM", "SVI_BATCH_SIZE", "SVI_PATIENCE"]

#: Minibatch size of ``optimizer="svi"`` (``"auto"``: :func:`ldhmm.inference.svi.minibatch.auto_batch_size`
#: of the data) and its patience (epochs).
SVI_BATCH_SIZE = "auto"
SVI_PATIENCE = 10


class LDHMM(VariantHMM):
    """Latent Dirichlet HMM: per-sequence pi, A, B drawn from learned Dirichlet priors.

    The arguments from ``seed`` on are keyword-only; those from ``max_iter`` on are the fitting
    settings of every variant (:class:`ldhmm.models.fit_settings.FitSettings`). By default
    (``init="auto"``) an FF fit starts from the PF fit, with its restarts.

    Parameters
    ----------
    n_states : int
        K >= 1.
    n_symbols : int, optional
        V; inferred from the training data when omitted.
    guide : "pf", "ff" or a guide object
        ``"pf"``: q(Z) a Markov chain by forward-backward; ``"ff"``: fully factorized q(Z).
    seed : int
        Seeds the asymmetric initialization.
    verbose : bool
        Progress bar.
    optimizer : {"cavi", "svi"}
        ``"cavi"``: closed-form variational EM (default). ``"svi"``: the Pyro route
        (:func:`ldhmm.inference.svi.svi_fit.fit_svi`) with
        :func:`ldhmm.models.pyro_model.ldhmm_sequence_model` (hidden states summed out by the
        forward algorithm) and the per-sequence Dirichlet guide
        (:class:`ldhmm.inference.svi.dirichlet_guide.DirichletMeanField`, each sequence started at
        its closed-form PF E-step, :func:`ldhmm.models.pyro_model.ldhmm_pf_offsets`), in length-sorted
        minibatches (:data:`SVI_BATCH_SIZE`: :func:`ldhmm.inference.svi.minibatch.auto_batch_size`), with
        the closed-form local step before every step, from the closed form's first starting
        point; it stops when the smoothed training ELBO per token has not risen by ``tol``
        (relative) for :data:`SVI_PATIENCE` epochs (:class:`ldhmm.inference.monitor.SmoothedPatience`).
        Only the hyper-parameters are kept: ``score_samples`` and the other methods then run
        the closed-form E-step of ``guide`` with them.
    svi_steps, svi_lr : int, float
        Epochs at most of the SVI route, and Adam's learning rate.
    emission_context : None, ``"previous"`` or int 1..8
        None (default): a position's emission row is its hidden state's. ``"previous"`` (the
        previous event) or an order n (the last n events, backed off to shorter histories): the
        constructor returns :class:`ldhmm.models.contextual.ContextualLDHMM`, whose rows are
        chosen by (state, context), with ``max_iter``, ``tol``, ``n_init``, ``seed`` and the
        contextual options (``min_context_count``, ``context_smoothing``, ``min_concentration``)
        given here (:mod:`ldhmm.models.emission_context`; PF family, closed form).
    {fit_settings}

    Attributes
    ----------
    alpha_pi_ : ndarray, shape (K,)
    alpha_A_ : ndarray, shape (K, K)
    beta_ : ndarray, shape (K, V)
    elbo_history_ : ndarray
        Total training ELBO after each EM iteration (each SVI epoch with ``optimizer="svi"``).
    restart_elbo_histories_ : list of ndarray
        The training ELBO per EM iteration of every restart, in the order of
        ``restart_seeds()`` (of the PF fit that an FF fit starts from); empty for a fit from
        ``init_params`` and for the SVI route.
    kept_restart_ : int or None
        Which restart the fit kept (highest final ELBO); None when it kept none.
    start_elbo_histories_ : dict of str to ndarray
        The training ELBO per EM iteration of every run from a start that is no random
        restart: ``"seeded"`` (the symbol-seeded start), ``"hmm"`` (from the database-level
        HMM); ``start_kind_`` names the kept run's start.
    training_data_ : dict
        What it was fitted on: ``source`` (the file, or ``"Python data"``), ``n_sequences``,
        ``n_tokens`` and ``sha256`` (:func:`ldhmm.data.fingerprint.content_sha256` of the coded
        sequences; None for a partitioned data set read by its workers).
    n_iter_ : int
        EM iterations (SVI epochs) run.
    converged_ : bool
        The stopping rule was met (not ``max_iter`` / ``svi_steps``).
    convergence_ : ldhmm.inference.monitor.ConvergenceReport
        How the fit stopped (``reason``: ``"converged"``, ``"max_iter"`` or ``"non_finite"``);
        ``str(convergence_)`` is the one-line report that ``ldhmm fit`` prints.
    """

    name = "LDHMM"
    score_kind = "lower_bound"

    def __init__(
        self,
        n_states: int,
        n_symbols: int | None = None,
        guide="pf",
        *,
        seed: int = 0,
        verbose: bool = False,
        optimizer: str = "cavi",
        svi_steps: int = 500,
        svi_lr: float = 0.05,
        emission_context=None,
        **settings,
    ):
        super().__init__(
            n_states,
            n_symbols,
            LDHMM_SHARING,
            guide,
            seed=seed,
            verbose=verbose,
            emission_context=emission_context,
            **settings,
        )
        if optimizer not in ("cavi", "svi"):
            raise ValueError(f"optimizer must be 'cavi' or 'svi', got {optimizer!r}")
        self.optimizer = optimizer
        self.svi_steps = svi_steps
        self.svi_lr = svi_lr

    @property
    def name_with_guide(self) -> str:
        return f"LDHMM-{getattr(self.guide, 'name', 'custom').upper()}"

    def _fit(
        self,
        seqs,
        n_symbols,
        init_params: VariantParameters | None = None,
        grown: tuple = (),
        checkpoint=None,
    ):
        if self.optimizer == "svi":
            if grown:
                raise ValueError("grown starts (fit_path) need optimizer='cavi'")
            if checkpoint is not None:
                raise ValueError("checkpoint= needs optimizer='cavi'")
            self._fit_svi(seqs, n_symbols, init_params)
            return
        super()._fit(seqs, n_symbols, init_params, grown, checkpoint)

    def _fit_svi(self, seqs, n_symbols, init_params: VariantParameters | None):
        params = init_params if init_params is not None else self.initial_parameters(seqs)
        model = pyro_model.ldhmm_sequence_model
        floor = 2 * dirichlet_guide.SVI_MIN_CONCENTRATION
        result = svi_fit.fit_svi(
            model,
            dirichlet_guide.DirichletMeanField(model, init_offsets=pyro_model.ldhmm_pf_offsets),
            seqs,
            self.n_states,
            n_symbols,
            init={
                name: params.prior[g].clamp_min(floor)
                for name, g in (("alpha_pi", "pi"), ("alpha_A", "A"), ("beta", "B"))
            },
            batch_size=minibatch.auto_batch_size(len(seqs)) if SVI_BATCH_SIZE == "auto" else SVI_BATCH_SIZE,
            lr=self.svi_lr,
            rule=SmoothedPatience(tol=self.tol, patience=SVI_PATIENCE),
            max_epochs=self.svi_steps,
            seed=self.seed,
            dtype=self.torch_dtype,
            progress=self.verbose,
            desc="SVI LDHMM",
        )
        learned = {
            "pi": result.params["alpha_pi"],
            "A": result.params["alpha_A"],
            "B": result.params["beta"],
        }
        self._set_params(VariantParameters(LDHMM_SHARING, prior=learned))
        self.elbo_history_ = np.asarray(result.elbo_history)
        self.restart_elbo_histories_, self.kept_restart_ = [], None  # one SVI run, no restarts
        self.epoch_seconds_ = np.asarray(result.epoch_seconds)
        self._set_convergence(result.convergence)

    def _set_params(self, params):
        super()._set_params(params)
        self.alpha_pi_ = params.prior["pi"].double().numpy()
        self.alpha_A_ = params.prior["A"].double().numpy()
        self.beta_ = params.prior["B"].double().numpy()

    @classmethod
    def _from_config(cls, config, sharing, guide):
        if sharing != LDHMM_SHARING:
            raise ValueError("the file holds a model variant that is not LDHMM; load it with its class")
        return cls(guide=guide, **config)

    @classmethod
    def from_hyperparameters(cls, alpha_pi, alpha_A, beta, guide="pf", **kwargs) -> LDHMM:
        """A model ready to score or sample, with given hyper-parameters.

        Parameters
        ----------
        alpha_pi : array, shape (K,)
        alpha_A : array, shape (K, K)
        beta : array, shape (K, V)
        guide : "pf", "ff" or guide object
        **kwargs : other constructor arguments

        Raises
        ------
        ValueError
            On inconsistent shapes or non-positive / non-finite entries.
        """
        a_pi = np.asarray(alpha_pi, dtype=np.float64)
        a_A = np.asarray(alpha_A, dtype=np.float64)
        b = np.asarray(beta, dtype=np.float64)
        if a_pi.ndim != 1 or a_A.shape != (a_pi.size, a_pi.size) or b.ndim != 2 or b.shape[0] != a_pi.size:
            raise ValueError(
                f"shapes do not fit: alpha_pi {a_pi.shape}, alpha_A {a_A.shape}, beta {b.shape}; "
                "expected (K,), (K, K), (K, V)"
            )
        for label, arr in (("alpha_pi", a_pi), ("alpha_A", a_A), ("beta", b)):
            if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
                raise ValueError(f"{label} must be finite and > 0")
        n_symbols = kwargs.pop("n_symbols", None)
        if n_symbols is not None and n_symbols != b.shape[1]:
            raise ValueError(f"n_symbols={n_symbols!r} does not match beta's {b.shape[1]} columns")
        model = cls(a_pi.size, n_symbols=b.shape[1], guide=guide, **kwargs)
        dtype = model.torch_dtype
        params = VariantParameters(
            LDHMM_SHARING,
            prior={
                "pi": torch.tensor(a_pi, dtype=dtype),
                "A": torch.tensor(a_A, dtype=dtype),
                "B": torch.tensor(b, dtype=dtype),
            },
        )
        model._set_params(params)
        return model

    def sample(
        self, n_sequences: int, length=None, lengths=None, seed: int = 0, return_latents: bool = False
    ):
        """Draw a synthetic database from the fitted (or given) hyper-parameters.

        Parameters
        ----------
        n_sequences : int
        length : int, optional
            One length for every sequence.
        lengths : array of int, optional
            A length per sequence (``len(lengths) == n_sequences``).
        seed : int
        return_latents : bool
            Also return per-sequence ``pi``, ``A``, ``B`` and hidden states.

        Returns
        -------
        list of np.ndarray (and a dict of latents when asked)
        """
        self._check_fitted()
        if n_sequences < 1:
            raise ValueError(f"n_sequences must be >= 1, got {n_sequences}")
        if (length is None) == (lengths is None):
            raise ValueError("give exactly one of length= or lengths=")
        if lengths is None:
            if int(length) < 1:
                raise ValueError(f"length must be >= 1, got {length}")
            lengths = np.full(n_sequences, int(length))
        lengths = np.asarray(lengths)
        if lengths.shape != (n_sequences,):
            raise ValueError(f"lengths has shape {lengths.shape}, expected ({n_sequences},)")
        p = self.params_.prior
        return pyro_model.sample_database(
            p["pi"].double(),
            p["A"].double(),
            p["B"].double(),
            lengths,
            seed=seed,
            return_latents=return_latents,
        )


# The harness compares the two variational families of q(Z) as two models; each takes every
# harness-wide setting.
register(LDHMM, name="LDHMM-FF", options={"guide": "ff"}, em_settings=EM_SETTINGS)
register(LDHMM, name="LDHMM-PF", options={"guide": "pf"}, em_settings=EM_SETTINGS)
