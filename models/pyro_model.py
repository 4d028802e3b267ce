"""The LDHMM generative model, declared in Pyro.

For each sequence m (a ``pyro.plate`` over sequences)::

    pi_m  ~ Dir(alpha_pi)                       site "pi",  shape (M, K)
    A_m   ~ prod_i Dir(alpha_A[i])              site "A",   shape (M, K, K)
    B_m   ~ prod_i Dir(beta[i])                 site "B",   shape (M, K, V)
    z_m1  ~ Cat(pi_m),  z_mn ~ Cat(A_m[z_m(n-1)])   sites "z_0" .. "z_(T-1)" (pyro.markov)
    x_mn  ~ Cat(B_m[z_mn])                      sites "x_0" .. "x_(T-1)"

With ``contexts`` (LDHMM with contextual emissions, docs/math.md "Emission contexts"), B has one
row per state and context row, ``B_m[k, c] ~ Dir(beta[k, c])`` (site "B" of shape (M, K, C, V)),
and ``x_mn ~ Cat(B_m[z_mn, c_mn])``, ``c_mn`` the context row of position n, a function of the
data alone (:func:`ldhmm.inference.contexts.context_ids`).

Variable lengths are handled by padding to T and masking every position ``n >= N_m``
(``poutine.mask``), so padded sites contribute nothing to any log-density. The same function
samples synthetic databases (``tokens=None``) and serves Pyro's ELBO estimators with the guides
of :mod:`ldhmm.inference.cavi.guides`, whose sample sites carry the same names.

:func:`ldhmm_sequence_model` is the same model for the SVI route (:mod:`ldhmm.inference.svi.svi_fit`):
called with one :class:`~ldhmm.inference.svi.minibatch.SequenceBatch`, it declares the
hyper-parameters as ``pyro.param`` sites and sums the hidden states out by the forward
algorithm instead of sampling them, so its only latent sites are ``pi``, ``A``, ``B``.
:func:`ldhmm_init` gives its seeded starting point, the closed-form fit's, and
:func:`ldhmm_pf_offsets` starts the per-sequence Dirichlet guide at the closed-form PF E-step's
``q(theta_m)``.

The model of the SVI route and every variant of it (:mod:`ldhmm.models.sticky`,
:mod:`ldhmm.models.mixture`, docs/writing-a-variant.md) are written with three building
blocks, so that a variant calls them and changes only what it changes (:func:`ldhmm_model`
draws its ``pi``, ``A``, ``B`` with the second):

* :func:`hyperparameter` and :func:`ldhmm_priors`: the learned Dirichlet hyper-parameters
  ``alpha_pi``, ``alpha_A``, ``beta`` as ``pyro.param`` sites (all ones to start, at least
  :data:`~ldhmm.inference.svi.dirichlet_guide.SVI_MIN_CONCENTRATION`);
* :func:`sequence_parameters`: the per-sequence sites ``pi``, ``A``, ``B``, drawn from given
  priors inside the plate over sequences;
* :func:`observe_hmm`: the observed site ``x``, the masked categorical HMM with the hidden states
  summed out (:class:`~ldhmm.inference.svi.hmm_distribution.MaskedCategoricalHMM`).

The first two take the emission contexts (``n_contexts=``, ``contextual=True``: ``beta`` and
``B`` with a context dimension, (K, C, V)); the contextual observed site is
:func:`ldhmm.models.pyro_contextual.observe_contextual_hmm`, which gathers each position's
emission row ``B_m[:, c_mn, :]`` (the SVI route's contextual model,
:class:`ldhmm.models.pyro_contextual.ContextualSequenceModel`, is built from the three).
"""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.ops.indexing import Vindex

from ..inference import LDHMM_SHARING, Bucket, PFGuide, VariantParameters, VariationalEM, init_parameters
from ..inference.copies import content_keys
from ..inference.svi.dirichlet_guide import CONCENTRATION, SVI_MIN_CONCENTRATION
from ..inference.svi.hmm_distribution import MaskedCategoricalHMM
from ..inference.svi.minibatch import SequenceBatch

