"""Where the SVI route runs: the torch device a user names, checked once.

The route's tensors (minibatches, Pyro's parameters, the forward scan) live on one device.
``"cpu"`` is the default and the tested one. Another device (``"cuda"``, ``"cuda:1"``, a
``torch.device``) is passed through to torch: minibatches and parameters are moved there and
the fit runs inside ``torch.device(device)``, so that tensors a model creates itself land
there too; it is not tested here (no such device on the machines the tests run on).
"""

from __future__ import annotations

import contextlib

import torch

__all__ = ["as_device", "on_device"]


def as_device(device) -> torch.device:
    """``device`` (a string such as ``"cpu"`` or ``"cuda:0"``, or a ``torch.device``) as a
    ``torch.device``, or one ``ValueError`` line naming it: not a device, or one torch cannot
    allocate on here."""
    try:
        dev = torch.device(device)
    except (TypeError, RuntimeError, ValueError):
        raise ValueError(f"device must be a torch device such as 'cpu' or 'cuda:0', got {device!r}") from None
    if dev.type == "meta":
        raise ValueError("device 'meta' holds no values: use 'cpu' or an accelerator")
    try:
        torch.empty(0, device=dev)
    except (RuntimeError, AssertionError, ValueError) as err:
        reason = " ".join(str(err).split()).split(". ")[0]  # torch's first sentence says it
        raise ValueError(f"device {str(dev)!r} cannot be used here: {reason}") from None
    return dev


def on_device(device: torch.device):
    """A context in which torch creates tensors on ``device``: nothing on the CPU (torch's
    device context intercepts every torch call, a cost the CPU does not need)."""
    return contextlib.nullcontext() if device.type == "cpu" else device
