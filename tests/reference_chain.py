"""What the tests check the library against, loaded from this file (not part of the library).

:func:`forward_backward_log`: the log-space forward-backward, the reference twin of both chain
recursions (the compiled :mod:`ldhmm.inference.cavi.kernels.scaled_chain` and the torch
:func:`ldhmm.inference.ops.forward.chain_posterior`), itself checked against all hidden paths.
:class:`LogSpacePFGuide`: a guide as a user writes it, against the documented protocol only.
"""

from __future__ import annotations

import torch

from ldhmm.inference import HiddenUpdate, chain_posterior, expected_complete_log_lik
from ldhmm.inference.ops.potentials import ChainPosterior, check_chain_shapes

__all__ = ["forward_backward_log", "LogSpacePFGuide"]


def forward_backward_log(
    log_initial: torch.Tensor,
    log_transition: torch.Tensor,
    log_obs: torch.Tensor,
    mask: torch.Tensor,
) -> ChainPosterior:
    """Reference forward-backward in log space.

    Parameters
    ----------
    log_initial : Tensor, shape (M or 1, K)
    log_transition : Tensor, shape (M or 1, K, K)
        ``[i, k]`` is the potential of moving from state i to state k.
    log_obs : Tensor, shape (M, T, K)
        Emission potentials at each position (see :func:`emission_potentials`).
    mask : BoolTensor, shape (M, T)
        True on real positions; every row starts with True and is a prefix of Trues.

    Returns
    -------
    ChainPosterior
    """
    M, T, K = check_chain_shapes(log_initial, log_transition, log_obs, mask)
    log_transition = log_transition.expand(M, K, K)
    log_alpha = torch.empty_like(log_obs)
    log_alpha[:, 0] = log_initial.expand(M, K) + log_obs[:, 0]
    for n in range(1, T):
        step = torch.logsumexp(log_alpha[:, n - 1, :, None] + log_transition, dim=1) + log_obs[:, n]
        log_alpha[:, n] = torch.where(mask[:, n, None], step, log_alpha[:, n - 1])
    log_z = torch.logsumexp(log_alpha[:, T - 1], dim=-1)
    log_beta = torch.zeros_like(log_obs)
    for n in range(T - 2, -1, -1):
        step = torch.logsumexp(log_transition + (log_obs[:, n + 1] + log_beta[:, n + 1])[:, None, :], dim=2)
        log_beta[:, n] = torch.where(mask[:, n + 1, None], step, torch.zeros_like(step))
    marginals = torch.exp(log_alpha + log_beta - log_z[:, None, None]) * mask[..., None]
    if T > 1:
        log_pair = (
            log_alpha[:, :-1, :, None]
            + log_transition[:, None]
            + (log_obs[:, 1:] + log_beta[:, 1:])[:, :, None, :]
            - log_z[:, None, None, None]
        )
        pair = torch.exp(log_pair) * mask[:, 1:, None, None]
        transition_counts = pair.sum(1)
    else:
        transition_counts = log_obs.new_zeros(M, K, K)
    return ChainPosterior(log_z, marginals, transition_counts)


class LogSpacePFGuide:
    """A guide written against the documented protocol, not derived from the library's classes:
    the PF family computed with the library's torch recursion (log space)."""

    name = "pf-logspace"
    starts = ("prior", "mean")  # the exact-chain family: no "chain" start

    def init_state(self, log_initial, log_transition, log_obs, mask):
        return None

    def update_hidden(self, state, log_initial, log_transition, log_obs, mask):
        post = chain_posterior(log_initial, log_transition, log_obs, mask)
        expected = expected_complete_log_lik(
            post.state_marginals, post.transition_counts, log_initial, log_transition, log_obs
        )
        return HiddenUpdate(
            post.state_marginals, post.transition_counts, post.log_normalizer - expected
        ), None

    def select_state(self, state, index):
        return None

    def scatter_state(self, state, index, part):
        return None
