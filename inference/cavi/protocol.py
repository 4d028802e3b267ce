"""The guide protocol: what the E-step driver asks of a variational family of q(Z).

A guide is any object with these members (no base class needed; :class:`typing.Protocol`
checks it structurally). The driver (:func:`ldhmm.inference.cavi.expectation.e_step_bucket`) calls only
these, for the built-in guides and a user's alike.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Protocol, runtime_checkable

import torch

__all__ = ["HiddenUpdate", "GuideProtocol"]


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

    A guide may also set ``starts``: the per-sequence starting points the E-step tries when no
    warm state exists (a subset of :data:`ldhmm.inference.cavi.expectation.STARTS`; default all of
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
        """One coordinate-ascent step on q(Z) (must not decrease the ELBO); the new state."""

    def select_state(self, state, index) -> Any:
        """The state restricted to the sequences ``index``."""

    def scatter_state(self, state, index, part) -> Any:
        """``state`` with the sequences ``index`` replaced by ``part``."""
