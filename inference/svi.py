"""The Pyro route: the same model and guides, trained or evaluated with ``pyro.infer``.

- :func:`fit_svi` learns the hyper-parameters (``pyro.param`` sites ``alpha_pi``, ``alpha_A``,
  ``beta``) and the guide's variational parameters jointly by stochastic gradient steps on
  ``TraceGraph_ELBO``. It proves the Pyro declaration is a real model; the closed-form optimizer
  (:mod:`ldhmm.inference.variational_em`) is far faster and is the default.
- :func:`guide_init_from_state` turns a closed-form E-step into the guide's Pyro parameters and
  the matching closed-form ELBO, so that Pyro's Monte Carlo ``Trace_ELBO`` can check the closed
  form (see ``tests/test_pyro_elbo.py``).

Everything runs on one padded batch: this path is for small databases.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyro
import torch
from pyro.infer import SVI, TraceGraph_ELBO
from pyro.optim import Adam
from tqdm.auto import tqdm

from .batch import Bucket, make_buckets
from .e_step import BucketState
from .ops.chain import emission_potentials, expected_complete_log_lik
from .ops.dirichlet import kl_dirichlet
from .parameters import VariantParameters
from .variants import LDHMM_SHARING

__all__ = ["pad_database", "fit_svi", "SVIResult", "guide_init_from_state"]


def pad_database(sequences) -> Bucket:
    """All sequences in one padded bucket, in their original order."""
    (bucket,) = make_buckets(sequences, max_cells=1 << 62, max_padding_ratio=float("inf"))
    order = torch.argsort(bucket.index)
    return Bucket(
        torch.arange(bucket.n_sequences), bucket.tokens[order], bucket.lengths[order], bucket.mask[order]
    )


@dataclass
class SVIResult:
    """Outcome of :func:`fit_svi`: learned parameters and the ELBO estimate after every step."""

    params: VariantParameters
    elbo_history: list


def fit_svi(
    model, guide, sequences, params: VariantParameters, n_steps=500, lr=0.05, seed=0, progress=False
) -> SVIResult:
    """Fit LDHMM by stochastic variational inference in Pyro, as ``pyro.infer.SVI(model, guide, ...)``.

    Parameters
    ----------
    model : callable
        A Pyro model ``model(tokens, lengths, alpha_pi, alpha_A, beta)`` that declares the
        hyper-parameters as ``pyro.param`` sites ``alpha_pi``, ``alpha_A``, ``beta`` (the
        arguments are their initial values), e.g.
        :func:`ldhmm.models.pyro_model.learned_ldhmm_model`.
    guide : PFGuide, FFGuide or a :class:`ldhmm.inference.guides.ChainGuide` subclass
    sequences : list of int64 arrays (validated)
    params : VariantParameters
        Starting hyper-parameters (LDHMM sharing).
    n_steps : int
    lr : float
        Adam learning rate.
    seed : int
    progress : bool

    Returns
    -------
    SVIResult
    """
    if params.sharing != LDHMM_SHARING:
        raise ValueError("the SVI path is implemented for LDHMM sharing only")
    bucket = pad_database(sequences)
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    args = (bucket.tokens, bucket.lengths, params.prior["pi"], params.prior["A"], params.prior["B"])
    svi = SVI(model, guide, Adam({"lr": lr}), loss=TraceGraph_ELBO())
    history = []
    steps = range(n_steps)
    if progress:
        steps = tqdm(steps, desc="SVI", leave=False)
    for _ in steps:
        history.append(-float(svi.step(*args)))
    store = pyro.get_param_store()
    learned = VariantParameters(
        LDHMM_SHARING,
        prior={
            "pi": store["alpha_pi"].detach().clone(),
            "A": store["alpha_A"].detach().clone(),
            "B": store["beta"].detach().clone(),
        },
    )
    return SVIResult(learned, history)


def guide_init_from_state(guide, params: VariantParameters, bucket: Bucket, state: BucketState):
    """Pyro parameter values that make ``guide`` equal a closed-form q, and that q's ELBO.

    One more q(Z) update is made from ``E log theta`` of the stored Dirichlet posteriors, so that
    q(Z) and q(theta) are exactly the ones whose ELBO is returned.

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
