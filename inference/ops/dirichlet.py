"""Dirichlet kernels: expected logs, KL divergences, and the Newton-Raphson M-step.

All functions are pure and batched over leading dimensions; the Dirichlet's event dimension
is always the last one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "expected_log_dirichlet",
    "kl_dirichlet",
    "dirichlet_prior_objective",
    "newton_dirichlet",
    "NewtonResult",
    "MIN_CONCENTRATION",
    "sample_dirichlet",
    "dirichlet_log_density",
    "MAX_CONCENTRATION",
    "log_multivariate_beta",
]

# Bounds of a learned concentration. Below MIN the digamma/trigamma terms lose all precision;
# above MAX the sequences agree so closely that the data look like one shared HMM, and the
# Dirichlet has effectively collapsed to a point: we cap and report instead of diverging.
MIN_CONCENTRATION = 1e-6
MAX_CONCENTRATION = 1e6
# Largest change of log(a) in one Newton step of the collapsed M-step.
MAX_LOG_STEP = 5.0


def expected_log_dirichlet(
    concentration: torch.Tensor, total: torch.Tensor | None = None, digamma: torch.Tensor | None = None
) -> torch.Tensor:
    """``E[log theta]`` under ``theta ~ Dir(concentration)``: the torch route's one formula.

    Parameters
    ----------
    concentration : Tensor, shape (..., D), positive
    total : Tensor, shape (...), optional
        The concentration's row sums, when the last dimension holds only some of a row's
        entries (a sparse emission row's own symbols: by the Dirichlet's aggregation property,
        ``E[log theta_d]`` of those entries needs only the row's total). Default: the sum over
        the last dimension.
    digamma : Tensor, shape (..., D), optional
        ``psi(concentration)``, when the caller has computed it already (saves a pass of
        digamma over a K x V table).

    Returns
    -------
    Tensor, shape (..., D): ``psi(g_d) - psi(sum_j g_j)``
    """
    psi = torch.digamma(concentration) if digamma is None else digamma
    total = concentration.sum(-1) if total is None else total
    return psi - torch.digamma(total)[..., None]


def log_multivariate_beta(concentration: torch.Tensor) -> torch.Tensor:
    """``log B(g) = sum_d lgamma(g_d) - lgamma(sum_d g_d)`` over the last dimension."""
    return torch.lgamma(concentration).sum(-1) - torch.lgamma(concentration.sum(-1))


def kl_dirichlet(posterior: torch.Tensor, prior: torch.Tensor) -> torch.Tensor:
    """``KL(Dir(posterior) || Dir(prior))`` over the last dimension.

    Parameters
    ----------
    posterior, prior : Tensor, shape (..., D), broadcastable

    Returns
    -------
    Tensor, shape (...)
    """
    g_sum = posterior.sum(-1)
    a_sum = prior.sum(-1)
    return (
        torch.lgamma(g_sum)
        - torch.lgamma(posterior).sum(-1)
        - torch.lgamma(a_sum)
        + torch.lgamma(prior).sum(-1)
        + ((posterior - prior) * expected_log_dirichlet(posterior)).sum(-1)
    )


def dirichlet_prior_objective(
    concentration: torch.Tensor, sum_expected_log: torch.Tensor, n_sequences: float
) -> torch.Tensor:
    """The M-step objective of one Dirichlet group, ``sum_m E_q[log Dir(theta_m | a)]``.

    ``f(a) = M (lgamma(sum a) - sum_d lgamma(a_d)) + sum_d (a_d - 1) t_d`` with
    ``t_d = sum_m E_q[log theta_md]``.

    Parameters
    ----------
    concentration : Tensor, shape (G, D)
        ``a``: G independent groups (e.g. the K rows of alpha_A).
    sum_expected_log : Tensor, shape (G, D)
        ``t``.
    n_sequences : float
        ``M``.

    Returns
    -------
    Tensor, shape (G,)
    """
    a = concentration
    return n_sequences * (torch.lgamma(a.sum(-1)) - torch.lgamma(a).sum(-1)) + (
        (a - 1.0) * sum_expected_log
    ).sum(-1)


@dataclass
class NewtonResult:
    """Outcome of :func:`newton_dirichlet`.

    Attributes
    ----------
    concentration : Tensor, shape (G, D)
    objective : Tensor, shape (G,)
        ``f`` at the returned point.
    n_iter : int
    capped : bool
        Whether any value hit ``MAX_CONCENTRATION`` (the sequences agree so closely that
        the prior degenerates to a point mass; reported, never returned as inf).
    """

    concentration: torch.Tensor
    objective: torch.Tensor
    n_iter: int
    capped: bool


def newton_dirichlet(
    initial: torch.Tensor,
    sum_expected_log: torch.Tensor,
    n_sequences: float,
    max_iter: int = 100,
    tol: float = 1e-10,
    min_value: float = MIN_CONCENTRATION,
    max_value: float = MAX_CONCENTRATION,
) -> NewtonResult:
    """Maximize the Dirichlet M-step objective of G independent groups by Newton-Raphson.

    The Hessian is ``diag(h) + z 1 1^T`` with ``h_d = -M psi'(a_d)`` and
    ``z = M psi'(sum a)``, so the Newton direction costs O(D) (Minka 2000; the paper's
    "w = M Psi(sum a)" is a typo for the trigamma). Each group's step ``eta`` starts at 1 and
    is halved while the new point is infeasible (``a <= 0``) or does not increase ``f``,
    which makes every iteration an ascent step. Groups converge independently.

    Parameters
    ----------
    initial : Tensor, shape (G, D), positive
    sum_expected_log : Tensor, shape (G, D)
        ``t_d = sum_m E_q[log theta_md]``; finite.
    n_sequences : float
        ``M > 0``.
    max_iter : int
    tol : float
        Stop a group when its largest relative change of ``a`` falls below ``tol``.
    min_value, max_value : float
        Box the iterates are clamped to.

    Returns
    -------
    NewtonResult
    """
    if n_sequences <= 0:
        raise ValueError(f"the M-step needs at least one sequence, got M={n_sequences}")
    if not torch.isfinite(sum_expected_log).all():
        raise ValueError("non-finite sufficient statistics reached the M-step")
    a = initial.clamp(min_value, max_value).clone()
    t = sum_expected_log
    M = float(n_sequences)
    f = dirichlet_prior_objective(a, t, M)
    active = torch.ones(a.shape[0], dtype=torch.bool, device=a.device)
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007 - the count is reported
        g = M * (torch.digamma(a.sum(-1, keepdim=True)) - torch.digamma(a)) + t
        h = -M * torch.polygamma(1, a)
        z = M * torch.polygamma(1, a.sum(-1, keepdim=True))
        c = (g / h).sum(-1, keepdim=True) / (1.0 / z + (1.0 / h).sum(-1, keepdim=True))
        step = (g - c) / h
        eta = torch.ones_like(f)
        accepted = torch.zeros_like(active)
        new_a = a.clone()
        new_f = f.clone()
        for _ in range(60):
            candidate = a - eta[:, None] * step
            feasible = (candidate > 0).all(-1)
            candidate = candidate.clamp(min_value, max_value)
            cand_f = dirichlet_prior_objective(candidate, t, M)
            ok = feasible & (cand_f >= f) & ~accepted & active
            new_a[ok] = candidate[ok]
            new_f[ok] = cand_f[ok]
            accepted |= ok
            if bool((accepted | ~active).all()):
                break
            eta = torch.where(accepted, eta, eta * 0.5)
        rel_change = ((new_a - a).abs() / a).amax(-1)
        a, f = new_a, new_f
        # A group whose step was rejected 60 times sits at its optimum up to float precision.
        active = active & accepted & (rel_change > tol)
        if not bool(active.any()):
            break
    capped = bool((a >= max_value).any())
    return NewtonResult(concentration=a, objective=f, n_iter=n_iter, capped=capped)


def sample_dirichlet(concentration: torch.Tensor) -> torch.Tensor:
    """One draw per row from ``Dir(concentration)`` (torch's global RNG), kept off exact zeros.

    Parameters
    ----------
    concentration : Tensor, shape (..., D)

    Returns
    -------
    Tensor, shape (..., D): rows on the simplex, every entry >= the dtype's smallest normal.
    """
    theta = torch.distributions.Dirichlet(concentration).sample()
    tiny = torch.finfo(theta.dtype).tiny
    theta = theta.clamp_min(tiny)
    return theta / theta.sum(-1, keepdim=True)


def dirichlet_log_density(theta: torch.Tensor, concentration: torch.Tensor) -> torch.Tensor:
    """Sum of Dirichlet log-densities over every row of each leading-index block.

    Parameters
    ----------
    theta : Tensor, shape (M, ..., D), rows on the simplex
    concentration : Tensor, broadcastable to ``theta``

    Returns
    -------
    Tensor, shape (M,)
    """
    log_p = (
        torch.lgamma(concentration.sum(-1))
        - torch.lgamma(concentration).sum(-1)
        + ((concentration - 1.0) * torch.log(theta)).sum(-1)
    )
    log_p = log_p.expand(theta.shape[:-1])
    return log_p.reshape(theta.shape[0], -1).sum(-1)
