"""The guide protocol: what the E-step driver asks of a variational family of q(Z).

A guide is any object with these members (no base class needed; :class:`typing.Protocol`
checks it structurally). The driver (:func:`ldhmm.inference.cavi.expectation.e_step_bucket`) calls only
these, for the built-in guides and a user's alike.
"""

from __future__ import annotations

import inspect
from typing import Any, NamedTuple, Optional, Protocol, runtime_checkable

import torch

__all__ = ["HiddenUpdate", "GuideProtocol", "SCHEDULE_ARGUMENTS", "takes_schedule", "update_hidden"]

#: The keyword arguments through which the driver tells ``update_hidden`` where it is.
SCHEDULE_ARGUMENTS = ("iteration", "sweep")


class HiddenUpdate(NamedTuple):
    """What the E-step needs from a q(Z) update.

    Attributes
    ----------
    state_marginals : Tensor, shape (M, T, K)
    transition_counts : Tensor, shape (M, K, K)
    entropy : Tensor, shape (M,)
        ``H[q(Z)]``.
    """

    state_marginals: torch.Tensor
    transition_counts: torch.Tensor
    entropy: torch.Tensor


@runtime_checkable
class GuideProtocol(Protocol):
    """A variational family of q(Z) for coordinate ascent.

    Attributes
    ----------
    name : str
        Short string, used in saved models and result tables.
    compiled_update : str or None
        The per-sequence q(Z) update of the compiled E-step kernel that computes exactly what
        :meth:`update_hidden` computes: ``"pf"`` (forward-backward) or ``"ff"`` (one exact
        mean-field pass; the guide's state is then the factors ``phi`` (M, T, K)), see
        :data:`ldhmm.inference.cavi.kernels.fused_sweeps.FAMILIES`. ``None``: the driver runs
        :meth:`update_hidden` sweep by sweep in torch. The driver also uses the torch route
        where the kernel does not apply (tensors not float64 on CPU, kernels switched off) and
        for sequences whose compiled recursion underflowed.

    ``update_hidden`` may take the keyword arguments ``iteration`` and ``sweep`` (or
    ``**kwargs``): the driver then passes the EM iteration (1-based; ``None`` outside a fit:
    held-out scoring, posteriors) and the sweep of this E-step (1-based), so that an update can
    follow a schedule (:func:`update_hidden`). A guide that declares ``compiled_update`` and
    has its own ``update_hidden`` must also set ``matches_kernel = True``, saying that its update
    computes exactly what the kernel does (the kernel runs in its place); otherwise it is refused
    (:func:`ldhmm.inference.cavi.guides.check_compiled_update`).

    A guide may also set ``starts``: the per-sequence starting points the E-step tries when no
    warm state exists (a subset of :data:`ldhmm.inference.cavi.sequence_starts.STARTS`; default all of
    them). A family that is the exact chain leaves out ``"chain"``, its own best start; a
    guide with ``"chain"`` among its starts is by default initialized from the PF fit
    (``init="auto"`` of the estimators).

    Shapes: ``log_initial`` (M or 1, K), ``log_transition`` (M or 1, K, K), ``log_obs``
    (M, T, K), ``mask`` (M, T) bool.
    """

    name: str
    compiled_update: Optional[str]

    def init_state(self, log_initial, log_transition, log_obs, mask) -> Any:
        """Per-batch state carried between sweeps and EM iterations (``None`` if none)."""

    def update_hidden(self, state, log_initial, log_transition, log_obs, mask) -> tuple[HiddenUpdate, Any]:
        """One coordinate-ascent step on q(Z) (must not decrease the ELBO); the new state.
        Optionally also ``*, iteration=None, sweep=1`` (see the class docstring)."""

    def select_state(self, state, index) -> Any:
        """The state restricted to the sequences ``index``."""

    def scatter_state(self, state, index, part) -> Any:
        """``state`` with the sequences ``index`` replaced by ``part``."""


def takes_schedule(method) -> bool:
    """Whether an ``update_hidden`` takes the keywords :data:`SCHEDULE_ARGUMENTS` (named, or ``**kwargs``)."""
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: the five positional arguments only
        return False
    named = {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    return set(SCHEDULE_ARGUMENTS) <= named or any(p.kind is p.VAR_KEYWORD for p in params)


def update_hidden(
    guide, state, log_initial, log_transition, log_obs, mask, *, iteration=None, sweep=1
) -> tuple[HiddenUpdate, Any]:
    """``guide.update_hidden(...)``, with ``iteration`` and ``sweep`` where it takes them.

    Parameters
    ----------
    guide : GuideProtocol
    state, log_initial, log_transition, log_obs, mask
        As for :meth:`GuideProtocol.update_hidden`.
    iteration : int or None
        The EM iteration (1-based); None outside a fit (held-out scoring, posteriors).
    sweep : int
        The sweep of this E-step (1-based).
    """
    method = guide.update_hidden
    if takes_schedule(method):
        return method(state, log_initial, log_transition, log_obs, mask, iteration=iteration, sweep=sweep)
    return method(state, log_initial, log_transition, log_obs, mask)
