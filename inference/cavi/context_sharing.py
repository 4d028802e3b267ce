"""A contextual fit's groups under a :class:`ldhmm.inference.sharing.ParameterSharing`: which of
pi, A, B are per sequence (a Dirichlet prior, learned or fixed), shared by q (one
``q(theta) = Dir(posterior)`` for the database, VB) or point estimates (MAP), and their
database-level updates.

The variational EM of :mod:`ldhmm.inference.cavi.context_vem` runs every sequence's E-step under
:meth:`ContextGroups.for_e_step` (a sequence group's prior, or the :class:`FixedLogs` of a group
every sequence shares); the M-step learns the sequence groups' priors (``learn_prior``) and
:meth:`ContextGroups.updated` sets the others from the E-step's total counts: a shared group's
``q(theta) = Dir(prior + N)`` (the VB coordinate step), a point group's
``theta = (N + c) / sum (N + c)`` (MAP with a ``Dir(1 + c)`` prior; a row without any mass keeps
its value). Each update maximizes the ELBO over its group with the rest held, so the training
objective (the sequences' bounds plus :meth:`ContextGroups.database_terms`) never decreases.
LDHMM's sharing (every group per sequence, learned) is the contextual LDHMM of before, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..sharing import POINT, SEQUENCE, SHARED, ParameterSharing
from .context_vem import database_terms, fixed_dirichlet, fixed_point

__all__ = ["ContextGroups", "initial_groups"]


@dataclass(frozen=True)
class ContextGroups:
    """The database-level state of a contextual fit.

    Attributes
    ----------
    sharing : ParameterSharing
    prior : dict
        Every group's Dirichlet concentration, ``pi`` (K,), ``A`` (K, K), ``B`` (K, C, V): a
        sequence group's prior (learned or fixed), a shared group's fixed prior; a point group's
        is not used (its fixed prior, kept for the shapes).
    shared : dict
        Each shared group's ``q(theta) = Dir(shared[g])``.
    log_point : dict
        Each point group's log probabilities.
    pseudocounts : dict
        Each point group's MAP pseudo-count ``c`` (a scalar, or B's (C, V) broadcast over states).
    """

    sharing: ParameterSharing
    prior: dict
    shared: dict
    log_point: dict
    pseudocounts: dict

    @property
    def learned(self) -> tuple:
        """The groups whose prior the M-step learns."""
        return tuple(self.sharing.groups(SEQUENCE)) if self.sharing.learn_prior else ()

    @property
    def needs_totals(self) -> bool:
        """Whether an update needs the E-step's total counts (a shared or point group)."""
        return bool(self.shared or self.log_point)

    def for_e_step(self) -> dict:
        """What every sequence's E-step runs under: group -> prior tensor or :class:`FixedLogs`."""
        out = {}
        for g, a in self.prior.items():
            if g in self.shared:
                out[g] = fixed_dirichlet(self.shared[g])
            elif g in self.log_point:
                out[g] = fixed_point(self.log_point[g])
            else:
                out[g] = a
        return out

    def database_terms(self) -> float:
        """The training objective's database-level terms: the shared groups' ``-KL``, the point
        groups' log priors (0.0 where every group is per sequence)."""
        if not self.needs_totals:
            return 0.0
        priors = {g: self.prior[g] for g in self.shared}
        return database_terms(self.shared, priors, self.log_point, self.pseudocounts)

    def updated(self, prior: dict, totals: dict | None) -> ContextGroups:
        """The state after an M-step: the sequence groups' priors ``prior`` (the learned ones
        from the collapsed Newton), the shared and point groups set from ``totals``."""
        shared = {g: self.prior[g] + totals[g] for g in self.shared}
        log_point = {}
        for g, old in self.log_point.items():
            c = totals[g] + torch.as_tensor(self.pseudocounts[g], dtype=totals[g].dtype)
            row_sum = c.sum(-1, keepdim=True)
            probs = c / row_sum.clamp_min(torch.finfo(c.dtype).tiny)
            log_point[g] = torch.where(row_sum > 0, torch.log(probs), old)
        return replace(self, prior=prior, shared=shared, log_point=log_point)


def initial_groups(
    sharing: ParameterSharing,
    start_prior: dict,
    fixed_prior: dict,
    start_log_theta: dict,
    start_totals: dict,
    pseudocounts: dict,
) -> ContextGroups:
    """The state a contextual fit's EM starts from: learned sequence groups at ``start_prior``,
    every other group's prior ``fixed_prior``; a shared group's ``q(theta)`` the prior plus the
    start's total counts, a point group the start's parameters (a database-level contextual HMM,
    ``start_log_theta``, whose E-step gave ``start_totals``)."""
    learned = sharing.groups(SEQUENCE) if sharing.learn_prior else ()
    prior = {g: start_prior[g] if g in learned else fixed_prior[g] for g in start_prior}
    shared = {g: prior[g] + start_totals[g] for g in sharing.groups(SHARED)}
    log_point = {g: start_log_theta[g] for g in sharing.groups(POINT)}
    return ContextGroups(
        sharing, prior, shared, log_point, {g: pseudocounts[g] for g in sharing.groups(POINT)}
    )
