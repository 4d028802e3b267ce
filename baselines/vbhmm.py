"""VBHMM (MacKay 1997; Beal 2003): one pi, A, B for the database, Dirichlet posteriors, fixed priors.

A special case of LDHMM where every group is ``"shared"``
(:class:`ldhmm.inference.ParameterSharing`); fitted by the same variational EM code. The held-out
score of a sequence is its ELBO with the training posterior q(pi) q(A) q(B) held fixed: a lower
bound on the predictive ``log p(x | training data)`` (Jensen over q(theta)), not an exact
likelihood.
"""

from __future__ import annotations

from ..inference import VBHMM_SHARING
from ..models.registry import register
from ..models.variant_hmm import VariantHMM

__all__ = ["VBHMM"]


@register(em_settings=("max_iter", "tol", "n_init"))
class VBHMM(VariantHMM):
    """Variational Bayesian HMM with fixed symmetric Dirichlet priors.

    Parameters
    ----------
    n_states : int
    n_symbols : int, optional
    prior_concentration : float
        Every entry of the fixed Dirichlet priors of pi, the rows of A and the rows of B.
    guide : "pf" (forward-backward, the standard VBHMM) or "ff"
    max_iter, tol, seed, verbose, dtype : see :class:`ldhmm.models.variant_hmm.VariantHMM`
        (``tol`` defaults to 1e-6 relative: these likelihood surfaces are flat early on, and a
        looser stop would leave the baseline short of its optimum)
    """

    name = "VBHMM"
    score_kind = "lower_bound"

    def __init__(
        self,
        n_states,
        n_symbols=None,
        prior_concentration=1.0,
        guide="pf",
        max_iter=200,
        tol=1e-6,
        seed=0,
        verbose=False,
        dtype="float64",
        **kwargs,
    ):
        super().__init__(
            n_states,
            n_symbols,
            VBHMM_SHARING,
            guide=guide,
            max_iter=max_iter,
            tol=tol,
            prior_concentration=prior_concentration,
            seed=seed,
            verbose=verbose,
            dtype=dtype,
            **kwargs,
        )

    @classmethod
    def _from_config(cls, config, sharing, guide):
        return cls(guide=guide, **config)

    def _set_params(self, params):
        super()._set_params(params)
        self.startprob_posterior_ = params.posterior["pi"].double().numpy()
        self.transmat_posterior_ = params.posterior["A"].double().numpy()
        self.emissionprob_posterior_ = params.posterior["B"].double().numpy()
