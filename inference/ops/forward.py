"""The forward algorithm as a differentiable, broadcasting parallel scan (the SVI route's likelihood).

``log p(x | pi, A, B) = log sum_z pi[z_1] B[z_1, x_1] prod_(n>=2) A[z_(n-1), z_n] B[z_n, x_n]``
is the product of ``N - 1`` matrices ``W_n[j, k] = A[j, k] B[k, x_n]`` between the row vector
``pi * B[:, x_1]`` and a column of ones. As in Pyro's ``DiscreteHMM``, the matrices are
multiplied in log space pairwise, in ``ceil(log2 T)`` rounds of batched products, so a batch of
chains costs a few tensor operations and no Python loop over positions; autograd
differentiates through it (the SVI route's gradients). A padded position (``mask`` False) gets
the identity matrix and contributes nothing, so sequences of different lengths share a batch.

This is the project's one torch recursion (the other is the compiled chain core,
:mod:`ldhmm.inference.cavi.kernels.scaled_chain`). :func:`chain_log_likelihood` gives ``log Z``
over any leading batch dimensions (Monte Carlo samples, enumerated variables), with gradients
(the scan's up-sweep); :func:`chain_posterior` gives the forward-backward marginals as the
gradients of ``log Z``; :func:`forward_log_messages` gives every forward message (the same
up-sweep, then its down-sweep), from which the PF guide draws its paths backward.
The tests check both against a log-space forward-backward and against all hidden paths
(``tests/reference_chain.py``, ``tests/test_pyro_route.py``, ``tests/test_kernels.py``).
"""

from __future__ import annotations

import torch

from .potentials import ChainPosterior, check_chain_shapes

__all__ = [
    "log_matmul_exp",
    "gather_emissions",
    "chain_log_likelihood",
    "forward_log_messages",
    "chain_posterior",
]


def log_matmul_exp(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``log(exp(a) @ exp(b))``, stable, broadcasting over leading dimensions.

    Parameters
    ----------
    a : Tensor, shape (..., I, J)
    b : Tensor, shape (..., J, K)

    Returns
    -------
    Tensor, shape (..., I, K). An entry whose sum is exactly zero is ``-inf`` with a zero
    gradient (never NaN).
    """
    lowest = torch.finfo(a.dtype).min
    a_shift = a.detach().amax(-1, keepdim=True).clamp(min=lowest)
    b_shift = b.detach().amax(-2, keepdim=True).clamp(min=lowest)
    prod = torch.matmul((a - a_shift).exp(), (b - b_shift).exp())
    positive = prod > 0
    # log only where positive: the other branch's gradient is exactly zero, not 0 * inf
    log_prod = torch.where(positive, torch.where(positive, prod, torch.ones_like(prod)).log(), -float("inf"))
    log_prod = log_prod + a_shift + b_shift
    if bool(positive.all()):
        return log_prod
    # A zero sum is either exact (no path) or an underflow: a row's and a column's largest
    # entries can sit at different j, and potentials a few hundred nats apart then multiply to
    # exp(-1000) = 0. Those entries get the exact log-sum-exp over j (-inf only where every term
    # is; the clamp keeps that case's gradient at zero instead of NaN).
    terms = a[..., :, :, None] + b[..., None, :, :]  # (..., I, J, K)
    possible = (terms > -float("inf")).any(-2)
    exact = torch.logsumexp(terms.clamp(min=lowest), dim=-2)
    exact = torch.where(possible, exact, -float("inf"))
    return torch.where(positive, log_prod, exact)


def _scan_levels(log_steps: torch.Tensor) -> list[torch.Tensor]:
    """The pairwise products of (..., N, K, K) over dimension -3, round by round (the up-sweep):
    level 0 is ``log_steps``, each next level the products of its neighbours' pairs (an odd
    last matrix carried over), the last level the whole product (one matrix)."""
    levels = [log_steps]
    while log_steps.shape[-3] > 1:
        n = log_steps.shape[-3]
        even = n - n % 2
        paired = log_matmul_exp(log_steps[..., 0:even:2, :, :], log_steps[..., 1:even:2, :, :])
        if even < n:
            paired = torch.cat([paired, log_steps[..., even:, :, :]], dim=-3)
        log_steps = paired
        levels.append(log_steps)
    return levels


def _prefix_products(levels: list[torch.Tensor]) -> torch.Tensor:
    """Every prefix product ``W_1 @ ... @ W_i`` (i = 1..N) of the up-sweep's matrices, (..., N, K, K).

    The down-sweep of the same scan: at each level, an odd entry's prefix is its pair's prefix
    one level up, an even entry's (past the first) the prefix of the pair before it times the
    entry itself; ``ceil(log2 N)`` rounds of batched products, no loop over positions.
    """
    prefix = levels[-1]
    for level in reversed(levels[:-1]):
        n = level.shape[-3]
        half = n // 2
        evens = torch.cat(
            [
                level[..., :1, :, :],
                log_matmul_exp(prefix[..., : (n + 1) // 2 - 1, :, :], level[..., 2::2, :, :]),
            ],
            dim=-3,
        )
        odds = prefix[..., :half, :, :]
        paired = torch.stack([evens[..., :half, :, :], odds], dim=-3).flatten(-4, -3)
        prefix = torch.cat([paired, evens[..., half:, :, :]], dim=-3)
    return prefix


def _masked_steps(log_steps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``log_steps`` (..., N, K, K) with the identity where ``mask`` (..., N) is False: a padded
    position contributes nothing to any product."""
    K = log_steps.shape[-1]
    identity = torch.full((K, K), -float("inf"), dtype=log_steps.dtype).fill_diagonal_(0.0)
    return torch.where(mask[..., None, None], log_steps, identity)


