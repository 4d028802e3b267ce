"""The LDHMM generative model, declared in Pyro.

For each sequence m (a ``pyro.plate`` over sequences)::

    pi_m  ~ Dir(alpha_pi)                       site "pi",  shape (M, K)
    A_m   ~ prod_i Dir(alpha_A[i])              site "A",   shape (M, K, K)
    B_m   ~ prod_i Dir(beta[i])                 site "B",   shape (M, K, V)
    z_m1  ~ Cat(pi_m),  z_mn ~ Cat(A_m[z_m(n-1)])   sites "z_0" .. "z_(T-1)" (pyro.markov)
    x_mn  ~ Cat(B_m[z_mn])                      sites "x_0" .. "x_(T-1)"

Variable lengths are handled by padding to T and masking every position ``n >= N_m``
(``poutine.mask``), so padded sites contribute nothing to any log-density. The same function
samples synthetic databases (``tokens=None``) and serves Pyro's ELBO estimators with the guides
of :mod:`ldhmm.inference.cavi.guides`, whose sample sites carry the same names.

:func:`ldhmm_sequence_model` is the same model for the SVI route (:mod:`ldhmm.inference.svi.svi_fit`):
called with one :class:`~ldhmm.inference.svi.minibatch.SequenceBatch`, it declares the
hyper-parameters as ``pyro.param`` sites and sums the hidden states out by the forward
algorithm instead of sampling them, so its only latent sites are ``pi``, ``A``, ``B``. It is
the template of a variant (docs/writing-a-variant.md); :func:`ldhmm_init` gives its seeded
starting point, the closed-form fit's, and :func:`ldhmm_pf_offsets` starts the per-sequence
Dirichlet guide at the closed-form PF E-step's ``q(theta_m)``.
"""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.ops.indexing import Vindex

from ..inference import LDHMM_SHARING, Bucket, PFGuide, VariantParameters, VariationalEM, init_parameters
from ..inference.svi.dirichlet_guide import CONCENTRATION, SVI_MIN_CONCENTRATION
from ..inference.svi.hmm_distribution import MaskedCategoricalHMM
from ..inference.svi.minibatch import SequenceBatch

__all__ = ["ldhmm_model", "ldhmm_sequence_model", "ldhmm_init", "ldhmm_pf_offsets", "sample_database"]


def ldhmm_model(tokens, lengths, alpha_pi, alpha_A, beta, init: dict | None = None):
    """Pyro model of a padded database.

    Parameters
    ----------
    tokens : LongTensor, shape (M, T), or None
        Observed symbols (padding arbitrary), or None to sample them.
    lengths : LongTensor, shape (M,)
        ``1 <= N_m <= T``.
    alpha_pi : Tensor, shape (K,)
    alpha_A : Tensor, shape (K, K)
    beta : Tensor, shape (K, V)
    init : ignored
        Accepted so that model and guide share one signature.

    Returns
    -------
    LongTensor, shape (M, T): the observed or sampled symbols (padding: whatever was sampled).
    """
    lengths = torch.as_tensor(lengths)
    M = lengths.shape[0]
    T = int(lengths.max()) if tokens is None else tokens.shape[1]
    mask = torch.arange(T)[None, :] < lengths[:, None]
    xs = []
    with pyro.plate("sequences", M, dim=-1):
        pi = pyro.sample("pi", dist.Dirichlet(alpha_pi))
        A = pyro.sample("A", dist.Dirichlet(alpha_A).to_event(1))
        B = pyro.sample("B", dist.Dirichlet(beta).to_event(1))
        z = None
        for n in pyro.markov(range(T)):
            probs = pi if n == 0 else Vindex(A)[..., z, :]
            with poutine.mask(mask=mask[:, n]):
                z = pyro.sample(f"z_{n}", dist.Categorical(probs))
                x = pyro.sample(
                    f"x_{n}",
                    dist.Categorical(Vindex(B)[..., z, :]),
                    obs=None if tokens is None else tokens[:, n],
                )
            xs.append(x)
    return torch.stack(xs, dim=-1)


def ldhmm_sequence_model(batch: SequenceBatch):
    """LDHMM for the SVI route: hyper-parameters learned, hidden states summed out.

    For each sequence m of the batch (inside ``batch.plate()``)::

        pi_m ~ Dir(alpha_pi),  A_m[i] ~ Dir(alpha_A[i]),  B_m[i] ~ Dir(beta[i])
        x_m  ~ MaskedCategoricalHMM(pi_m, A_m, B_m)      log p(x_m | theta_m) by the forward algorithm

    Parameters
    ----------
    batch : SequenceBatch
        ``tokens`` (B, T), ``mask`` (B, T), K = ``n_states``, V = ``n_symbols``.

    Pyro sites: params ``alpha_pi`` (K,), ``alpha_A`` (K, K), ``beta`` (K, V) (at least
    :data:`~ldhmm.inference.svi.dirichlet_guide.SVI_MIN_CONCENTRATION`, where reparameterized draws
    stay in floating range; their default start is all ones, :func:`ldhmm_init` gives the
    fit's); samples ``pi`` (B, K), ``A`` (B, K, K), ``B`` (B, K, V), observed ``x`` (B, T).
    """
    K, V, dtype = batch.n_states, batch.n_symbols, batch.dtype
    alpha_pi = pyro.param("alpha_pi", lambda: torch.ones(K, dtype=dtype), constraint=CONCENTRATION)
    alpha_A = pyro.param("alpha_A", lambda: torch.ones(K, K, dtype=dtype), constraint=CONCENTRATION)
    beta = pyro.param("beta", lambda: torch.ones(K, V, dtype=dtype), constraint=CONCENTRATION)
    with batch.plate():
        pi = pyro.sample("pi", dist.Dirichlet(alpha_pi))
        A = pyro.sample("A", dist.Dirichlet(alpha_A).to_event(1))
        B = pyro.sample("B", dist.Dirichlet(beta).to_event(1))
        pyro.sample("x", MaskedCategoricalHMM.from_probs(pi, A, B, batch.mask), obs=batch.tokens)