__all__ = [
    "hyperparameter",
    "ldhmm_priors",
    "sequence_parameters",
    "observe_hmm",
    "ldhmm_model",
    "ldhmm_sequence_model",
    "ldhmm_init",
    "ldhmm_pf_offsets",
    "ldhmm_pf_held_out_offsets",
    "sample_database",
]


def hyperparameter(name: str, shape: tuple, dtype, constraint=CONCENTRATION) -> torch.Tensor:
    """A learned hyper-parameter: ``pyro.param(name)``, all ones to start.

    Parameters
    ----------
    name : str
        The parameter's name in Pyro's parameter store.
    shape : tuple of int
    dtype : torch.dtype
    constraint : torch.distributions.constraints.Constraint
        Default :data:`~ldhmm.inference.svi.dirichlet_guide.CONCENTRATION` (a Dirichlet
        concentration of the route: at least ``SVI_MIN_CONCENTRATION``, where reparameterized
        draws stay in floating range).

    Returns
    -------
    Tensor, shape ``shape``: the constrained value.
    """
    return pyro.param(name, lambda: torch.ones(shape, dtype=dtype), constraint=constraint)


def ldhmm_priors(
    batch: SequenceBatch, leading: tuple = (), constraint=CONCENTRATION, n_contexts: int | None = None
) -> tuple:
    """LDHMM's learned Dirichlet priors: params ``alpha_pi``, ``alpha_A``, ``beta`` (:func:`hyperparameter`).

    Parameters
    ----------
    batch : SequenceBatch
        K = ``n_states``, V = ``n_symbols``, ``dtype``.
    leading : tuple of int
        Dimensions in front of each prior (e.g. ``(C,)``: one prior per mixture component).
    constraint : Constraint
        Of all three (default :data:`~ldhmm.inference.svi.dirichlet_guide.CONCENTRATION`).
    n_contexts : int, optional
        C, the emission contexts: ``beta`` has one row per state and context row, (K, C, V)
        (LDHMM with contextual emissions); None: LDHMM's (K, V).

    Returns
    -------
    alpha_pi : Tensor, shape leading + (K,)
    alpha_A : Tensor, shape leading + (K, K)
    beta : Tensor, shape leading + (K, V), or leading + (K, C, V) with ``n_contexts``
    """
    K, V, dtype, lead = batch.n_states, batch.n_symbols, batch.dtype, tuple(leading)
    rows = (K,) if n_contexts is None else (K, int(n_contexts))
    return (
        hyperparameter("alpha_pi", lead + (K,), dtype, constraint),
        hyperparameter("alpha_A", lead + (K, K), dtype, constraint),
        hyperparameter("beta", lead + rows + (V,), dtype, constraint),
    )


def sequence_parameters(alpha_pi, alpha_A, beta, contextual: bool = False) -> tuple:
    """Each sequence's ``theta_m``: sample sites ``pi``, ``A``, ``B``; call inside the plate over sequences.

    ``pi_m ~ Dir(alpha_pi)``, ``A_m[i] ~ Dir(alpha_A[i])``, ``B_m[i] ~ Dir(beta[i])`` (the rows
    of ``A`` and ``B`` are their sites' event); with ``contextual``, ``B_m[i, c] ~ Dir(beta[i, c])``
    for every state i and context row c (the site's event is (K, C, V)).

    Parameters
    ----------
    alpha_pi : Tensor, shape (..., K)
    alpha_A : Tensor, shape (..., K, K)
    beta : Tensor, shape (..., K, V), or (..., K, C, V) with ``contextual``
        Leading dimensions broadcast with the plate's (e.g. one prior per sequence, picked by
        an enumerated type).
    contextual : bool
        ``beta`` has a context dimension (LDHMM with contextual emissions).

    Returns
    -------
    pi : Tensor, shape (..., B, K)
    A : Tensor, shape (..., B, K, K)
    B : Tensor, shape (..., B, K, V), or (..., B, K, C, V) with ``contextual``
    """
    pi = pyro.sample("pi", dist.Dirichlet(alpha_pi))
    A = pyro.sample("A", dist.Dirichlet(alpha_A).to_event(1))
    B = pyro.sample("B", dist.Dirichlet(beta).to_event(2 if contextual else 1))
    return pi, A, B


