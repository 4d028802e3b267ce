"""Forward-backward on batches of chains: the compiled core where it applies, else torch's.

:func:`forward_backward` runs the one compiled chain core
(:func:`ldhmm.inference.cavi.kernels.scaled_chain.forward_backward_potentials`, scaled
recursion, parallel over sequences) on CPU tensors, and the one torch recursion
(:func:`ldhmm.inference.ops.forward.chain_posterior`, log space, marginals as gradients of
log Z) on other devices or when the kernels are switched off. A chain whose scaled recursion
fails (a zero or non-finite scale) is redone in log space, so the result is always finite. Same
contract either way.
"""

from __future__ import annotations

import numpy as np
import torch

from ..ops.forward import chain_posterior
from ..ops.potentials import ChainPosterior, check_chain_shapes, expected_complete_log_lik
from . import kernels
from .kernels.scaled_chain import forward_backward_potentials
from .protocol import HiddenUpdate

__all__ = ["forward_backward", "forward_log_normalizer", "chain_update", "ExactChain"]


def _compiled_applies(log_obs: torch.Tensor) -> bool:
    return kernels.ENABLED and log_obs.device.type == "cpu"


def forward_backward(
    log_initial: torch.Tensor,
    log_transition: torch.Tensor,
    log_obs: torch.Tensor,
    mask: torch.Tensor,
) -> ChainPosterior:
    """Posterior of a batch of chains: the contract of
    :func:`ldhmm.inference.ops.forward.chain_posterior` (its arguments, their shapes and the
    :class:`ChainPosterior` it returns are documented there, once)."""
    check_chain_shapes(log_initial, log_transition, log_obs, mask)
    if not _compiled_applies(log_obs):
        return chain_posterior(log_initial, log_transition, log_obs, mask)
    log_z, marginals, counts, failed = forward_backward_potentials(
        log_initial.detach().numpy(),
        log_transition.detach().numpy(),
        log_obs.detach().numpy(),
        mask.sum(1).numpy(),
    )
    post = ChainPosterior(torch.from_numpy(log_z), torch.from_numpy(marginals), torch.from_numpy(counts))
    # A finite log Z with non-finite marginals (0 * inf in the scaled backward pass, e.g. priors
    # near 1e-3): redo those in log space too.
    failed = failed | ~np.isfinite(counts).all((1, 2)) | ~np.isfinite(marginals).all((1, 2))
    if failed.any():
        idx = torch.from_numpy(np.flatnonzero(failed))
        fallback = chain_posterior(
            log_initial if log_initial.shape[0] == 1 else log_initial[idx],
            log_transition if log_transition.shape[0] == 1 else log_transition[idx],
            log_obs[idx],
            mask[idx],
        )
        post.log_normalizer[idx] = fallback.log_normalizer
        post.state_marginals[idx] = fallback.state_marginals
        post.transition_counts[idx] = fallback.transition_counts
    return post


def forward_log_normalizer(
    log_initial: torch.Tensor,
    log_transition: torch.Tensor,
    log_obs: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """``log Z`` of each chain, shape (M,); for an HMM with log-probability potentials this is the
    exact ``log p(x)``. Same arguments as :func:`forward_backward`."""
    return forward_backward(log_initial, log_transition, log_obs, mask).log_normalizer


def chain_update(log_initial, log_transition, log_obs, mask, reference: bool = False) -> HiddenUpdate:
    """The optimal q(Z) among all Markov chains (the PF family) given expected log-potentials.

    Its entropy is ``log Z* - E_q[log potentials]``; ``reference=True`` runs the torch
    recursion (:func:`ldhmm.inference.ops.forward.chain_posterior`) instead of the compiled core.
    """
    run = chain_posterior if reference else forward_backward
    post = run(log_initial, log_transition, log_obs, mask)
    expected = expected_complete_log_lik(
        post.state_marginals, post.transition_counts, log_initial, log_transition, log_obs
    )
    return HiddenUpdate(post.state_marginals, post.transition_counts, post.log_normalizer - expected)


class ExactChain:
    """The closed-form half of the PF family as a guide of the protocol: q(Z) is the exact
    chain. The E-step uses it to seed other families (see
    :data:`ldhmm.inference.cavi.sequence_starts.STARTS`); :class:`ldhmm.inference.cavi.guides.PFGuide`
    adds the Pyro half."""

    name = "pf"
    compiled_update = "pf"
    #: Its "chain" start would be its own best start again.
    starts = ("prior", "mean")

    def init_state(self, log_initial, log_transition, log_obs, mask):
        return None

    def update_hidden(self, state, log_initial, log_transition, log_obs, mask):
        return chain_update(log_initial, log_transition, log_obs, mask), state

    def select_state(self, state, index):
        return None

    def scatter_state(self, state, index, part):
        return None
