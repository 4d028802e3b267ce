"""Per-sequence log importance weights of a model and guide of the SVI route.

For a batch of sequences and ``S`` draws ``theta_m^s ~ q(theta_m)`` from the guide,

``log w_ms = log p(x_m, theta_m^s) - log q(theta_m^s)``

with every discrete site marked for enumeration summed out exactly (``poutine.enum``, then a
log-sum-exp over the enumerated dimensions) and the hidden chain summed out by the model's
forward algorithm. Their mean over ``s`` estimates the sequence's ELBO (a lower bound on
``log p(x_m)``); ``logmeanexp_s`` is the importance-sampled estimate of ``log p(x_m)``, itself
a lower bound in expectation that tightens with ``S``. Densities are taken without the plate's
subsampling scale: each sequence counts once.

Every sample site must lie in the plate ``"sequences"``: a global latent variable has no
per-sequence share of the bound.
"""

from __future__ import annotations

import pyro
import torch
from pyro import poutine

from .minibatch import SequenceBatch
from .model_check import ModelCheckError, in_sequence_plate, sample_sites

__all__ = ["sequence_log_weights", "replayed_traces", "PARTICLE_PLATE"]

#: The plate of Monte Carlo draws, just outside the plate of sequences.
PARTICLE_PLATE = "_draws"


def _log_density(trace, role: str) -> torch.Tensor | float:
    total = 0.0
    for name, site in sample_sites(trace):
        if not in_sequence_plate(site):
            raise ModelCheckError(
                f"{role} site {name!r} lies outside plate 'sequences': per-sequence scores need every "
                "sample site inside batch.plate()"
            )
        log_p = site["fn"].log_prob(site["value"])
        if site["mask"] is not None:
            log_p = torch.where(site["mask"], log_p, torch.zeros((), dtype=log_p.dtype))
        total = total + log_p
    return total


def replayed_traces(model, guide, batch: SequenceBatch, n_draws: int) -> tuple:
    """``(guide_trace, model_trace)``: ``n_draws`` draws of the guide for every sequence of
    ``batch`` (in the plate :data:`PARTICLE_PLATE`, ``dim=-2``), and the model replayed on them
    with its enumerated sites summed in parallel (from ``dim=-3`` leftwards)."""

    def guided():
        with pyro.plate(PARTICLE_PLATE, n_draws, dim=-2):
            return guide(batch)

    def modelled():
        with pyro.plate(PARTICLE_PLATE, n_draws, dim=-2):
            return model(batch)

    guide_trace = poutine.trace(guided).get_trace()
    enumerated = poutine.enum(modelled, first_available_dim=-3)
    return guide_trace, poutine.trace(poutine.replay(enumerated, trace=guide_trace)).get_trace()


def _draws(model, guide, batch: SequenceBatch, n_draws: int) -> torch.Tensor:
    guide_trace, model_trace = replayed_traces(model, guide, batch, n_draws)
    shape = (n_draws, batch.batch_size)
    log_p = torch.as_tensor(_log_density(model_trace, "model"), dtype=batch.dtype)
    log_q = torch.as_tensor(_log_density(guide_trace, "guide"), dtype=batch.dtype)
    if log_p.dim() > 2:  # enumerated dimensions on the left: sum them out
        log_p = torch.logsumexp(log_p.reshape((-1,) + log_p.shape[-2:]), dim=0)
    if log_q.dim() > 2:
        raise ModelCheckError("the guide enumerates a site: per-sequence scores need a guide that samples")
    return (log_p - log_q).expand(shape)


@torch.no_grad()
def sequence_log_weights(
    model, guide, batch: SequenceBatch, n_samples: int, max_cells: int = 1 << 22
) -> torch.Tensor:
    """``log p(x_m, theta_m^s) - log q(theta_m^s)`` for ``n_samples`` draws per sequence.

    Parameters
    ----------
    model, guide : callable
        Pyro model and guide of a :class:`SequenceBatch` (their parameters as they are in Pyro's
        parameter store).
    batch : SequenceBatch
    n_samples : int
        Draws per sequence.
    max_cells : int
        Draws are made in chunks of at most ``max_cells / (B T K)`` (memory of the forward
        scan).

    Returns
    -------
    Tensor, shape (n_samples, B).
    """
    if int(n_samples) < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    per_draw = batch.batch_size * batch.tokens.shape[1] * max(batch.n_states, 1)
    chunk = max(1, min(int(n_samples), int(max_cells) // max(per_draw, 1)))
    parts, done = [], 0
    while done < n_samples:
        size = min(chunk, int(n_samples) - done)
        parts.append(_draws(model, guide, batch, size))
        done += size
    return torch.cat(parts, dim=0)
