"""Local parameters of the SVI route, moved row by row: a step touches only its minibatch's rows.

A guide's *local* parameter (declared inside plate ``"sequences"`` with ``event_dim``: one row
per sequence) is one tensor of shape (M,) + event in Pyro's parameter store. Left to Pyro, every
step of a minibatch of B sequences pays for all M rows: the store maps the whole tensor through
its constraint, the plate's ``index_select`` sends a dense gradient of M rows back, and Adam
updates all M rows, moving the rows of sequences that are not in the batch by their stale
momentum. On the MSNBC subset (M = 31,071, K = 4) that was 50 ms of a 57 ms step at B = 64,
whatever B (docs/writing-a-variant.md, "Measured").

:class:`LocalRows` serves these parameters instead. Inside a step it answers each ``pyro.param``
of a local name with the batch's rows only (a fresh leaf of shape (B,) + event, through the same
constraint), and after the backward pass :meth:`LocalRows.step` applies Adam to those rows
alone, with a step count per row, so that a sequence's row takes exactly one Adam step per
visit, the update ``torch.optim.Adam`` makes for a parameter of its own::

    m <- b1 m + (1 - b1) g,   v <- b2 v + (1 - b2) g^2,   t <- t + 1
    u <- u - lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)

on the unconstrained row ``u``. Rows of other sequences, and their moments, do not change. The
full tensors stay in the parameter store (a fit's ``param_state`` carries them); Adam's two
moments per entry and a step count per row live here.
"""

from __future__ import annotations

import pyro
import torch
from pyro.poutine.messenger import Messenger
from torch.distributions import transform_to

__all__ = ["LocalRows"]


class LocalRows(Messenger):
    """Row-wise storage and Adam for the local parameters named ``names``.

    Parameters
    ----------
    names : iterable of str
        Local parameters, already in Pyro's parameter store, each of shape (..., M) + event
        where the plate ``"sequences"`` is at dimension ``-1 - event_dim``.
    lr : float
        Adam's learning rate.
    betas : (float, float)
    eps : float

    Use: ``with rows.batch(index): loss = elbo.loss_and_grads(model, guide, batch)``, then
    ``rows.step()``.
    """

    def __init__(self, names, lr: float, betas=(0.9, 0.999), eps: float = 1e-8):
        super().__init__()
        store = pyro.get_param_store()
        constraints = store.get_state()["constraints"]
        self.names = tuple(names)
        self.lr = float(lr)
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = float(eps)
        self._full = {n: store[n].unconstrained() for n in self.names}
        self._transform = {n: transform_to(constraints[n]) for n in self.names}
        self._moments = {
            n: (torch.zeros_like(u.detach()), torch.zeros_like(u.detach())) for n, u in self._full.items()
        }
        self._counts = {}
        self._index = None
        self._rows = {}

    def batch(self, index: torch.Tensor) -> LocalRows:
        """Serve the rows ``index`` (LongTensor (B,), distinct) in the next step; a context manager."""
        self._index = index
        self._rows = {}
        return self

    def _pyro_param(self, msg):
        name = msg["name"]
        if name not in self._full or self._index is None:
            return
        event_dim = msg["kwargs"].get("event_dim")
        if name not in self._rows:
            full = self._full[name]
            dim = full.dim() - 1 - (event_dim or 0)
            rows = full.detach().index_select(dim, self._index).requires_grad_(True)
            self._rows[name] = (rows, dim)
        rows, _ = self._rows[name]
        msg["value"] = self._transform[name](rows)
        # The rows are already the batch's: the plate must not subsample them again.
        msg["kwargs"] = {**msg["kwargs"], "event_dim": None}
        msg["done"] = True

    @torch.no_grad()
    def set_rows(self, index: torch.Tensor, values: dict) -> None:
        """Overwrite rows ``index`` of local parameters with constrained ``values`` (name to
        (B,) + event along the plate dimension); their Adam moments restart at zero."""
        for name, value in values.items():
            full = self._full[name]
            dim = full.dim() - value.dim()  # value is (B,) + event, full (..., M) + event
            unconstrained = self._transform[name].inv(value.to(full.dtype))
            full.index_copy_(dim, index, unconstrained)
            for moment in self._moments[name]:
                moment.index_fill_(dim, index, 0.0)
            if name in self._counts:
                self._counts[name][index] = 0

    @torch.no_grad()
    def step(self, skip=()) -> None:
        """One Adam step on the rows served since :meth:`batch` (those that got a gradient),
        except those of the parameters named in ``skip``."""
        b1, b2 = self.betas
        index = self._index
        for name, (rows, dim) in self._rows.items():
            grad = rows.grad
            if grad is None or name in skip:
                continue
            full = self._full[name]
            m_full, v_full = self._moments[name]
            counts = self._counts.get(name)
            if counts is None:
                counts = self._counts[name] = torch.zeros(full.shape[dim], dtype=torch.int64)
            t = counts[index] + 1
            counts[index] = t
            m = m_full.index_select(dim, index).mul_(b1).add_(grad, alpha=1 - b1)
            v = v_full.index_select(dim, index).mul_(b2).addcmul_(grad, grad, value=1 - b2)
            # per-row bias corrections, shaped to broadcast along the plate dimension
            shape = (-1,) + (1,) * (full.dim() - 1 - dim)
            t = t.to(full.dtype).reshape(shape)
            correction1 = 1 - b1**t
            correction2 = 1 - b2**t
            denom = (v / correction2).sqrt_().add_(self.eps)
            new_rows = rows.detach() - (self.lr / correction1) * m / denom
            full.index_copy_(dim, index, new_rows)
            m_full.index_copy_(dim, index, m)
            v_full.index_copy_(dim, index, v)
        self._rows = {}
