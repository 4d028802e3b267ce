"""Fully factorized (FF) updates of q(Z) = prod_n Cat(phi_n), batched over sequences.

Each ``phi_n`` depends only on its neighbours ``phi_(n-1)`` and ``phi_(n+1)``, so all positions of
one parity can be updated exactly and at once given the other parity: two such half-sweeps make
one coordinate-ascent pass with no Python loop over time. (Updating every position at once from
the old values is not coordinate ascent and can oscillate.)

Corrected update (docs/math.md; the paper adds ``E log pi`` at every n and swaps transition indices)::

    log phi_n[i] = E log B[i, x_n] + [n = 1] E log pi[i]
                   + [n > 1] sum_j phi_(n-1)[j] E log A[j, i]
                   + [n < N] sum_k phi_(n+1)[k] E log A[i, k]      (then normalize)
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = [
    "MeanFieldStats",
    "mean_field_half_sweep",
    "mean_field_sweep",
    "mean_field_stats",
    "LOG_ZERO",
]

# Stand-in for log 0 in FF updates: exp() of it underflows to 0 like exp(-inf), but 0 * LOG_ZERO
# is 0 where 0 * -inf is NaN (point estimates can hold exact zeros), and a few such terms add up
# without overflowing. float64 value; other dtypes use log_zero(dtype).
LOG_ZERO = -1e250


def log_zero(dtype: torch.dtype) -> float:
    """LOG_ZERO for ``dtype``: -1e250 in float64, about -3e34 in float32 (1e-4 of the most
    negative float, so that sums of K such terms cannot overflow)."""
    return LOG_ZERO if dtype == torch.float64 else float(torch.finfo(dtype).min) * 1e-4


def _finite_logs(*tensors):
    return [t.clamp_min(log_zero(t.dtype)) for t in tensors]


def _masked_softmax(logits, mask):
    # where, not multiply: a padded position's logits may all be LOG_ZERO-ish or -inf.
    return torch.where(mask[..., None], torch.softmax(logits, dim=-1), torch.zeros_like(logits))


class MeanFieldStats(NamedTuple):
    """Expected statistics of an FF q(Z) under given expected log-parameters.

    Attributes
    ----------
    expected_complete_log_lik : Tensor, shape (M,)
        ``E_q[log p(X, Z | theta)]`` with the expected logs plugged in.
    entropy : Tensor, shape (M,)
        ``H[q(Z)] = -sum_n sum_i phi_n[i] log phi_n[i]``.
    state_marginals : Tensor, shape (M, T, K)
        ``phi`` (zero on padding).
    transition_counts : Tensor, shape (M, K, K)
        ``sum_{n>=2} outer(phi_(n-1), phi_n)``.
    """

    expected_complete_log_lik: torch.Tensor
    entropy: torch.Tensor
    state_marginals: torch.Tensor
    transition_counts: torch.Tensor


def mean_field_half_sweep(
    phi: torch.Tensor,
    parity: int,
    log_initial: torch.Tensor,
    log_transition: torch.Tensor,
    log_obs: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """Exact coordinate update of every ``phi_n`` with ``n % 2 == parity`` (0-based n).

    Parameters
    ----------
    phi : Tensor, shape (M, T, K)
        Current factors; zero on padded positions.
    parity : int, 0 or 1
    log_initial : Tensor, shape (M or 1, K)
    log_transition : Tensor, shape (M or 1, K, K)
    log_obs : Tensor, shape (M, T, K)
    mask : BoolTensor, shape (M, T)

    Returns
    -------
    Tensor, shape (M, T, K): ``phi`` with the chosen positions replaced.
    """
    M, T, K = phi.shape
    log_initial, log_transition, log_obs = _finite_logs(log_initial, log_transition, log_obs)
    logits = log_obs.clone()
    logits[:, 0] += log_initial.expand(M, K)
    if T > 1:
        # incoming: sum_j phi_(n-1)[j] ElogA[j, i]; outgoing: sum_k phi_(n+1)[k] ElogA[i, k].
        # Padded phi are zero, so a missing neighbour contributes nothing.
        logits[:, 1:] += torch.matmul(phi[:, :-1], log_transition)
        logits[:, :-1] += torch.matmul(phi[:, 1:], log_transition.transpose(-1, -2))
    updated = _masked_softmax(logits, mask)
    positions = (torch.arange(T, device=phi.device) % 2) == parity
    return torch.where(positions[None, :, None], updated, phi)


def mean_field_sweep(phi, log_initial, log_transition, log_obs, mask) -> torch.Tensor:
    """One coordinate-ascent pass: the even positions, then the odd ones."""
    phi = mean_field_half_sweep(phi, 0, log_initial, log_transition, log_obs, mask)
    return mean_field_half_sweep(phi, 1, log_initial, log_transition, log_obs, mask)


def mean_field_stats(
    phi: torch.Tensor,
    log_initial: torch.Tensor,
    log_transition: torch.Tensor,
    log_obs: torch.Tensor,
    mask: torch.Tensor,
) -> MeanFieldStats:
    """Expected complete-data log-likelihood, entropy and counts of an FF q(Z), as
    :class:`MeanFieldStats`; the arguments (and their shapes) as for :func:`mean_field_half_sweep`."""
    M, T, K = phi.shape
    log_initial, log_transition, log_obs = _finite_logs(log_initial, log_transition, log_obs)
    if T > 1:
        transition_counts = torch.bmm(phi[:, :-1].transpose(1, 2), phi[:, 1:])
    else:
        transition_counts = phi.new_zeros(M, K, K)
    expected = (
        (phi[:, 0] * log_initial.expand(M, K)).sum(-1)
        + (transition_counts * log_transition.expand(M, K, K)).sum((-1, -2))
        + (phi * log_obs).sum((1, 2))
    )
    entropy = -torch.special.xlogy(phi, phi).sum((1, 2))
    return MeanFieldStats(expected, entropy, phi, transition_counts)
