"""Forward-backward on batches of chains with per-sequence (or shared) potentials.

The PF E-step runs the forward-backward algorithm on the sub-normalized chain
``pi*[z1] prod A*[z_(n-1), z_n] prod B*[z_n, x_n]`` with ``pi* = exp(E log pi)`` etc.
The same kernel computes an ordinary HMM's posterior when the potentials are log-probabilities.

Two implementations with one contract:

- :func:`forward_backward` (fast path): probability space with per-step normalization
  (Rabiner's scaling). On CPU it runs a compiled per-sequence loop (numba,
  :mod:`inference._numba_kernels`); :func:`forward_backward_torch` is the same recursion in torch
  (one batched matmul per time step), used on other devices. Potentials are max-shifted per
  matrix and per position before exponentiation, and any sequence whose scaled recursion
  underflows is recomputed by the log-space path, so the result is always finite.
- :func:`forward_backward_log` (reference path): log-sum-exp recursions throughout.

Both take padded batches with a mask and handle length-1 sequences.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from . import _numba_kernels

# Set to False to force the torch implementation (benchmarks compare both).
USE_COMPILED = True

__all__ = ["ChainPosterior", "forward_backward", "forward_backward_torch", "forward_backward_log",
           "forward_log_normalizer",
           "emission_potentials"]


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


def _check_shapes(log_initial, log_transition, log_obs, mask):
    M, T, K = log_obs.shape
    if mask.shape != (M, T):
        raise ValueError(f"mask has shape {tuple(mask.shape)}, expected {(M, T)}")
    if log_initial.shape[-1] != K or log_transition.shape[-2:] != (K, K):
        raise ValueError("initial/transition potentials do not match the number of states")
    return M, T, K


def _shifted_potentials(log_initial, log_transition, log_obs, mask):
    """Exponentiated potentials shifted so each has largest entry exp(0) = 1.

    Returns ``initial`` (M, K), ``transition`` (M|1, K, K), ``obs`` (M, T, K) and ``log_shift``
    (M,): what the shifts remove from ``log Z`` (the transition shift is per matrix, so it counts
    once per transition; the emission shift once per real position).
    """
    M, T, K = log_obs.shape
    init_shift = log_initial.amax(-1, keepdim=True)
    trans_shift = log_transition.amax((-1, -2), keepdim=True)
    obs_shift = log_obs.amax(-1, keepdim=True)
    maskf = mask.to(log_obs.dtype)
    log_shift = (
        init_shift.expand(M, 1)[:, 0]
        + trans_shift.reshape(-1).expand(M) * (maskf.sum(1) - 1)
        + (obs_shift[..., 0] * maskf).sum(1)
    )
    initial = torch.exp(log_initial - init_shift).expand(M, K)
    return initial, torch.exp(log_transition - trans_shift), torch.exp(log_obs - obs_shift), log_shift


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
    M, T, K = _check_shapes(log_initial, log_transition, log_obs, mask)
    log_transition = log_transition.expand(M, K, K)
    log_alpha = torch.empty_like(log_obs)
    log_alpha[:, 0] = log_initial.expand(M, K) + log_obs[:, 0]
    for n in range(1, T):
        step = torch.logsumexp(log_alpha[:, n - 1, :, None] + log_transition, dim=1) + log_obs[:, n]
        log_alpha[:, n] = torch.where(mask[:, n, None], step, log_alpha[:, n - 1])
    log_z = torch.logsumexp(log_alpha[:, T - 1], dim=-1)
    log_beta = torch.zeros_like(log_obs)
    for n in range(T - 2, -1, -1):
        step = torch.logsumexp(
            log_transition + (log_obs[:, n + 1] + log_beta[:, n + 1])[:, None, :], dim=2
        )
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


def forward_backward(
    log_initial: torch.Tensor,
    log_transition: torch.Tensor,
    log_obs: torch.Tensor,
    mask: torch.Tensor,
) -> ChainPosterior:
    """Fast forward-backward; same contract as :func:`forward_backward_log`.

    On CPU tensors this runs the compiled kernel of :mod:`inference._numba_kernels` (a loop per
    sequence, parallel over sequences); elsewhere, or without numba, :func:`forward_backward_torch`.
    Sequences whose scaled recursion underflows are recomputed in log space.
    """
    M, T, K = _check_shapes(log_initial, log_transition, log_obs, mask)
    if not (_numba_kernels.AVAILABLE and log_obs.device.type == "cpu" and USE_COMPILED):
        return forward_backward_torch(log_initial, log_transition, log_obs, mask)
    lengths = mask.sum(1)
    log_z, marginals, counts, failed = _numba_kernels.scaled_forward_backward(
        log_initial.detach().numpy(), log_transition.detach().numpy(), log_obs.detach().numpy(),
        lengths.numpy(),
    )
    post = ChainPosterior(torch.from_numpy(log_z), torch.from_numpy(marginals), torch.from_numpy(counts))
    if failed.any():
        idx = torch.from_numpy(np.flatnonzero(failed))
        return _patch_with_log_space(post, idx, log_initial, log_transition, log_obs, mask)
    return post


def _log_space_subset(idx, log_initial, log_transition, log_obs, mask) -> ChainPosterior:
    """:func:`forward_backward_log` on the sequences ``idx`` (shared potentials stay shared)."""
    return forward_backward_log(
        log_initial if log_initial.shape[0] == 1 else log_initial[idx],
        log_transition if log_transition.shape[0] == 1 else log_transition[idx],
        log_obs[idx],
        mask[idx],
    )


def _patch_with_log_space(post, idx, log_initial, log_transition, log_obs, mask) -> ChainPosterior:
    fallback = _log_space_subset(idx, log_initial, log_transition, log_obs, mask)
    log_z, marginals, counts = (t.clone() for t in post)
    log_z[idx] = fallback.log_normalizer
    marginals[idx] = fallback.state_marginals
    counts[idx] = fallback.transition_counts
    return ChainPosterior(log_z, marginals, counts)


def forward_backward_torch(
    log_initial: torch.Tensor,
    log_transition: torch.Tensor,
    log_obs: torch.Tensor,
    mask: torch.Tensor,
) -> ChainPosterior:
    """Forward-backward in torch with per-step scaling; same contract as :func:`forward_backward_log`.

    The recursion over time is the only Python loop; each step is one batched matmul and a
    handful of elementwise kernels over all M sequences. Padded positions carry the last
    forward message unchanged and a backward message of ones, so they contribute nothing.
    """
    M, T, K = _check_shapes(log_initial, log_transition, log_obs, mask)
    dtype = log_obs.dtype
    initial, transition, obs, log_shift = _shifted_potentials(log_initial, log_transition, log_obs, mask)
    maskf = mask.to(dtype)

    alpha = torch.empty_like(obs)
    scale = torch.ones(M, T, dtype=dtype, device=obs.device)
    a = initial * obs[:, 0]
    c = a.sum(-1)
    scale[:, 0] = c
    alpha[:, 0] = a / c[:, None]
    for n in range(1, T):
        a = torch.matmul(alpha[:, n - 1, None, :], transition)[:, 0] * obs[:, n]
        c = a.sum(-1)
        valid = mask[:, n]
        scale[:, n] = torch.where(valid, c, torch.ones_like(c))
        alpha[:, n] = torch.where(valid[:, None], a / c[:, None], alpha[:, n - 1])

    beta = torch.ones_like(obs)
    # weighted[n] = B*[., x_n] * beta_n / c_n, zero on padding: the message sent back from n.
    weighted = torch.zeros_like(obs)
    weighted[:, T - 1] = obs[:, T - 1] / scale[:, T - 1, None] * maskf[:, T - 1, None]
    transition_t = transition.transpose(-1, -2)
    for n in range(T - 2, -1, -1):
        b = torch.matmul(weighted[:, n + 1, None, :], transition_t)[:, 0]
        beta[:, n] = torch.where(mask[:, n + 1, None], b, beta[:, n + 1].new_ones(()))
        weighted[:, n] = obs[:, n] * beta[:, n] / scale[:, n, None] * maskf[:, n, None]

    marginals = alpha * beta * maskf[..., None]
    if T > 1:
        pair_sum = torch.bmm(alpha[:, :-1].transpose(1, 2), weighted[:, 1:])
        transition_counts = pair_sum * transition
    else:
        transition_counts = obs.new_zeros(M, K, K)

    log_z = torch.log(scale).sum(1) + log_shift
    post = ChainPosterior(log_z, marginals, transition_counts)
    bad = ~torch.isfinite(log_z) | ~torch.isfinite(marginals).all((1, 2)) | ~(scale > 0).all(1)
    if bool(bad.any()):
        return _patch_with_log_space(post, bad.nonzero()[:, 0], log_initial, log_transition, log_obs, mask)
    return post


def forward_log_normalizer(
    log_initial: torch.Tensor,
    log_transition: torch.Tensor,
    log_obs: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """``log Z`` of each chain by the scaled forward pass alone (half the cost of a full pass).

    Same arguments as :func:`forward_backward`; returns a Tensor of shape (M,). For an HMM with
    log-probability potentials this is the exact ``log p(x)``.
    """
    M, T, K = _check_shapes(log_initial, log_transition, log_obs, mask)
    if _numba_kernels.AVAILABLE and log_obs.device.type == "cpu" and USE_COMPILED:
        # The compiled full pass beats this per-time-step torch loop even though it also runs
        # the backward recursion (importance sampling calls this on many draws at once).
        return forward_backward(log_initial, log_transition, log_obs, mask).log_normalizer
    initial, transition, obs, log_shift = _shifted_potentials(log_initial, log_transition, log_obs, mask)
    a = initial * obs[:, 0]
    c = a.sum(-1)
    log_scale = torch.log(c)
    alpha = a / c[:, None]
    for n in range(1, T):
        a = torch.matmul(alpha[:, None, :], transition)[:, 0] * obs[:, n]
        c = a.sum(-1)
        valid = mask[:, n]
        log_scale = log_scale + torch.where(valid, torch.log(c), torch.zeros_like(c))
        alpha = torch.where(valid[:, None], a / c[:, None], alpha)
    log_z = log_scale + log_shift
    bad = ~torch.isfinite(log_z)
    if bool(bad.any()):
        idx = bad.nonzero()[:, 0]
        log_z = log_z.clone()
        log_z[idx] = _log_space_subset(idx, log_initial, log_transition, log_obs, mask).log_normalizer
    return log_z
