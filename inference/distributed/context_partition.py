"""One partition of a contextual model's database (emission rows chosen by (state, context)):
its sequences in context batches and their per-sequence variational state, in this process or
as a Dask actor.

The contextual models (:class:`ldhmm.models.contextual.ContextualLDHMM`,
:class:`ldhmm.models.contextual_hmm.ContextualHMM`) fit over :class:`ContextPartitionWorker`
objects as the plain models fit over :class:`ldhmm.inference.distributed.workers.PartitionWorker`:
the driver sends the parameters (the priors, or the point parameters: O(K C V) numbers) to every
partition and adds what comes back in partition order, so a fit's numbers depend on the
partitioning and never on how many processes or threads ran the partitions. The calls that
change a partition's state are named ``e_step`` (journaled by the Dask backend, which replays
them on a partition rebuilt after its worker was lost: each is a deterministic function of the
parameters and the state before); ``reset`` forgets the state (a new restart).

The context rows of a partition's positions are computed where it lives, from the context
table the driver built on the whole training set (its JSON record travels, not the sequences).
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

from ...data import PartitionSpec, read_partition
from ..cavi.context_vem import (
    FixedLogs,
    best_of_starts,
    context_batches,
    count_table,
    e_step,
    point_e_step,
    total_counts,
)
from ..cavi.kernels.dirichlet_multinomial import table_sums
from ..contexts import ContextTable, context_ids

__all__ = [
    "ContextPartitionWorker",
    "POINT",
    "VARIATIONAL",
    "FIT_SWEEPS",
    "FIT_SWEEP_TOL",
    "SCORE_SWEEPS",
    "SCORE_TOL",
    "partition_positions",
]

#: A fit's E-step: sweeps per sequence (warm-started: one suffices) and the relative change at
#: which a sequence stops early.
FIT_SWEEPS, FIT_SWEEP_TOL = 1, 1e-6
#: A held-out E-step (scoring): sweeps per sequence at most, and the relative change that stops it.
SCORE_SWEEPS, SCORE_TOL = 200, 1e-9

#: ``e_step``'s kinds: Baum-Welch's E-step under point parameters, and the variational E-step
#: under Dirichlet priors.
POINT, VARIATIONAL = "point", "variational"


def partition_positions(ids: list[str]) -> np.ndarray:
    """The database positions of a directory partition's sequences (int64): the ids where they
    are positions (data written without ids), else a CRC-32 of each id (as the plain models')."""
    if all(i.isdigit() for i in ids):
        return np.array([int(i) for i in ids], dtype=np.int64)
    return np.array([zlib.crc32(i.encode()) for i in ids], dtype=np.int64)


class ContextPartitionWorker:
    """The sequences of one partition in context batches, and their variational state.

    Parameters
    ----------
    data : list of 1-D int arrays, PartitionSpec, or list of ContextBatch
        Sequences (symbols 0..V-1, validated by the driver), a partition of a directory written
        by :func:`ldhmm.data.write_partitioned` (read here), or batches already made (the
        in-process fit, which made them to count the contexts).
    context_table : dict
        :meth:`ldhmm.inference.contexts.ContextTable.to_json` of the model's table.
    n_symbols : int
        V.
    index : array of int, optional
        The database positions of the sequences (default: 0..M-1; a PartitionSpec's from its
        ids, :func:`partition_positions`).
    sweeps, sweep_tol : int, float
        A fit's E-step: coordinate-ascent sweeps per sequence (warm from the state before) and
        the relative change at which a sequence stops early.
    """

    def __init__(
        self,
        data,
        context_table: dict,
        n_symbols: int,
        index=None,
        sweeps: int = FIT_SWEEPS,
        sweep_tol: float = FIT_SWEEP_TOL,
    ):
        self.n_symbols = int(n_symbols)
        self.table = ContextTable.from_json(context_table, self.n_symbols)
        if isinstance(data, PartitionSpec):
            db = read_partition(data)
            data = db.sequences
            if index is None:
                index = partition_positions(list(db.ids))
        if data and not hasattr(data[0], "pair_context"):
            self.batches = context_batches(data, context_ids(data, self.table), self.n_symbols)
        else:
            self.batches = list(data)
        n = sum(b.n_sequences for b in self.batches)
        self.index = np.arange(n, dtype=np.int64) if index is None else np.asarray(index, dtype=np.int64)
        if self.index.shape != (n,):
            raise ValueError(f"index has {self.index.size} positions for {n} sequences")
        self.sweeps, self.sweep_tol = int(sweeps), float(sweep_tol)
        self.counts = None
        self.factors = None
        self._table = None
        self.n_states = None  # K: set by each E-step from its parameters

    def size(self) -> tuple[int, int]:
        """(sequences, tokens) of this partition."""
        return self.index.size, int(sum(int(b.mask.sum()) for b in self.batches))

    def reset(self) -> None:
        """Forget the variational state (a new restart)."""
        self.counts = self.factors = self._table = None

    def e_step(self, kind: str, params: dict, family: str = "pf", totals: bool = False):
        """One E-step of every sequence, kept as this partition's state; its sums.

        ``kind`` :data:`POINT`: the contextual HMM with log parameters ``params`` (``pi``,
        ``A``, ``B``); returns ``(log p(x) summed, total counts)`` (:func:`total_counts`).
        :data:`VARIATIONAL`: ``sweeps`` sweeps of the ``family``'s coordinate ascent under
        the priors ``params`` (a group every sequence shares as its
        :class:`ldhmm.inference.cavi.context_vem.FixedLogs`) from the counts (and FF factors)
        kept; returns the bounds summed, and with ``totals`` the total counts beside them.
        Sums run over the batches in order, each batch's sequences in order."""
        self._table = None
        self.n_states = int(_values(params["A"]).shape[0])
        if kind == POINT:
            results = [point_e_step(params, b) for b in self.batches]
            self.counts, self.factors = [r.counts for r in results], None
            bound = float(sum(r.bounds.sum() for r in results))
            return bound, total_counts(self.counts, self.batches, self._shape_B())
        if kind != VARIATIONAL:
            raise ValueError(f"e_step kind must be {POINT!r} or {VARIATIONAL!r}, got {kind!r}")
        counts = self.counts or [None] * len(self.batches)
        factors = self.factors or [None] * len(self.batches)
        results = [
            e_step(params, b, c, self.sweeps, self.sweep_tol, family, f)
            for b, c, f in zip(self.batches, counts, factors)
        ]
        self.counts = [r.counts for r in results]
        self.factors = [r.marginals if family == "ff" else None for r in results]
        bound = float(sum(r.bounds.sum() for r in results))
        if not totals:
            return bound
        return bound, total_counts(self.counts, self.batches, self._shape_B())

    def count_sums(self, alphas: dict, rows: dict) -> dict:
        """The collapsed M-step's Dirichlet-multinomial sums over this partition's counts
        (:func:`ldhmm.inference.cavi.kernels.dirichlet_multinomial.table_sums`); the table is
        built at the first call after an E-step and kept for the M-step's other passes."""
        if self.counts is None:
            raise RuntimeError("count_sums needs an E-step first")
        if self._table is None:
            self._table = count_table(self.counts, self.batches, self._shape_B())
        return table_sums(self._table, alphas, rows)

    def _shape_B(self) -> tuple:
        """(K, C, V) of the emission rows (K: the last E-step's parameters')."""
        return self.n_states, self.table.n_contexts, self.n_symbols

    def scores(
        self,
        kind: str,
        params: dict,
        family: str = "pf",
        max_sweeps: int = SCORE_SWEEPS,
        tol: float = SCORE_TOL,
    ):
        """(database positions, score) of every sequence, held out: the exact ``log p(x)`` under
        point parameters (:data:`POINT`), or the ``family``'s bound after the held-out E-step
        (:func:`ldhmm.inference.cavi.context_vem.best_of_starts`) under the priors. Keeps no
        state."""
        keys, values = [], []
        for b in self.batches:
            if kind == POINT:
                bounds = point_e_step(params, b).bounds
            else:
                bounds = best_of_starts(params, b, max_sweeps, tol, family).bounds
            keys.append(self.index[b.index.numpy()])
            values.append(bounds.numpy())
        if not keys:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        return np.concatenate(keys), np.concatenate(values)


def _values(group):
    """A group's parameter array: a tensor, or a :class:`FixedLogs`' logs."""
    return group.logs if isinstance(group, FixedLogs) else group


def as_tensors(params: dict) -> dict:
    """Parameters as contiguous float64 CPU tensors (what travels to a worker); a group every
    sequence shares (:class:`FixedLogs`) as it is."""
    return {
        g: v if isinstance(v, FixedLogs) else torch.as_tensor(np.ascontiguousarray(v), dtype=torch.float64)
        for g, v in params.items()
    }