def observe_hmm(batch: SequenceBatch, pi, A, B) -> torch.Tensor:
    """The observed site ``x``: ``log p(x_m | pi_m, A_m, B_m)`` with the hidden states summed out.

    The batch's tokens under :class:`~ldhmm.inference.svi.hmm_distribution.MaskedCategoricalHMM`
    (forward algorithm, padding masked); call inside the plate over sequences.

    Parameters
    ----------
    batch : SequenceBatch
        ``tokens`` (B, T), ``mask`` (B, T).
    pi : Tensor, shape (..., B, K)
    A : Tensor, shape (..., B, K, K)
    B : Tensor, shape (..., B, K, V)

    Returns
    -------
    LongTensor, shape (B, T): the observed tokens.
    """
    return pyro.sample("x", MaskedCategoricalHMM.from_probs(pi, A, B, batch.mask), obs=batch.tokens)


def ldhmm_model(tokens, lengths, alpha_pi, alpha_A, beta, init: dict | None = None, contexts=None):
    """Pyro model of a padded database.

    Parameters
    ----------
    tokens : LongTensor, shape (M, T), or None
        Observed symbols (padding arbitrary), or None to sample them.
    lengths : LongTensor, shape (M,)
        ``1 <= N_m <= T``.
    alpha_pi : Tensor, shape (K,)
    alpha_A : Tensor, shape (K, K)
    beta : Tensor, shape (K, V), or (K, C, V) with ``contexts``
    init : ignored
        Accepted so that model and guide share one signature.
    contexts : LongTensor, shape (M, T), optional
        The emission context row (0..C-1) of every position (padding arbitrary in 0..C-1; e.g.
        :func:`ldhmm.models.pyro_contextual.padded_contexts`): LDHMM with contextual emissions,
        ``x_mn ~ Cat(B_m[z_mn, c_mn])``. The contexts are a function of the data, so ``tokens``
        must be given with them.

    Returns
    -------
    LongTensor, shape (M, T): the observed or sampled symbols (padding: whatever was sampled).
    """
    if contexts is not None and tokens is None:
        raise ValueError("ldhmm_model: contexts are computed from the data; give tokens with them")
    lengths = torch.as_tensor(lengths)
    M = lengths.shape[0]
    T = int(lengths.max()) if tokens is None else tokens.shape[1]
    mask = torch.arange(T)[None, :] < lengths[:, None]
    xs = []
    with pyro.plate("sequences", M, dim=-1):
        pi, A, B = sequence_parameters(alpha_pi, alpha_A, beta, contextual=contexts is not None)
        z = None
        for n in pyro.markov(range(T)):
            probs = pi if n == 0 else Vindex(A)[..., z, :]
            with poutine.mask(mask=mask[:, n]):
                z = pyro.sample(f"z_{n}", dist.Categorical(probs))
                row = Vindex(B)[..., z, :] if contexts is None else Vindex(B)[..., z, contexts[:, n], :]
                x = pyro.sample(
                    f"x_{n}",
                    dist.Categorical(row),
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

    Pyro sites: params ``alpha_pi`` (K,), ``alpha_A`` (K, K), ``beta`` (K, V) of
    :func:`ldhmm_priors` (their default start is all ones, :func:`ldhmm_init` gives the fit's);
    samples ``pi`` (B, K), ``A`` (B, K, K), ``B`` (B, K, V) of :func:`sequence_parameters`;
    observed ``x`` (B, T) of :func:`observe_hmm`.
    """
    priors = ldhmm_priors(batch)
    with batch.plate():
        observe_hmm(batch, *sequence_parameters(*priors))


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


def ldhmm_pf_offsets(batch: SequenceBatch, priors: dict, held_out: bool = False) -> dict:
    """Offsets of :class:`~ldhmm.inference.svi.dirichlet_guide.DirichletMeanField` at the PF optimum.

    The E-step of the closed form (PF family) from the starts a fit's E-step runs (the prior,
    the means and the random draws: :meth:`~ldhmm.inference.VariationalEM.fit_starts`, best per
    sequence) under the priors of the sites ``pi``, ``A``, ``B``; its ``q(theta_m) = Dir(prior +
    expected counts)``, so the offsets are the expected counts. Started there, the route's bound
    of each sequence is at least its PF bound (hidden states summed out instead of a factorized
    ``q(Z)``), before any SVI step.

    Not the held-out E-step's extra starts (``factorized``, ``constant``, ``smoothed``: made for
    re-scoring at learned priors' caps): at the route's first priors they win sequences with
    corner solutions (one state, FF's peaked counts) that the SVI steps do not leave, and the
    fit stops lower: sticky LDHMM on Entree, fold 0, K = 2, held-out bound -697.23 with them
    against -688.67 without, training ELBO -6246.0 against -6181.8 (docs/writing-a-variant.md).
    ``held_out=True`` (:func:`ldhmm_pf_held_out_offsets`, this function's attribute
    ``held_out``): the held-out E-step, where a held-out local fit starts, so that the route's
    held-out bound of each sequence starts at or above the closed form's.

    It needs LDHMM's sites, ``pi`` (K,), ``A`` (K, K), ``B`` (K, V), declared as its attribute
    ``sites`` (checked by :class:`~ldhmm.inference.svi.dirichlet_guide.DirichletMeanField`,
    which names a missing site); it reads them as the initial distribution, the transition
    rows and the emission rows of the hidden chain. A variant whose sites of these names mean
    something else gets an approximate start (the fit goes on from there); one whose sites are
    named otherwise gives its own ``init_offsets``.

    Parameters
    ----------
    batch : SequenceBatch
    priors : dict
        ``pi`` (B or 1, K), ``A`` (B or 1, K, K), ``B`` (B or 1, K, V); the first row is used
        (the prior is the same for every sequence).
    held_out : bool
        The held-out E-step's starts (False: a fit's).

    Returns
    -------
    dict with ``pi`` (B, K), ``A`` (B, K, K), ``B`` (B, K, V).
    """
    prior = {g: priors[g][0].detach().double().contiguous() for g in ("pi", "A", "B")}
    bucket = Bucket(torch.arange(batch.batch_size), batch.tokens, batch.lengths, batch.mask)
    # random starts hashed from each sequence's content, as the closed form's default
    # (identical_sequences="once") hashes them: the same draws as its held-out E-step
    tokens = batch.tokens.numpy()
    bucket.start_keys = torch.from_numpy(
        content_keys([tokens[m, :n] for m, n in enumerate(batch.lengths.tolist())])
    )
    engine = VariationalEM(PFGuide())
    params = VariantParameters(LDHMM_SHARING, prior=prior)
    (state,) = engine.score([bucket], params, starts=None if held_out else engine.fit_starts())
    return {g: state.counts[g].to(batch.dtype) for g in ("pi", "A", "B")}


def ldhmm_pf_held_out_offsets(batch: SequenceBatch, priors: dict) -> dict:
    """:func:`ldhmm_pf_offsets` from the held-out E-step (its extra starts too): where a
    held-out local fit starts (``ldhmm_pf_offsets.held_out``, used by
    :func:`ldhmm.inference.svi.dirichlet_guide.held_out_offsets`), so that the route's held-out
    bound of each sequence starts at or above the closed form's held-out PF bound."""
    return ldhmm_pf_offsets(batch, priors, held_out=True)


def _ldhmm_sites(batch: SequenceBatch) -> dict:
    K, V = batch.n_states, batch.n_symbols
    return {"pi": (K,), "A": (K, K), "B": (K, V)}


#: The sites the PF start needs (checked by the guide before it runs, naming a missing one).
ldhmm_pf_offsets.sites = _ldhmm_sites
ldhmm_pf_held_out_offsets.sites = _ldhmm_sites
#: The start of a held-out local fit (:func:`ldhmm.inference.svi.dirichlet_guide.held_out_offsets`).
ldhmm_pf_offsets.held_out = ldhmm_pf_held_out_offsets


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
