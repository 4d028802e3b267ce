"""The most probable hidden-state path of a batch of chains (Viterbi), in log space.

The max-product twin of :func:`ldhmm.inference.ops.forward.chain_posterior`: the same
potentials and shapes (``log_initial`` (M or 1, K), ``log_transition`` (M or 1, K, K),
emission potentials ``log_obs`` (M, T, K), ``mask`` (M, T)), with ``max`` in place of
log-sum-exp and back-pointers to recover the argmax. For an HMM with log-probability
potentials it is the most probable state path and ``log p(x, z*)``; for the sub-normalized
potentials of an LDHMM posterior (``log E[theta]`` or ``E[log theta]``) the maximizer of the
corresponding chain. Pure torch, no project imports; any device and dtype.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["ViterbiPaths", "viterbi_log", "unpad_paths"]


class ViterbiPaths(NamedTuple):
    """The best path of every chain of a batch.

    Attributes
    ----------
    states : LongTensor, shape (M, T)
        ``z*_n`` at every real position; ``-1`` on padded positions.
    log_score : Tensor, shape (M,)
        ``max_z [log_initial[z_1] + sum_n log_transition[z_(n-1), z_n] + sum_n log_obs[n, z_n]]``
        (for an HMM: ``log p(x, z*)``); ``-inf`` when every path has potential zero.
    lengths : LongTensor, shape (M,)
        Real positions of each chain (``mask.sum(1)``).
    """

    states: torch.Tensor
    log_score: torch.Tensor
    lengths: torch.Tensor


def _batched(log_initial, log_transition, M, K):
    """``log_initial`` as (M, K) and ``log_transition`` as (M, K, K), accepting unbatched forms."""
    if log_initial.dim() == 1:
        log_initial = log_initial[None]
    if log_transition.dim() == 2:
        log_transition = log_transition[None]
    if log_initial.shape[-1] != K or log_transition.shape[-2:] != (K, K):
        raise ValueError("initial/transition potentials do not match the number of states")
    if log_initial.shape[0] not in (1, M) or log_transition.shape[0] not in (1, M):
        raise ValueError(
            f"initial/transition potentials have batch sizes {log_initial.shape[0]}, "
            f"{log_transition.shape[0]}; expected 1 or {M}"
        )
    return log_initial.expand(M, K), log_transition.expand(M, K, K)


def viterbi_log(
    log_initial: torch.Tensor,
    log_transition: torch.Tensor,
    log_obs: torch.Tensor,
    mask: torch.Tensor,
) -> ViterbiPaths:
    """Most probable state path of each chain of a padded batch.

    Parameters
    ----------
    log_initial : Tensor, shape (M, K), (1, K) or (K,)
        ``log pi[k]``: potential of ``z_1 = k``.
    log_transition : Tensor, shape (M, K, K), (1, K, K) or (K, K)
        ``[i, k]``: potential of moving from state i to state k.
    log_obs : Tensor, shape (M, T, K)
        Emission potentials at each position (see
        :func:`ldhmm.inference.ops.potentials.emission_potentials`).
    mask : BoolTensor, shape (M, T)
        True on real positions; every row starts with True and is a prefix of Trues.

    Returns
    -------
    ViterbiPaths
        ``states`` (M, T) with ``-1`` on padding, ``log_score`` (M,), ``lengths`` (M,).
        Ties go to the lowest state index (``torch.max``'s first maximum).
    """
    if log_obs.dim() != 3:
        raise ValueError(f"log_obs has shape {tuple(log_obs.shape)}, expected (M, T, K)")
    M, T, K = log_obs.shape
    if mask.shape != (M, T):
        raise ValueError(f"mask has shape {tuple(mask.shape)}, expected {(M, T)}")
    mask = mask.to(torch.bool)
    log_initial, log_transition = _batched(log_initial, log_transition, M, K)
    # back[:, n, k]: best predecessor of z_n = k; on padded positions the identity, so that the
    # backtrack carries the final state of each chain unchanged through its padding.
    identity = torch.arange(K, device=log_obs.device).expand(M, K)
    back = torch.empty(M, T, K, dtype=torch.long, device=log_obs.device)
    back[:, 0] = identity
    delta = log_initial + log_obs[:, 0]
    for n in range(1, T):
        best, arg = torch.max(delta[:, :, None] + log_transition, dim=1)  # over the previous state
        step = best + log_obs[:, n]
        real = mask[:, n, None]
        delta = torch.where(real, step, delta)
        back[:, n] = torch.where(real, arg, identity)
    log_score, last = torch.max(delta, dim=-1)
    states = torch.empty(M, T, dtype=torch.long, device=log_obs.device)
    states[:, T - 1] = last
    for n in range(T - 1, 0, -1):
        states[:, n - 1] = back[:, n].gather(1, states[:, n, None])[:, 0]
    states = torch.where(mask, states, torch.full_like(states, -1))
    return ViterbiPaths(states, log_score, mask.sum(1))


def unpad_paths(paths: ViterbiPaths) -> list:
    """The paths of :func:`viterbi_log` as a list of int64 numpy arrays of shape (N_m,)."""
    states = paths.states.cpu().numpy()
    return [states[m, : int(n)].copy() for m, n in enumerate(paths.lengths.cpu().tolist())]
