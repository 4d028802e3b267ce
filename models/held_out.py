"""Held-out passes of a fitted estimator: the E-step where the data lives, the results in input order.

Every per-sequence method of :class:`ldhmm.models.variant_hmm.VariantHMM` (``score_samples``,
``posterior``, ``predict_next_proba``, ``decode``, ``log_marginal_is``, ``impossible_events``)
is one call of :func:`held_out`: the data cut into partitions where it lives
(:class:`ldhmm.models.placement.Placement`), the memory checked, the sequences the model gives
probability 0 refused where a method has no answer for them, then the workers' method
(:class:`ldhmm.inference.distributed.workers.PartitionWorker`). The functions below put the
partitions' answers back in the input order (or by sequence id, for a partitioned directory).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..data.seeds import derived_seeds
from ..inference import held_out_starts
from ..inference.cavi.emissions import LOCAL_CHUNK
from ..inference.cavi.support import ImpossibleSequenceError, impossible_reason, supports
from .memory import check_memory, importance_sampling_bytes, posterior_bytes, score_bytes
from .placement import partitions

__all__ = [
    "held_out",
    "by_key",
    "in_input_order",
    "in_memory",
    "importance_memory_check",
    "check_importance_arguments",
]


def held_out(
    model,
    method: str,
    data,
    backend: str = "local",
    client=None,
    n_partitions=None,
    out=None,
    args: tuple = (),
    seed: int | None = None,
    memory_check=None,
):
    """The held-out E-step of ``data`` where its partitions live, then the workers' ``method``
    (``score``, ``posterior``, ``log_marginal_is``, ``predict_next_proba``, ``decode``,
    ``impossible``) with ``(model.params_, starts, *args[, seed][, out_path])``.

    Sequences in this process are one partition unless ``n_partitions`` says otherwise. Refused
    before anything is allocated when an estimate of a process's share exceeds the memory limit
    (``memory_check(M, L, shortest)`` first, then the E-step's), on every path. ``seed``:
    partition p draws from ``derived_seeds(seed, P)[p]``.

    Returns
    -------
    (results in partition order, whether ``data`` is a directory), or the Parquet paths written
    with ``out``.
    """
    model._check_fitted()
    placement = model.placement()
    parts, directory = partitions(data, backend, client, n_partitions, model._validate_for_score)
    sizes = placement.process_sizes(parts, backend)
    for M, _, L, _, _, shortest in sizes if memory_check is not None else ():
        memory_check(M, L, shortest)
    estimate = posterior_bytes if method == "posterior" else score_bytes
    placement.check_partitions(sizes, backend, "scoring with", estimate)
    runner = placement.runner(backend, client, parts)
    if method not in ("score", "impossible"):  # no answer for a sequence of probability 0
        _refuse_impossible(runner.call("impossible", model.params_), directory, model.params_)
    starts = held_out_starts(model.guide, model.random_starts)
    calls = [(model.params_, starts, *args) for _ in range(runner.n_partitions)]
    if seed is not None:
        calls = [call + (s,) for call, s in zip(calls, derived_seeds(seed, runner.n_partitions))]
    if out is not None:
        return runner.call_each(method, [call + (p,) for call, p in zip(calls, _part_paths(out, runner))])
    return runner.call_each(method, calls), directory


def in_memory(sequences):
    """``sequences``, refused in one line when it is a directory (whose per-sequence arrays
    would come back by id: only ``score_samples``, ``posterior`` and ``log_marginal_is`` read
    directories)."""
    if isinstance(sequences, (str, os.PathLike)):
        raise ValueError(f"{str(sequences)!r}: this method takes sequences in memory, not a directory")
    return sequences


def by_key(results, directory: bool, name: str | None = None):
    """Per-partition (keys, array) pairs as one float64 array in the input order (keys are
    positions), or for a directory input a pandas Series indexed by the sequence ids."""
    keys, values = _merged(results)
    if directory:
        return pd.Series(values, index=keys, name=name)
    ordered = np.empty(values.shape)
    ordered[keys.astype(np.int64)] = values
    return ordered


def in_input_order(results) -> list:
    """Per-partition (positions, list of values) pairs as one list in the input order."""
    ordered = [None] * sum(len(values) for _, values in results)
    for keys, values in results:
        for k, v in zip(keys, values):
            ordered[int(k)] = v
    return ordered


def check_importance_arguments(n_samples, seed) -> None:
    """``n_samples`` and ``seed`` of importance sampling, refused in one line when not integers
    >= 1 and >= 0."""
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
        raise ValueError(f"n_samples must be an integer >= 1, got {n_samples!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")


def importance_memory_check(model, n_samples: int):
    """``memory_check(M, L, shortest)`` of :func:`held_out` for importance sampling with
    ``n_samples`` draws (:func:`ldhmm.models.memory.importance_sampling_bytes`)."""

    def check(n_sequences, max_length, min_length):
        check_memory(
            importance_sampling_bytes(
                model.n_states,
                model.n_symbols_,
                n_sequences,
                max_length,
                n_samples,
                model.bucket_cells,
                model.sparse_emissions,
                LOCAL_CHUNK,
                min_length,
            ),
            f"importance sampling ({n_samples} samples) with K = {model.n_states} states, "
            f"V = {model.n_symbols_} symbols",
            "fewer samples (n_samples / --is-samples) or a smaller bucket_cells",
        )

    return check


def _refuse_impossible(results, directory: bool, params) -> None:
    """:class:`ImpossibleSequenceError` for the first sequence (input order; a directory's:
    partition order) that the workers' ``impossible`` found, if any."""
    for keys, events in results if directory else [_merged(results)]:
        bad = np.flatnonzero(events[:, 0] >= 0)
        if bad.size:
            row = int(bad[0] if directory else bad[np.argmin(np.asarray(keys)[bad])])
            key = keys[row].item() if isinstance(keys[row], np.generic) else keys[row]
            event, symbol = (int(v) for v in events[row])
            raise ImpossibleSequenceError(key, event, symbol, impossible_reason(supports(params), symbol))


def _merged(results) -> tuple:
    """Per-partition (keys, arrays) pairs as one pair, in partition order."""
    return np.concatenate([np.asarray(k) for k, _ in results]), np.concatenate([v for _, v in results])


def _part_paths(out, runner) -> list[str]:
    """``out/part-<i>.parquet`` for each partition of ``runner`` (absolute: workers write them).
    A directory that already holds part files is refused: mixed with this run's they would be
    read back as one result (and nothing already written is overwritten)."""
    Path(out).mkdir(parents=True, exist_ok=True)
    stale = sorted(Path(out).glob("part-*.parquet"))
    if stale:
        raise ValueError(
            f"out={str(out)!r} already holds {len(stale)} part-*.parquet files ({stale[0].name}, ...): "
            f"remove them or choose another directory"
        )
    return [str(Path(out).resolve() / f"part-{i:05d}.parquet") for i in range(runner.n_partitions)]
