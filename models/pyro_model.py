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
of :mod:`ldhmm.inference.guides`, whose sample sites carry the same names.
"""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.ops.indexing import Vindex
from torch.distributions import constraints

__all__ = ["ldhmm_model", "learned_ldhmm_model", "sample_database"]


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


def learned_ldhmm_model(tokens, lengths, alpha_pi, alpha_A, beta, init=None):
    """:func:`ldhmm_model` with the hyper-parameters as ``pyro.param`` sites ``alpha_pi``,
    ``alpha_A``, ``beta`` (the arguments are only their initial values): the model that
    :func:`ldhmm.inference.svi.fit_svi` learns them in."""
    a_pi = pyro.param("alpha_pi", alpha_pi.detach().clone(), constraint=constraints.positive)
    a_A = pyro.param("alpha_A", alpha_A.detach().clone(), constraint=constraints.positive)
    b = pyro.param("beta", beta.detach().clone(), constraint=constraints.positive)
    return ldhmm_model(tokens, lengths, a_pi, a_A, b)


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
