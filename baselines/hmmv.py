"""HMMV (Blasiak & Rangwala, IJCAI 2011): per-sequence transition matrices, shared pi and B.

A special case of LDHMM (:class:`ldhmm.inference.ParameterSharing`): A is ``"sequence"`` with a
fixed Dirichlet prior, pi and B are database-level point estimates. The held-out score is the
per-sequence ELBO (a lower bound: A_m is integrated out variationally).
"""

from __future__ import annotations

from ..inference import HMMV_SHARING, ParameterSharing
from ..models.fit_settings import FitSettings
from ..models.registry import register
from ..models.variant_hmm import VariantHMM

__all__ = ["HMMV"]


@register(em_settings=("max_iter", "tol", "n_init"))
class HMMV(VariantHMM):
    """HMM variant with one transition matrix per sequence drawn from a Dirichlet prior.

    The arguments from ``seed`` on are keyword-only; those from ``max_iter`` on are the fitting
    settings of every variant (:class:`ldhmm.models.fit_settings.FitSettings`). ``tol`` defaults
    to 1e-6 relative here, ``max_iter`` to 200: these likelihood surfaces are flat early on, and
    a looser stop would leave the baseline short of its optimum.

    Parameters
    ----------
    n_states : int
    n_symbols : int, optional
    prior_concentration : float
        Entry of the fixed Dirichlet prior on each row of A_m.
    learn_prior : bool
        Learn the prior on A by Newton-Raphson as LDHMM does (an extension; the original HMMV
        keeps it fixed).
    pseudocount : float
        MAP smoothing of the point estimates of pi and B (0 = maximum likelihood). A small
        positive value keeps held-out symbols unseen in training from scoring -inf.
    guide : "pf", "ff" or a guide object
        Variational family of q(Z) (see :mod:`ldhmm.inference.cavi.guides`).
    seed : int
    verbose : bool
        Progress bar over EM iterations.
    sharing : ignored
        Accepted so that ``HMMV(**model.get_params())`` works; the sharing is HMMV's, with
        ``learn_prior`` and ``pseudocount``.
    {fit_settings}
    """

    name = "HMMV"
    score_kind = "lower_bound"
    # learn_prior and pseudocount live in the sharing, which a model file records in its own
    # section (``_from_config`` reads them back from there)
    _not_config = ("sharing", "verbose", "learn_prior", "pseudocount")
    # "thorough" (v4's restarts and refreshes): the v5 starts were measured on LDHMM only
    # (docs/performance.md, "Effort presets"); this baseline keeps the numbers of its tables.
    fit_defaults = FitSettings(max_iter=200, tol=1e-6, effort="thorough")

    def __init__(
        self,
        n_states,
        n_symbols=None,
        prior_concentration=1.0,
        learn_prior=False,
        pseudocount=1e-3,
        guide="pf",
        *,
        seed=0,
        verbose=False,
        sharing=None,
        **settings,
    ):
        sharing = ParameterSharing(
            pi=HMMV_SHARING.pi,
            A=HMMV_SHARING.A,
            B=HMMV_SHARING.B,
            learn_prior=learn_prior,
            pseudocount=pseudocount,
        )
        super().__init__(
            n_states,
            n_symbols,
            sharing,
            guide,
            prior_concentration=prior_concentration,
            seed=seed,
            verbose=verbose,
            **settings,
        )

    @property
    def learn_prior(self) -> bool:
        """Whether the prior on A is learned (stored in ``sharing``)."""
        return self.sharing.learn_prior

    @property
    def pseudocount(self) -> float:
        """MAP smoothing of the point estimates of pi and B (stored in ``sharing``)."""
        return self.sharing.pseudocount

    @classmethod
    def _from_config(cls, config, sharing, guide):
        return cls(guide=guide, learn_prior=sharing.learn_prior, pseudocount=sharing.pseudocount, **config)

    def _set_params(self, params):
        super()._set_params(params)
        self.startprob_ = params.log_point["pi"].exp().double().numpy()
        self.emissionprob_ = params.log_point["B"].exp().double().numpy()
        self.alpha_A_ = params.prior["A"].double().numpy()
