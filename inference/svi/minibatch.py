"""What a model of the SVI route is called with: a padded, masked batch of a sequence database.

A Pyro model or guide of :mod:`ldhmm.inference.svi.svi_fit` is a function of one argument, a
:class:`SequenceBatch`: some sequences of a database of ``n_sequences``, padded to a common
length. It declares every per-sequence variable inside ``batch.plate()``, which is
``pyro.plate("sequences", n_sequences, subsample=batch.index, dim=-1)``: Pyro then scales the
batch's log-densities by ``n_sequences / batch_size`` (an unbiased estimate of the whole
database's ELBO) and hands a guide parameter declared inside it with ``event_dim`` only the
batch's rows (its *local* parameters).

:func:`length_batches` cuts a database into such batches: sorted by length, so padding is
small, and of equal size (within one), so every sequence weighs the same in an epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyro
import torch

__all__ = ["PLATE", "SequenceBatch", "auto_batch_size", "length_batches", "pad_batch"]

#: The name of the plate over sequences (the one plate of a model of the route, ``dim=-1``).
PLATE = "sequences"


@dataclass(frozen=True)
class SequenceBatch:
    """A padded batch of sequences of a database.

    Attributes
    ----------
    tokens : LongTensor, shape (B, T)
        Symbols in ``0..n_symbols-1``; padding positions hold 0.
    mask : BoolTensor, shape (B, T)
        True on real positions (a prefix of every row).
    index : LongTensor, shape (B,)
        Positions of these sequences in the database (the plate's subsample indices), in
        increasing order: a batch of the whole database is then ``0..M-1``, the order in which
        Pyro leaves parameters that it does not subsample.
    n_sequences : int
        M, the size of the whole database.
    n_states : int
        K, the number of hidden states of the model.
    n_symbols : int
        V, the vocabulary size.
    dtype : torch.dtype
        Floating type of the model's parameters.
    """

    tokens: torch.Tensor
    mask: torch.Tensor
    index: torch.Tensor
    n_sequences: int
    n_states: int
    n_symbols: int
    dtype: torch.dtype = torch.float64

    @property
    def batch_size(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def lengths(self) -> torch.Tensor:
        """LongTensor, shape (B,)."""
        return self.mask.sum(-1)

    @property
    def n_tokens(self) -> int:
        return int(self.mask.sum())

    def plate(self) -> pyro.plate:
        """``pyro.plate("sequences", n_sequences, subsample=index, dim=-1)``: a fresh plate."""
        return pyro.plate(PLATE, self.n_sequences, subsample=self.index, dim=-1)

    def to(self, device) -> SequenceBatch:
        """The batch with its tensors on ``device`` (the batch itself where they are there)."""
        if self.tokens.device == torch.device(device):
            return self
        return replace(
            self, tokens=self.tokens.to(device), mask=self.mask.to(device), index=self.index.to(device)
        )


def pad_batch(sequences, index, n_sequences: int, n_states: int, n_symbols: int, dtype) -> SequenceBatch:
    """One :class:`SequenceBatch` of the sequences ``sequences[i] for i in index`` (rows in
    increasing ``index``).

    Parameters
    ----------
    sequences : list of int64 arrays (validated), the whole database
    index : array of int, shape (B,)
    n_sequences, n_states, n_symbols : int
    dtype : torch.dtype
    """
    index = np.sort(np.asarray(index, dtype=np.int64))
    if index.size == 0 or index[0] < 0 or index[-1] >= n_sequences or np.any(np.diff(index) == 0):
        raise ValueError(f"index must hold distinct positions in 0..{n_sequences - 1}")
    lengths = np.array([len(sequences[i]) for i in index], dtype=np.int64)
    tokens = np.zeros((len(index), int(lengths.max())), dtype=np.int64)
    for row, i in enumerate(index):
        tokens[row, : lengths[row]] = sequences[i]
    width = tokens.shape[1]
    return SequenceBatch(
        tokens=torch.from_numpy(tokens),
        mask=torch.arange(width)[None, :] < torch.from_numpy(lengths)[:, None],
        index=torch.from_numpy(index),
        n_sequences=int(n_sequences),
        n_states=int(n_states),
        n_symbols=int(n_symbols),
        dtype=dtype,
    )


def length_batches(
    sequences, batch_size: int, n_states: int, n_symbols: int, dtype=torch.float64, device=None
) -> list[SequenceBatch]:
    """The database in ``ceil(M / batch_size)`` padded batches of consecutive lengths.

    Sequences are sorted by length (stable) and split into batches whose sizes differ by at
    most one, so that the scale ``M / batch_size`` Pyro gives each batch is the same within
    one sequence and an epoch (every batch once) weighs every sequence equally. Memory of one
    step is that of one batch, whatever M is.

    Parameters
    ----------
    sequences : list of int64 arrays (validated)
    batch_size : int
        Sequences per batch at most (the last batches may have one fewer).
    n_states, n_symbols : int
    dtype : torch.dtype
    device : torch.device or str, optional
        Where the batches' tensors go (default: the CPU).

    Returns
    -------
    list of SequenceBatch, shortest sequences first.
    """
    if int(batch_size) < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    M = len(sequences)
    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=M)
    order = np.argsort(lengths, kind="stable")
    n_batches = -(-M // int(batch_size))
    batches = [
        pad_batch(sequences, part, M, n_states, n_symbols, dtype) for part in np.array_split(order, n_batches)
    ]
    return batches if device is None else [b.to(device) for b in batches]


#: ``batch_size="auto"``: the smallest batch, and the most steps an epoch takes.
AUTO_MIN_BATCH, AUTO_STEPS_PER_EPOCH = 64, 128


def auto_batch_size(n_sequences: int) -> int:
    """Minibatch size of ``batch_size="auto"``: ``max(64, ceil(M / 128))``.

    Small databases get 64 (on Entree, 380 sequences, 256 left too few steps per epoch: the
    rule stopped sticky LDHMM 0.012 nats/token lower); from 8,192 sequences on an epoch stays
    at 128 steps of Adam at a fixed rate (on the MSNBC subset, 64 took 486 noisy steps per epoch
    and settled 0.008 nats/token below 256, at twice the seconds per epoch).
    """
    return max(AUTO_MIN_BATCH, -(-int(n_sequences) // AUTO_STEPS_PER_EPOCH))