def gather_emissions(log_emission: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``log B[k, x_n]`` at every position, broadcasting the batch dimensions of both.

    Parameters
    ----------
    log_emission : Tensor, shape (..., K, V)
    tokens : LongTensor, shape (..., T)

    Returns
    -------
    Tensor, shape (..., T, K): the broadcast batch shape, then positions and states.
    """
    K, V = log_emission.shape[-2:]
    T = tokens.shape[-1]
    batch = torch.broadcast_shapes(log_emission.shape[:-2], tokens.shape[:-1])
    table = log_emission.transpose(-1, -2).expand(batch + (V, K))
    index = tokens[..., :, None].expand(batch + (T, K))
    return torch.gather(table, -2, index)


def chain_log_likelihood(
    log_initial: torch.Tensor,
    log_transition: torch.Tensor,
    log_obs: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """``log Z`` of a batch of chains by the parallel forward scan (``log p(x)`` for an HMM).

    Parameters
    ----------
    log_initial : Tensor, shape (..., K)
    log_transition : Tensor, shape (..., K, K)
        ``[j, k]`` is the log-potential of moving from state j to state k.
    log_obs : Tensor, shape (..., T, K)
        Emission log-potentials at each position (:func:`gather_emissions`).
    mask : BoolTensor, shape (..., T)
        True on real positions; each row a prefix of Trues starting at position 0.

    Returns
    -------
    Tensor with the broadcast batch shape of the four arguments.
    """
    K = log_obs.shape[-1]
    T = log_obs.shape[-2]
    if log_initial.shape[-1] != K or log_transition.shape[-2:] != (K, K) or mask.shape[-1] != T:
        raise ValueError(
            f"chain shapes do not fit: initial {tuple(log_initial.shape)}, transition "
            f"{tuple(log_transition.shape)}, emissions {tuple(log_obs.shape)}, mask {tuple(mask.shape)}"
        )
    log_obs = torch.where(mask[..., None], log_obs, torch.zeros((), dtype=log_obs.dtype))
    first = log_initial + log_obs[..., 0, :]
    if T == 1:
        return torch.logsumexp(first, -1)
    steps = _masked_steps(log_transition[..., None, :, :] + log_obs[..., 1:, None, :], mask[..., 1:])
    total = _scan_levels(steps)[-1][..., 0, :, :]
    return torch.logsumexp(first[..., :, None] + total, dim=(-2, -1))


def forward_log_messages(
    log_first: torch.Tensor, log_steps: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """The forward messages of a batch of chains with position-dependent potentials, from the scan.

    ``log alpha_n(k) = log sum_(z_0 .. z_(n-1)) exp(f[z_0] + W_1[z_0, z_1] + ... + W_n[z_(n-1), k])``:
    the potential of every prefix that ends in state k at position n. The prefix products are
    the down-sweep of the same pairwise scan whose up-sweep gives :func:`chain_log_likelihood`
    (``ceil(log2 T)`` rounds each way), differentiable. Forward filtering, backward sampling
    draws a path from them alone: ``z_(L-1)`` from ``alpha_(L-1)``, then each ``z_n`` given
    ``z_(n+1)`` from ``alpha_n(j) + W_(n+1)[j, z_(n+1)]`` (the PF guide's Pyro sampler,
    :meth:`ldhmm.inference.cavi.guides.PFGuide.sample_hidden`).

    Parameters
    ----------
    log_first : Tensor, shape (..., K)
        ``f``: the log-potential of ``z_0`` (with whatever position 0 emits).
    log_steps : Tensor, shape (..., T, K, K)
        ``W_n[j, k]``: the log-potential of ``z_(n-1) = j, z_n = k`` with whatever position n
        emits; entry n = 0 is unused.
    mask : BoolTensor, shape (..., T)
        True on real positions; each row a prefix of Trues starting at position 0.

    Returns
    -------
    Tensor, shape (..., T, K): ``log alpha_n``; past a chain's last position, its last message
    (a padded position is the identity). ``logsumexp`` of the last real one is ``log Z``.
    """
    T = log_steps.shape[-3]
    if log_first.shape[-1] != log_steps.shape[-1] or mask.shape[-1] != T:
        raise ValueError(
            f"chain shapes do not fit: first {tuple(log_first.shape)}, steps {tuple(log_steps.shape)}, "
            f"mask {tuple(mask.shape)}"
        )
    if T == 1:
        return log_first[..., None, :]
    prefix = _prefix_products(_scan_levels(_masked_steps(log_steps[..., 1:, :, :], mask[..., 1:])))
    later = torch.logsumexp(log_first[..., None, :, None] + prefix, dim=-2)
    return torch.cat([log_first[..., None, :], later], dim=-2)


def chain_posterior(
    log_initial: torch.Tensor,
    log_transition: torch.Tensor,
    log_obs: torch.Tensor,
    mask: torch.Tensor,
) -> ChainPosterior:
    """``log Z`` and the posterior of a batch of chains, from the one torch recursion.

    ``log Z`` is a log-sum-exp over hidden paths of a sum of potentials, so its gradient with
    respect to a potential is the posterior expectation of that potential's indicator: the
    gradient with respect to ``log_obs[m, n, k]`` is ``q(z_n = k)``, and with respect to
    ``log_transition[m, j, k]`` the expected number of ``j -> k`` moves. Autograd through
    :func:`chain_log_likelihood` therefore gives the forward-backward marginals without a second
    recursion. This is the torch route of :func:`ldhmm.inference.cavi.exact_chain.forward_backward`
    (float32, other devices, chains whose scaled compiled recursion underflows) and of guides
    written in torch; it is not itself differentiable.

    Parameters
    ----------
    log_initial : Tensor, shape (M or 1, K)
    log_transition : Tensor, shape (M or 1, K, K)
        ``[j, k]`` is the log-potential of moving from state j to state k.
    log_obs : Tensor, shape (M, T, K)
        Emission log-potentials at each position.
    mask : BoolTensor, shape (M, T)
        True on real positions; every row a prefix of Trues starting at position 0.

    Returns
    -------
    ChainPosterior
        ``log_normalizer`` (M,), ``state_marginals`` (M, T, K) (zero on padded positions) and
        ``transition_counts`` (M, K, K).
    """
    M, T, K = check_chain_shapes(log_initial, log_transition, log_obs, mask)
    with torch.enable_grad():
        initial = log_initial.detach().expand(M, K).clone().requires_grad_(True)
        transition = log_transition.detach().expand(M, K, K).clone().requires_grad_(True)
        obs = log_obs.detach().clone().requires_grad_(True)
        log_z = chain_log_likelihood(initial, transition, obs, mask)
        # Chains are independent: the gradient of the sum is each chain's own gradient. With
        # T = 1 no move is made and log Z does not depend on the transitions at all.
        marginals, counts = torch.autograd.grad(log_z.sum(), (obs, transition), allow_unused=True)
    if counts is None:
        counts = torch.zeros_like(transition)
    marginals = marginals * mask[..., None]
    return ChainPosterior(log_z.detach(), marginals, counts)