def ldhmm_init(sequences, n_states: int, n_symbols: int, seed: int = 0, dtype=torch.float64) -> dict:
    """The seeded, asymmetric starting point of an LDHMM fit, as values of the model's params.

    The same point as the closed-form fit's first restart (:func:`ldhmm.inference.init_parameters`
    with the symbol frequencies of ``sequences``), raised to at least twice
    :data:`~ldhmm.inference.svi.dirichlet_guide.SVI_MIN_CONCENTRATION`.

    Returns
    -------
    dict with ``alpha_pi`` (K,), ``alpha_A`` (K, K), ``beta`` (K, V).
    """
    freq = np.bincount(np.concatenate(sequences), minlength=n_symbols).astype(np.float64)
    params = init_parameters(
        LDHMM_SHARING,
        n_states,
        n_symbols,
        symbol_frequencies=freq / freq.sum(),
        seed=seed,
        n_tokens=float(freq.sum()),
        dtype=dtype,
    )
    floor = 2 * SVI_MIN_CONCENTRATION
    return {
        "alpha_pi": params.prior["pi"].clamp_min(floor),
        "alpha_A": params.prior["A"].clamp_min(floor),
        "beta": params.prior["B"].clamp_min(floor),
    }


def ldhmm_pf_offsets(batch: SequenceBatch, priors: dict) -> dict:
    """Offsets of :class:`~ldhmm.inference.svi.dirichlet_guide.DirichletMeanField` at the PF optimum.

    The held-out E-step of the closed form (PF family, best of its starts) under the priors of
    the sites ``pi``, ``A``, ``B``; its ``q(theta_m) = Dir(prior + expected counts)``, so the
    offsets are the expected counts. Started there, the route's bound of each sequence is at
    least its PF bound (hidden states summed out instead of a factorized ``q(Z)``), before any
    SVI step.

    Parameters
    ----------
    batch : SequenceBatch
    priors : dict
        ``pi`` (B or 1, K), ``A`` (B or 1, K, K), ``B`` (B or 1, K, V); the first row is used
        (the prior is the same for every sequence).

    Returns
    -------
    dict with ``pi`` (B, K), ``A`` (B, K, K), ``B`` (B, K, V).
    """
    prior = {g: priors[g][0].detach().double().contiguous() for g in ("pi", "A", "B")}
    bucket = Bucket(torch.arange(batch.batch_size), batch.tokens, batch.lengths, batch.mask)
    (state,) = VariationalEM(PFGuide()).score([bucket], VariantParameters(LDHMM_SHARING, prior=prior))
    return {g: state.counts[g].to(batch.dtype) for g in ("pi", "A", "B")}


def sample_database(alpha_pi, alpha_A, beta, lengths, seed: int = 0, return_latents: bool = False):
    """Draw a synthetic database from the model.

    Parameters
    ----------
    alpha_pi : Tensor, shape (K,)
    alpha_A : Tensor, shape (K, K)
    beta : Tensor, shape (K, V)
    lengths : array of int, shape (M,)
    seed : int
    return_latents : bool
        Also return the per-sequence ``pi``, ``A``, ``B`` and hidden states.

    Returns
    -------
    list of np.ndarray (int64), one per sequence; plus a dict of latents if asked.
    """
    lengths = torch.as_tensor(np.asarray(lengths), dtype=torch.long)
    if lengths.ndim != 1 or lengths.numel() == 0 or bool((lengths < 1).any()):
        raise ValueError("lengths must be a non-empty list of integers >= 1")
    with pyro.poutine.seed(rng_seed=int(seed)):
        trace = poutine.trace(ldhmm_model).get_trace(None, lengths, alpha_pi, alpha_A, beta)
    T = int(lengths.max())
    x = torch.stack([trace.nodes[f"x_{n}"]["value"] for n in range(T)], dim=-1)
    seqs = [x[m, : lengths[m]].numpy().astype(np.int64) for m in range(len(lengths))]
    if not return_latents:
        return seqs
    z = torch.stack([trace.nodes[f"z_{n}"]["value"] for n in range(T)], dim=-1)
    latents = {
        "pi": trace.nodes["pi"]["value"].numpy(),
        "A": trace.nodes["A"]["value"].numpy(),
        "B": trace.nodes["B"]["value"].numpy(),
        "z": [z[m, : lengths[m]].numpy() for m in range(len(lengths))],
    }
    return seqs, latents
