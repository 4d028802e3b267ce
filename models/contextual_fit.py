"""Where a contextual model's fit and held-out scores run: its context statistics from the whole
training set, its partitions (in this process or as Dask actors), the best of its restarts.

The contextual models (:class:`ldhmm.models.contextual.ContextualLDHMM`,
:class:`ldhmm.models.contextual_hmm.ContextualHMM`) take the plain models' ``backend``,
``client`` and ``n_partitions`` (see :meth:`ldhmm.models.variant_hmm.VariantHMM.fit`): sequences
in this process are one partition (every E-step over the batches made to count the contexts);
``n_partitions``, a directory written by :func:`ldhmm.data.write_partitioned` or
``backend="dask"`` cut the database into partitions balanced by tokens
(:func:`ldhmm.models.placement.partitions`), each a
:class:`ldhmm.inference.distributed.context_partition.ContextPartitionWorker` that keeps its
sequences' variational state. Each E-step is one round (the parameters out, each partition's
sums back, added in partition order), each Newton pass of the M-step one more; so a fit's
numbers depend on the partitioning and never on the number of Dask workers, and a lost worker's
partitions are rebuilt exactly by the Dask backend's journal.

The context table, the positions per context row and the context smoothing's pseudo-counts are
statistics of the whole training set, computed in this process (for a directory, one pass over
its files here; the E-steps read the files where the partitions live).
"""

from __future__ import annotations

import os

import numpy as np

from ..data import load_partitioned, read_manifest
from ..data.fingerprint import training_record
from ..inference.cavi.context_vem import context_batches, count_table
from ..inference.cavi.kernels.dirichlet_multinomial import table_sums
from ..inference.contexts import (
    build_context_table,
    context_ids,
    context_order,
    smoothing_pseudocounts,
)
from ..inference.distributed.context_partition import ContextPartitionWorker, as_tensors
from ..inference.distributed.workers import LocalBackend, reduce_count_sums
from .base import data_source, keep_vocabulary
from .fit_starts import best_of
from .memory import check_memory, contextual_fit_bytes
from .placement import dask_backend_class, in_given_order
from .placement import partitions as cut_partitions

__all__ = ["fit_contextual", "held_out_scores", "partition_sums", "check_fit_memory", "sum_rounds"]


def check_fit_memory(model, n_sequences: int, n_tokens: int, where: str = "") -> None:
    """A one-line refusal, before any work, of a fit (or a held-out E-step) of a contextual model
    (its ``context_table_`` built) whose process would hold ``n_sequences`` sequences of
    ``n_tokens`` tokens in all, when that would not fit in memory."""
    K, C, V = model.n_states, model.context_table_.n_contexts, model.n_symbols_
    check_memory(
        contextual_fit_bytes(K, C, V, n_sequences, n_tokens),
        f"{type(model).__name__}: {where}K = {K} states, {C} context rows, V = {V} symbols, "
        f"{n_sequences} sequences ({n_tokens} tokens)",
        "fewer states (--states), a lower emission context order, a larger --min-context-count, more "
        "partitions (n_partitions) or less data",
    )


def _check_partitions(model, parts: list, backend: str) -> None:
    """:func:`check_fit_memory` of each process: every partition's own where each lives in a Dask
    worker, all of them together in this process otherwise."""
    sizes = [
        (len(p[0]), int(sum(len(s) for s in p[0]))) if isinstance(p, tuple) else (p.n_sequences, p.n_tokens)
        for p in parts
    ]
    if backend != "dask":
        sizes = [tuple(map(sum, zip(*sizes)))]
    for i, (M, T) in enumerate(sizes):
        check_fit_memory(model, M, T, f"partition {i} of {len(sizes)}: " if len(sizes) > 1 else "")


def _runner(model, parts: list, backend: str, client, batches=None):
    """The partitions' backend: one in-process partition over ``batches`` (already made), a
    :class:`LocalBackend` of workers, or the Dask backend with their class."""
    options = {"context_table": model.context_table_.to_json(), "n_symbols": model.n_symbols_}
    if backend == "dask":
        return dask_backend_class()(client, parts, options, worker_class=ContextPartitionWorker)
    if batches is not None:
        return LocalBackend([ContextPartitionWorker(batches, **options)])
    return LocalBackend(
        [
            ContextPartitionWorker(p[0], index=p[1], **options)
            if isinstance(p, tuple)
            else ContextPartitionWorker(p, **options)
            for p in parts
        ]
    )


