"""Which sequences a model gives probability 0: the one rule every scoring route applies.

A Dirichlet-distributed group (``"sequence"`` or ``"shared"``) puts positive density on every
parameter with positive entries, so it forbids nothing. A point-estimated group (``"point"``)
may hold log-probabilities of -inf (a symbol unseen in training without pseudocount, or a file
written that way): a sequence is then impossible when no state path has positive probability
under the supports of pi, A and B. Its log-likelihood, and every bound on it, is -inf, and it
has no posterior. Deciding that is a boolean forward recursion over the supports
(:func:`first_impossible_event`); the partition workers
(:class:`ldhmm.inference.distributed.workers.PartitionWorker`) apply it in ``score`` (-inf,
never NaN) and in every other method (:class:`ImpossibleSequenceError`).
"""

from __future__ import annotations

import numpy as np
import torch

from ..parameters import VariantParameters
from ..sharing import GROUPS, POINT

__all__ = ["ImpossibleSequenceError", "supports", "first_impossible_event", "impossible_reason"]


class ImpossibleSequenceError(ValueError):
    """A sequence the model gives probability 0 where a finite answer is asked of it.

    Attributes ``sequence`` (its database position or id), ``event`` (the 0-based position of
    its first event no state path reaches) and ``symbol`` (that event's symbol code) let a
    caller name them in its own terms (the CLI: the file's line and the symbol's name).
    """

    def __init__(self, sequence, event: int, symbol: int, reason: str):
        self.sequence, self.event, self.symbol, self.reason = sequence, int(event), int(symbol), reason
        super().__init__(
            f"sequence {sequence} holds symbol {symbol} (event {event + 1}), {reason}: it has no posterior"
        )

    def __reduce__(self):  # raised on a Dask worker, re-raised in the driver
        return type(self), (self.sequence, self.event, self.symbol, self.reason)


def supports(params: VariantParameters) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Where pi (K,), A (K, K) and B (K, V) may be positive, as bool arrays; None when every
    entry may be (no point-estimated group holds a -inf), so that no sequence is impossible."""
    out, restricted = [], False
    for g in GROUPS:
        if params.sharing.kind(g) == POINT:
            support = ~torch.isneginf(params.log_point[g]).numpy()
            restricted |= not support.all()
        else:
            ref = params.prior[g] if g in params.prior else params.posterior[g]
            support = np.ones(tuple(ref.shape), dtype=bool)
        out.append(support)
    return tuple(out) if restricted else None


def first_impossible_event(support, tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The first event of each sequence that no state path of positive probability reaches.

    The boolean forward recursion ``alive_1 = pi & B[:, x_1]``, ``alive_n = (alive_(n-1) A) &
    B[:, x_n]`` on the supports; a sequence is impossible at the first n where ``alive_n`` is
    empty (and stays so).

    Parameters
    ----------
    support : the triple of :func:`supports`, or None (every sequence is possible)
    tokens : int array (M, L), padded
    mask : bool array (M, L), True on real positions

    Returns
    -------
    int64 array (M,): the 0-based position of that event, -1 for a possible sequence.
    """
    tokens, mask = np.asarray(tokens), np.asarray(mask, dtype=bool)
    first = np.full(tokens.shape[0], -1, dtype=np.int64)
    if support is None or tokens.size == 0:
        return first
    pi, A, B = support
    if pi.all() and A.all():  # every state reachable at every step: only the emissions decide
        dead = mask & ~B.any(0)[tokens]
        hit = dead.any(1)
        first[hit] = dead.argmax(1)[hit]
        return first
    moves = A.astype(np.float32)  # a count of predecessors, exact in float32 up to 2^24 states
    emits = B.T  # (V, K)
    alive = pi[None, :] & emits[tokens[:, 0]]  # (M, K), one event at a time (never M x L x K)
    for n in range(tokens.shape[1]):
        if n:
            reached = (alive.astype(np.float32) @ moves > 0) & emits[tokens[:, n]]
            alive = np.where(mask[:, n, None], reached, alive)
        newly = mask[:, n] & (first < 0) & ~alive.any(1)
        first[newly] = n
    return first


def impossible_reason(support, symbol: int) -> str:
    """Why a sequence is impossible at an event of ``symbol``, in words."""
    if support is not None and not support[2][:, symbol].any():
        return (
            "to which the model's point-estimated B gives probability 0 in every state "
            "(unseen in training; fit with a pseudocount > 0)"
        )
    return "which no state path of the model's point-estimated pi, A and B can emit there (probability 0)"
