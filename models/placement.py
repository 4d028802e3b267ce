"""Where an estimator's sequences live, and whether they fit: partitions, their workers, memory.

A fit or a held-out pass of :class:`ldhmm.models.variant_hmm.VariantHMM` runs over partitions of
the database (:class:`ldhmm.inference.distributed.workers.PartitionWorker`), in this process
(:class:`~ldhmm.inference.distributed.workers.LocalBackend`) or as Dask actors
(:mod:`ldhmm.inference.distributed.dask_backend`). :func:`partitions` cuts the data into
partitions balanced by tokens; :class:`Placement` holds what else decides a pass for one model
(K, V, the emission layout, the worker settings): it builds the partitions' backend and refuses,
before anything is allocated, a share of a process that the memory estimates of
:mod:`ldhmm.models.memory` say will not fit.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

import numpy as np

from ..data import balanced_partitions, plan_partitions
from ..inference.batch import bucket_cells
from ..inference.distributed.workers import LocalBackend, PartitionWorker
from .memory import check_memory, fit_bytes

__all__ = [
    "BACKENDS",
    "Placement",
    "partitions",
    "dask_backend_module",
    "dask_backend_class",
    "in_given_order",
    "sizes_of",
]

#: Where a fit's partitions live (see :meth:`ldhmm.models.variant_hmm.VariantHMM.fit`).
BACKENDS = ("local", "dask")


def dask_backend_module():
    """:mod:`ldhmm.inference.distributed.dask_backend`, imported on first use: Dask is an optional extra
    (``pip install -e ".[dask]"``), so the core package must import without it."""
    try:
        return importlib.import_module("ldhmm.inference.distributed.dask_backend")
    except ImportError as err:
        raise ImportError(
            f"backend='dask' needs Dask: pip install 'ldhmm[dask]' (or dask[distributed]) ({err})"
        ) from None


def dask_backend_class():
    """:class:`ldhmm.inference.distributed.dask_backend.DaskBackend` (see :func:`dask_backend_module`)."""
    return dask_backend_module().DaskBackend


@dataclass(frozen=True)
class Placement:
    """The partitions and memory plan of one model's fit or held-out pass.

    Attributes
    ----------
    n_states, n_symbols : int
        K and V of the model.
    bucket_cells : int
        Padded cells per bucket (:class:`ldhmm.models.fit_settings.FitSettings`).
    sparse : bool
        The emission layout of the per-sequence counts.
    worker_options : dict
        Keyword arguments of every :class:`PartitionWorker` (guide, ``n_symbols``, ``sparse``,
        the E-step settings).
    """

    n_states: int
    n_symbols: int
    bucket_cells: int
    sparse: bool
    worker_options: dict

    def runner(self, backend: str, client, partitions: list):
        """The backend over ``partitions`` (PartitionSpecs or (sequences, positions) pairs),
        each a :class:`PartitionWorker` with :attr:`worker_options`."""
        if backend == "dask":
            return dask_backend_class()(client, partitions, self.worker_options)
        workers = []
        for part in partitions:
            if isinstance(part, tuple):
                workers.append(PartitionWorker(part[0], index=part[1], **self.worker_options))
            else:
                workers.append(PartitionWorker(part, **self.worker_options))
        return LocalBackend(workers)

    def process_sizes(self, partitions: list, backend: str) -> list:
        """(M, T, L, largest bucket or None, partitions, shortest) of the sequences each process
        holds: each partition on its own where each lives in a worker of its own (Dask), all of
        them together in this process (``"local"``). A directory's partition is known by its
        counts only: its longest sequence is bounded by its tokens, its largest bucket by
        ``bucket_cells``."""
        sizes = []
        for part in partitions:
            if isinstance(part, tuple):
                sizes.append(sizes_of(part[0], self.bucket_cells))
            else:
                sizes.append((int(part.n_sequences), int(part.n_tokens), int(part.n_tokens), None, 1, 1))
        if backend != "dask" and len(sizes) > 1:
            largest = [s[3] for s in sizes]
            M, T = sum(s[0] for s in sizes), sum(s[1] for s in sizes)
            bucket = None if None in largest else tuple(map(max, zip(*largest)))
            sizes = [(M, T, max(s[2] for s in sizes), bucket, len(sizes), min(s[5] for s in sizes))]
        return sizes

    def check_sizes(self, sizes: list, doing: str, knob: str, estimate=fit_bytes) -> None:
        """Refuse before allocating when ``estimate`` of a process's share exceeds the memory
        limit (:func:`ldhmm.models.memory.check_memory`); ``sizes``: :meth:`process_sizes`."""
        K, V = self.n_states, self.n_symbols
        for i, (M, T, L, largest, together, _) in enumerate(sizes):
            where = f"partition {i} of {len(sizes)}: " if len(sizes) > 1 else ""
            check_memory(
                estimate(K, V, M, T, L, self.bucket_cells, self.sparse, largest, together),
                f"{doing} {where}K = {K} states, V = {V} symbols on {M} sequences ({T} tokens)",
                knob,
            )

    def check_memory(self, seqs, doing: str, knob: str, estimate=fit_bytes) -> None:
        """:meth:`check_sizes` of sequences held in this process."""
        self.check_sizes([sizes_of(seqs, self.bucket_cells)], doing, knob, estimate)

    def check_partitions(self, sizes: list, backend: str, doing: str = "fitting", estimate=fit_bytes) -> None:
        """:meth:`check_sizes` on a partitioned path, naming the knob that helps there."""
        knob = (
            "more partitions (n_partitions / --partitions), fewer states"
            if backend == "dask"
            else "fewer states (n_states / --states) or fewer sequences"
        )
        self.check_sizes(sizes, doing, knob, estimate)


def partitions(data, backend: str, client, n_partitions, validate) -> tuple[list, bool]:
    """Check ``backend``/``client``/``n_partitions`` and cut ``data`` (sequences, checked by
    ``validate``, or a directory from :func:`ldhmm.data.write_partitioned`) into partitions
    balanced by tokens: (PartitionSpecs or (sequences, positions) pairs, whether ``data``
    is a directory)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "dask" and client is None:
        raise ValueError("backend='dask' needs client= (a distributed.Client)")
    if n_partitions is None:
        n_partitions = 2 * len(client.scheduler_info()["workers"]) if backend == "dask" else 1
    if isinstance(n_partitions, bool) or not isinstance(n_partitions, (int, np.integer)) or n_partitions < 1:
        raise ValueError(f"n_partitions must be an integer >= 1, got {n_partitions!r}")
    if isinstance(data, (str, os.PathLike)):
        return plan_partitions(data, int(n_partitions)), True
    seqs = validate(data)
    parts = balanced_partitions([len(s) for s in seqs], int(n_partitions))
    return [([seqs[i] for i in idx], idx) for idx in parts], False


def in_given_order(partitions) -> list:
    """The sequences of in-memory partitions ((sequences, positions) pairs) back in the order
    given, for the same hash as an unpartitioned fit."""
    placed = sorted((int(i), p, k) for p, (_, at) in enumerate(partitions) for k, i in enumerate(at))
    return [partitions[p][0][k] for _, p, k in placed]


def sizes_of(seqs, max_cells: int) -> tuple:
    """(sequences, tokens, the longest, (the largest bucket's padded cells, the most sequences
    in a bucket), one partition, the shortest) of ``seqs``."""
    lengths = [len(x) for x in seqs]
    cells, _, most = bucket_cells(lengths, max_cells)
    return len(lengths), int(sum(lengths)), max(lengths, default=0), (cells, most), 1, min(lengths, default=1)
