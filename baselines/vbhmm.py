"""VBHMM (MacKay 1997; Beal 2003): one pi, A, B for the database, Dirichlet posteriors, fixed priors.

A special case of LDHMM where every group is ``"shared"``
(:class:`ldhmm.inference.ParameterSharing`); fitted by the same variational EM code. The held-out
score of a sequence is its ELBO with the training posterior q(pi) q(A) q(B) held fixed: a lower
bound on the predictive ``log p(x | training data)`` (Jensen over q(theta)), not an exact
likelihood.
"""

from __future__ import annotations

from ..inference import VBHMM_SHARING
from ..models.fit_settings import FitSettings
from ..models.registry import register
from ..models.variant_hmm import VariantHMM

__all__ = ["VBHMM"]


@register(em_settings=("max_iter", "tol", "n_init"))
class VBHMM(VariantHMM):
    """Variational Bayesian HMM with fixed symmetric Dirichlet priors.

    The arguments from ``seed`` on are keyword-only; those from ``max_iter`` on are the fitting
    settings of every variant (:class:`ldhmm.models.fit_settings.FitSettings`). ``tol`` defaults
    to 1e-6 relative here, ``max_iter`` to 200: these likelihood surfaces are flat early on, and
    a looser stop would leave the baseline short of its optimum.

    Parameters
    ----------
    n_states : int
    n_symbols : int, optional
    prior_concentration : float
        Every entry of the fixed Dirichlet priors of pi, the rows of A and the rows of B.
    guide : "pf" (forward-backward, the standard VBHMM) or "ff"
    seed : int
    verbose : bool
        Progress bar over EM iterations.
    {fit_settings}
    """

    name = "VBHMM"
    score_kind = "lower_bound"
    # "thorough" (v4's restarts and refreshes): the v5 starts were measured on LDHMM only
    # (docs/performance.md, "Effort presets"); this baseline keeps the numbers of its tables.
    fit_defaults = FitSettings(max_iter=200, tol=1e-6, effort="thorough")

    def __init__(
        self,
        n_states,
        n_symbols=None,
        prior_concentration=1.0,
        guide="pf",
        *,
        seed=0,
        verbose=False,
        **settings,
    ):
        super().__init__(
            n_states,
            n_symbols,
            VBHMM_SHARING,
            guide,
            prior_concentration=prior_concentration,
            seed=seed,
            verbose=verbose,
            **settings,
        )

    @classmethod
    def _from_config(cls, config, sharing, guide):
        return cls(guide=guide, **config)

    def _set_params(self, params):
        super()._set_params(params)
        self.startprob_posterior_ = params.posterior["pi"].double().numpy()
        self.transmat_posterior_ = params.posterior["A"].double().numpy()
        self.emissionprob_posterior_ = params.posterior["B"].double().numpy()
