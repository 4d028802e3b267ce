"""Each sequence's hidden chain under draws from a fitted guide of the SVI route.

A model of the route observes a sequence through a
:class:`~ldhmm.inference.svi.hmm_distribution.MaskedCategoricalHMM` whose initial, transition
and emission probabilities are functions of the sequence's latent variables ``theta_m``
(LDHMM's ``pi_m``, ``A_m``, ``B_m``, or whatever a variant builds them from). Replayed on
``S`` draws ``theta_m^s ~ q(theta_m)`` of the guide
(:func:`~ldhmm.inference.svi.log_weights.replayed_traces`), the observed site holds the chain
of every draw. Plain Monte Carlo means over the draws, under the route's variational
posterior ``q(theta_m) p(z_m | x_m, theta_m)`` (the hidden chain summed exactly given
``theta_m``), give what the per-sequence commands read:

* the posterior means ``E_q[pi_m]``, ``E_q[A_m]``, ``E_q[B_m]`` of the chain's probabilities;
* the state marginals ``E_q[p(z_mn = k | x_m, theta_m)]``;
* the next symbol's probability
  ``E_q[p(x_(N+1) = v | x_m, theta_m)] = E_q[sum_ij p(z_N = i | x_m, theta_m) A_m[i, j] B_m[j, v]]``.

A chain whose parameters depend on a site the model enumerates (a discrete latent variable
summed out inside the model, not drawn by the guide) would need that variable's posterior
too; it is refused, naming the site.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..ops.forward import chain_posterior, gather_emissions
from .hmm_distribution import MaskedCategoricalHMM
from .log_weights import replayed_traces
from .minibatch import SequenceBatch
from .model_check import ModelCheckError

__all__ = ["ChainDraws", "ChainSummary", "chain_draws", "summarize_draws", "chain_summary"]


class ChainDraws(NamedTuple):
    """The hidden chain of ``S`` draws of ``B`` sequences (rows of each normalized, log scale).

    Attributes
    ----------
    log_initial : Tensor, shape (S, B, K)
    log_transition : Tensor, shape (S, B, K, K)
    log_emission : Tensor, shape (S, B, K, V)
    """

    log_initial: torch.Tensor
    log_transition: torch.Tensor
    log_emission: torch.Tensor


class ChainSummary(NamedTuple):
    """Monte Carlo means over the draws, per sequence of a batch.

    Attributes
    ----------
    pi_mean : Tensor, shape (B, K)
    A_mean : Tensor, shape (B, K, K)
    B_mean : Tensor, shape (B, K, V)
    state_marginals : Tensor, shape (B, T, K)
        Zero on padded positions.
    next_proba : Tensor, shape (B, V)
        The next symbol's probability after each sequence's last event; rows sum to 1.
    """

    pi_mean: torch.Tensor
    A_mean: torch.Tensor
    B_mean: torch.Tensor
    state_marginals: torch.Tensor
    next_proba: torch.Tensor


def _observed_chain(model_trace) -> tuple[str, MaskedCategoricalHMM]:
    for name, site in model_trace.nodes.items():
        if site["type"] != "sample" or not site["is_observed"]:
            continue
        fn = site["fn"]
        while not isinstance(fn, MaskedCategoricalHMM) and hasattr(fn, "base_dist"):
            fn = fn.base_dist  # poutine.mask, Independent, expand: the chain underneath
        if isinstance(fn, MaskedCategoricalHMM):
            return name, fn
    raise ModelCheckError(
        "the model observes no MaskedCategoricalHMM (observe_hmm): posteriors, next-event "
        "predictions and decoding read each sequence's hidden chain from it"
    )


@torch.no_grad()
def chain_draws(model, guide, batch: SequenceBatch, n_draws: int) -> ChainDraws:
    """The chain of each sequence of ``batch`` under ``n_draws`` draws of the guide.

    Parameters
    ----------
    model, guide : callable
        Pyro model and guide of a :class:`SequenceBatch`, their parameters as they are in
        Pyro's parameter store (a fitted model's, with the sequences' local rows).
    batch : SequenceBatch
    n_draws : int

    Returns
    -------
    ChainDraws
    """
    _, model_trace = replayed_traces(model, guide, batch, int(n_draws))
    name, chain = _observed_chain(model_trace)
    S, B, K, V = int(n_draws), batch.batch_size, chain.initial_logits.shape[-1], chain.n_symbols
    try:
        return ChainDraws(
            torch.broadcast_to(chain.initial_logits, (S, B, K)),
            torch.broadcast_to(chain.transition_logits, (S, B, K, K)),
            torch.broadcast_to(chain.emission_logits, (S, B, K, V)),
        )
    except RuntimeError:
        shape = tuple(chain.initial_logits.shape)
        raise ModelCheckError(
            f"site {name!r}: the chain's initial logits have shape {shape}, not (draws, sequences, "
            f"K) = {(S, B, K)}: its parameters depend on a site the model enumerates, whose "
            "posterior the per-sequence summaries do not compute"
        ) from None


def summarize_draws(draws: ChainDraws, batch: SequenceBatch) -> ChainSummary:
    """Sums over the draws (not yet means) of each summary of :class:`ChainSummary`.

    Parameters
    ----------
    draws : ChainDraws
        ``S`` draws of the chains of ``batch``.
    batch : SequenceBatch

    Returns
    -------
    ChainSummary
        Every field summed over the ``S`` draws.
    """
    S, B, K = draws.log_initial.shape
    T = batch.tokens.shape[1]
    log_obs = gather_emissions(draws.log_emission, batch.tokens)  # (S, B, T, K)
    post = chain_posterior(
        draws.log_initial.reshape(S * B, K),
        draws.log_transition.reshape(S * B, K, K),
        log_obs.reshape(S * B, T, K),
        batch.mask.expand(S, B, T).reshape(S * B, T),
    )
    marginals = post.state_marginals.reshape(S, B, T, K)
    last = (batch.lengths - 1).to(batch.tokens.device)
    final = marginals[:, torch.arange(B, device=last.device), last]  # (S, B, K): q(z_N | x, theta)
    transition, emission = draws.log_transition.exp(), draws.log_emission.exp()
    next_state = torch.einsum("sbi,sbij->sbj", final, transition)
    return ChainSummary(
        draws.log_initial.exp().sum(0),
        transition.sum(0),
        emission.sum(0),
        marginals.sum(0),
        torch.einsum("sbj,sbjv->bv", next_state, emission),
    )


def chain_summary(model, guide, batch: SequenceBatch, n_draws: int, max_cells: int = 1 << 22) -> ChainSummary:
    """The Monte Carlo means of :class:`ChainSummary` over ``n_draws`` draws of the guide.

    Parameters
    ----------
    model, guide, batch, n_draws
        As for :func:`chain_draws`.
    max_cells : int
        Draws are made in chunks of at most ``max_cells / (B T K K)`` (memory of the forward
        scan and its gradients).

    Returns
    -------
    ChainSummary
    """
    if int(n_draws) < 1:
        raise ValueError(f"n_draws must be >= 1, got {n_draws}")
    per_draw = batch.batch_size * batch.tokens.shape[1] * max(batch.n_states, 1) ** 2
    chunk = max(1, min(int(n_draws), int(max_cells) // max(per_draw, 1)))
    total, done = None, 0
    while done < n_draws:
        size = min(chunk, int(n_draws) - done)
        part = summarize_draws(chain_draws(model, guide, batch, size), batch)
        total = part if total is None else ChainSummary(*(a + b for a, b in zip(total, part)))
        done += size
    return ChainSummary(*(value / int(n_draws) for value in total))
