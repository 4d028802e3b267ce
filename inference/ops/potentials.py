"""Chain potentials and what is computed from them, in log space.

The PF E-step runs forward-backward on the sub-normalized chain
``pi*[z1] prod A*[z_(n-1), z_n] prod B*[z_n, x_n]`` with ``pi* = exp(E log pi)`` etc.; the same
recursion gives an ordinary HMM's posterior when the potentials are log-probabilities. The
recursion itself lives twice, once per route: compiled in
:mod:`ldhmm.inference.cavi.kernels.scaled_chain`, and in torch in
:func:`ldhmm.inference.ops.forward.chain_posterior`. This module holds what surrounds it:
gathering emission potentials, shape checks and expected complete log-likelihoods. Pure torch,
no project imports.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = [
    "ChainPosterior",
    "emission_potentials",
    "check_chain_shapes",
    "weighted_sum",
    "expected_complete_log_lik",
]


class ChainPosterior(NamedTuple):
    """Posterior summaries of a batch of chains.

    Attributes
    ----------
    log_normalizer : Tensor, shape (M,)
        ``log Z`` of each chain (for an HMM with log-probability potentials: ``log p(x)``).
    state_marginals : Tensor, shape (M, T, K)
        ``r_n[i] = q(z_n = i)``; zero on padded positions.
    transition_counts : Tensor, shape (M, K, K)
        ``sum_{n >= 2} q(z_(n-1) = i, z_n = k)``.
    """

    log_normalizer: torch.Tensor
    state_marginals: torch.Tensor
    transition_counts: torch.Tensor


def emission_potentials(log_emission: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Gather ``log B[k, x_n]`` for every position.

    Parameters
    ----------
    log_emission : Tensor, shape (M or 1, K, V)
    tokens : LongTensor, shape (M, T)

    Returns
    -------
    Tensor, shape (M, T, K)
    """
    M, T = tokens.shape
    K = log_emission.shape[-2]
    table = log_emission.transpose(-1, -2)  # (M|1, V, K)
    if table.shape[0] == 1:
        return table[0][tokens]
    return torch.gather(table, 1, tokens[:, :, None].expand(M, T, K))


def check_chain_shapes(log_initial, log_transition, log_obs, mask):
    """``(M, T, K)`` of a batch of chains, or a ValueError naming the mismatch."""
    M, T, K = log_obs.shape
    if mask.shape != (M, T):
        raise ValueError(f"mask has shape {tuple(mask.shape)}, expected {(M, T)}")
    if log_initial.shape[-1] != K or log_transition.shape[-2:] != (K, K):
        raise ValueError("initial/transition potentials do not match the number of states")
    return M, T, K


def weighted_sum(weights: torch.Tensor, log_values: torch.Tensor, dims) -> torch.Tensor:
    """``sum weights * log_values`` over ``dims`` with ``0 * log 0 = 0`` (point estimates can hold
    exact zeros, log = -inf, where no mass goes)."""
    return torch.where(weights > 0, weights * log_values, torch.zeros_like(weights)).sum(dims)


def expected_complete_log_lik(marginals, transition_counts, log_initial, log_transition, log_obs):
    """``E_q[log p(X, Z | theta)]`` with expected logs plugged in, per sequence.

    Parameters
    ----------
    marginals : Tensor, shape (M, T, K)
    transition_counts : Tensor, shape (M, K, K)
    log_initial : Tensor, shape (M or 1, K)
    log_transition : Tensor, shape (M or 1, K, K)
    log_obs : Tensor, shape (M, T, K)

    Returns
    -------
    Tensor, shape (M,)
    """
    M, T, K = marginals.shape
    return (
        weighted_sum(marginals[:, 0], log_initial.expand(M, K), -1)
        + weighted_sum(transition_counts, log_transition.expand(M, K, K), (-1, -2))
        + weighted_sum(marginals, log_obs, (1, 2))
    )
