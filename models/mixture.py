"""A mixture of LDHMM priors: C user types, each with its own ``alpha_pi``, ``alpha_A``, ``beta``.

What it adds, derived from LDHMM (:func:`ldhmm.models.pyro_model.ldhmm_sequence_model`, whose
building blocks it calls). LDHMM draws every sequence's parameters
``theta_m = (pi_m, A_m, B_m)`` from one product of Dirichlets, a unimodal prior: sequences vary
around one typical behaviour. Here a sequence first draws a type, then its parameters from that type's prior,

``c_m ~ Cat(w)``,   ``pi_m ~ Dir(alpha_pi[c_m])``,   ``A_m[i] ~ Dir(alpha_A[c_m, i])``,
``B_m[i] ~ Dir(beta[c_m, i])``,   ``x_m ~ HMM(pi_m, A_m, B_m)``

so that the prior of ``theta_m``, with the type summed out, is the mixture

``p(theta_m) = sum_c w_c Dir(pi_m | alpha_pi[c]) prod_i Dir(A_m[i] | alpha_A[c, i]) Dir(B_m[i] | beta[c, i])``

which can put its mass around several typical behaviours at once (say, visitors who browse and
visitors who buy). ``C = 1`` is LDHMM. The type is never sampled: ``c_m`` is marked
``infer={"enumerate": "parallel"}``, so ``TraceEnum_ELBO`` sums it out exactly in the bound
``E_q[log p(x_m | theta_m) + log sum_c w_c p(theta_m | c) - log q(theta_m)]``, as the forward
algorithm sums out the hidden chain; the per-sequence scores do the same. Given ``theta_m``,
type ``c`` has posterior weight ``w_c p(theta_m | c) / p(theta_m)``. The weights ``w`` are a
learned simplex; each type's priors start from a differently seeded LDHMM starting point
(identical types would stay identical).

:func:`mixture_ldhmm` is the factory the comparison harness calls.
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

from ..inference.svi.dirichlet_guide import DirichletMeanField
from .pyro_model import ldhmm_init, ldhmm_pf_offsets, ldhmm_priors, observe_hmm, sequence_parameters
from .pyro_sequence import PyroSequenceModel

__all__ = ["N_TYPES", "mixture_ldhmm_model", "mixture_init", "mixture_ldhmm"]

#: Number of user types C of :func:`mixture_ldhmm` unless told.
N_TYPES = 2


def mixture_ldhmm_model(batch, n_types: int = N_TYPES):
    """LDHMM with a C-component mixture prior; params ``type_weights`` (C,), ``alpha_pi`` (C, K),
    ``alpha_A`` (C, K, K), ``beta`` (C, K, V); the type ``c`` is enumerated, not sampled."""
    C, dtype = n_types, batch.dtype
    weights = pyro.param(
        "type_weights", lambda: torch.full((C,), 1.0 / C, dtype=dtype), constraint=constraints.simplex
    )
    alpha_pi, alpha_A, beta = ldhmm_priors(batch, leading=(C,))
    with batch.plate():
        c = pyro.sample("type", dist.Categorical(weights), infer={"enumerate": "parallel"})
        observe_hmm(batch, *sequence_parameters(alpha_pi[c], alpha_A[c], beta[c]))


def mixture_init(sequences, n_states, n_symbols, seed=0, dtype=torch.float64, n_types: int = N_TYPES) -> dict:
    """Type ``c`` starts at LDHMM's starting point for seed ``seed + c``; equal weights."""
    starts = [ldhmm_init(sequences, n_states, n_symbols, seed=seed + c, dtype=dtype) for c in range(n_types)]
    out = {name: torch.stack([s[name] for s in starts]) for name in ("alpha_pi", "alpha_A", "beta")}
    out["type_weights"] = torch.full((n_types,), 1.0 / n_types, dtype=dtype)
    return out


def mixture_ldhmm(n_states: int, n_symbols: int, seed: int = 0, **options) -> PyroSequenceModel:
    """The harness factory: a fresh, unfitted mixture of ``N_TYPES`` LDHMM priors.

    Its guide is the per-sequence Dirichlet mean field over ``pi``, ``A``, ``B`` (base: the
    entrywise minimum of the types' priors), each sequence started at its closed-form PF
    E-step under that base.
    """
    guide = DirichletMeanField(mixture_ldhmm_model, init_offsets=ldhmm_pf_offsets)
    model = PyroSequenceModel(
        mixture_ldhmm_model, guide, n_states, n_symbols=n_symbols, init=mixture_init, seed=seed, **options
    )
    model.factory = f"{__name__}:mixture_ldhmm"  # what model.save records, to rebuild it on load
    return model