def sum_rounds(parts: list):
    """The partitions' answers to a round added up in partition order, starting from the first
    (a single partition's come back unchanged): floats, tensors, or tuples and dicts of them."""
    if isinstance(parts[0], tuple):
        return tuple(sum_rounds(list(items)) for items in zip(*parts))
    if isinstance(parts[0], dict):
        return {g: sum_rounds([p[g] for p in parts]) for g in parts[0]}
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


def partition_sums(runner, shape_B: tuple, pseudo_B):
    """The M-step's ``sums(alphas, rows)``: the partitions' Dirichlet-multinomial sums
    (``count_sums``, one round per Newton pass) added in partition order, then those of the
    context smoothing's pseudo-counts (one more sequence after the last), where there are any."""
    extra = [] if pseudo_B is None else [count_table([], [], shape_B, pseudo_B)]

    def sums(alphas: dict, rows: dict) -> dict:
        parts = runner.call("count_sums", alphas, rows, step="M")
        return reduce_count_sums(parts + [table_sums(t, alphas, rows) for t in extra])

    return sums


def fit_contextual(model, data, backend: str = "local", client=None, n_partitions=None) -> None:
    """Fit the contextual ``model`` on ``data`` (sequences, a SequenceDatabase, or a partitioned
    directory): sets ``n_symbols_``, ``context_table_``, ``context_counts_``, ``n_partitions_``,
    ``vocabulary_`` (where the data names its symbols) and ``training_data_``, and hands the best
    of ``model.n_init`` runs ``model._run(runner, rng, pseudo_B)`` (seeded ``[seed, start]``;
    each returns a tuple whose second item is its
    :class:`~ldhmm.inference.monitor.ConvergenceMonitor`, compared by its last value) to
    ``model._keep``."""
    parts, directory = cut_partitions(data, backend, client, n_partitions, model._validate_for_fit)
    if directory:
        manifest = read_manifest(data)
        sequences = model._validate_for_fit(load_partitioned(data))
        vocabulary = manifest.get("vocabulary")
    else:
        sequences, vocabulary = in_given_order(parts), getattr(data, "vocabulary", None)
    model.context_table_ = build_context_table(
        sequences, context_order(model.emission_context), model.n_symbols_, model.min_context_count
    )
    _check_partitions(model, parts, backend)
    rows = context_ids(sequences, model.context_table_)
    model.context_counts_ = np.bincount(
        np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64),
        minlength=model.context_table_.n_contexts,
    )
    pseudo_B = smoothing_pseudocounts(sequences, model.context_table_, model.context_smoothing)
    one = backend == "local" and len(parts) == 1 and not directory
    batches = context_batches(sequences, rows, model.n_symbols_) if one else None
    runner = _runner(model, parts, backend, client, batches)
    model.n_partitions_ = runner.n_partitions

    def run(start: int):
        runner.call("reset")
        return model._run(runner, np.random.default_rng([model.seed, start]), pseudo_B)

    runs = [lambda start=start: run(start) for start in range(model.n_init)]
    model._keep(best_of(runs, lambda result: result[1].history[-1])[1])
    model.recoveries_ = list(getattr(runner, "recoveries", []))
    keep_vocabulary(model, vocabulary)
    if directory:
        sizes = {k: int(manifest[k]) for k in ("n_sequences", "n_tokens")}
        model.training_data_ = {"source": str(data), **sizes, "sha256": None}
    else:
        model.training_data_ = training_record(sequences, data_source(data))


def held_out_scores(
    model, kind: str, params: dict, sequences, backend: str, client, n_partitions
) -> np.ndarray:
    """Every sequence's held-out score (M,), in the input order, computed where its partition
    lives (:meth:`ContextPartitionWorker.scores` of ``kind`` under ``params``, the model's
    family): validated sequences in memory, cut as :func:`fit_contextual` cuts them."""
    if isinstance(sequences, (str, os.PathLike)):
        raise ValueError(
            f"{str(sequences)!r}: a contextual model scores sequences in memory, not a directory"
        )
    parts, _ = cut_partitions(sequences, backend, client, n_partitions, model._validate_for_score)
    _check_partitions(model, parts, backend)
    runner = _runner(model, parts, backend, client)
    out = np.empty(sum(len(p[0]) for p in parts))
    for keys, values in runner.call("scores", kind, as_tensors(params), model.score_family):
        out[keys] = values
    return out
