"""Sticky LDHMM: every row of the transition prior shares one shape, plus a learned self-transition boost.

What it adds, derived from LDHMM (:func:`ldhmm.models.pyro_model.ldhmm_sequence_model`, whose
building blocks it calls). LDHMM draws row ``i`` of each sequence's transition matrix from
``Dir(alpha_A[i])`` with a free ``K x K`` matrix ``alpha_A``. Adding ``kappa >= 0`` to its
diagonal alone would add nothing: ``alpha_A[i, i] + kappa`` is just another value of the free
entry ``alpha_A[i, i]``. Fox et al.'s sticky HDP-HMM (ICML 2008) ties the rows first: row ``i``
is drawn around one shared base measure, ``DP(gamma * base + kappa * delta_i)``. The finite
version here is

``A_m[i] ~ Dir(a + kappa e_i)``,   ``a`` in R_+^K shared by all rows, ``kappa > 0``

so that, a priori, ``E[A_m[i, i]] = (a_i + kappa) / (sum(a) + kappa)`` and ``E[A_m[i, j]] =
a_j / (sum(a) + kappa)`` for ``j != i``: where a sequence goes when it leaves a state is the
same distribution for every state, and ``kappa`` alone says how long sequences stay. That is
``K + 1`` transition hyper-parameters instead of ``K^2``, a special case of LDHMM (its
training bound cannot be higher at the optimum) that can generalize better when each
sequence says little about its own transitions; ``kappa`` is read directly as persistence.

``pi``, ``B`` and the summed-out hidden chain are LDHMM's. :func:`sticky_ldhmm` is the factory
the comparison harness calls (``ldhmm.compare({"sticky": sticky_ldhmm, "LDHMM-PF": None}, ...)``).
"""

from __future__ import annotations

import torch
from torch.distributions import constraints

from ..inference.svi.dirichlet_guide import DirichletMeanField
from .pyro_model import hyperparameter, ldhmm_init, ldhmm_pf_offsets, observe_hmm, sequence_parameters
from .pyro_sequence import PyroSequenceModel

__all__ = ["sticky_ldhmm_model", "sticky_init", "sticky_ldhmm"]


def sticky_ldhmm_model(batch):
    """LDHMM with the transition prior ``alpha_A = 1 a^T + kappa I``: params ``trans_base`` (K,)
    for ``a`` and ``kappa`` (scalar), the rest as in LDHMM."""
    K, V, dtype = batch.n_states, batch.n_symbols, batch.dtype
    alpha_pi = hyperparameter("alpha_pi", (K,), dtype)
    trans_base = hyperparameter("trans_base", (K,), dtype)
    kappa = hyperparameter("kappa", (), dtype, constraints.positive)
    beta = hyperparameter("beta", (K, V), dtype)
    alpha_A = trans_base.expand(K, K) + kappa * torch.eye(K, dtype=dtype)
    with batch.plate():
        observe_hmm(batch, *sequence_parameters(alpha_pi, alpha_A, beta))


def sticky_init(sequences, n_states, n_symbols, seed=0, dtype=torch.float64) -> dict:
    """LDHMM's starting point (:func:`ldhmm.models.pyro_model.ldhmm_init`), its ``alpha_A`` split
    into the column means (``trans_base``) and the mean excess of the diagonal (``kappa``)."""
    start = ldhmm_init(sequences, n_states, n_symbols, seed=seed, dtype=dtype)
    alpha_A = start.pop("alpha_A")
    base = alpha_A.mean(0)
    excess = (torch.diagonal(alpha_A) - base).mean()
    start["trans_base"] = base
    start["kappa"] = excess.clamp_min(0.1)
    return start


def sticky_ldhmm(n_states: int, n_symbols: int, seed: int = 0, **options) -> PyroSequenceModel:
    """The harness factory: a fresh, unfitted sticky LDHMM (options: those of :class:`PyroSequenceModel`).

    Its guide is the per-sequence Dirichlet mean field, each sequence started at its
    closed-form PF E-step under the current priors.
    """
    guide = DirichletMeanField(sticky_ldhmm_model, init_offsets=ldhmm_pf_offsets)
    model = PyroSequenceModel(
        sticky_ldhmm_model, guide, n_states, n_symbols=n_symbols, init=sticky_init, seed=seed, **options
    )
    model.factory = f"{__name__}:sticky_ldhmm"  # what model.save records, to rebuild it on load
    return model
