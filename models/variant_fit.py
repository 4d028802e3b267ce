"""One fit of an estimator of the LDHMM family: its data placed, its starts searched, its outcome kept.

:meth:`ldhmm.models.variant_hmm.VariantHMM.fit` hands the work here. Sequences in this process
are one partition holding every bucket (:func:`fit_in_process`); a directory written by
:func:`ldhmm.data.write_partitioned`, the Dask backend or ``n_partitions`` cut the data into
partitions where it lives (:func:`fit_partitioned`, through :mod:`ldhmm.models.placement`). Both
then run :func:`fit_on`: the checkpoint opened where one is given (:mod:`ldhmm.inference.checkpoint`,
resumed only by a fit that matches :func:`checkpoint_fingerprint`), the start policy run
(:func:`ldhmm.models.fit_starts.search`), and what it found recorded on the model as its learned
attributes (``params_``, ``elbo_history_``, ``start_kind_``, ...).

The functions take the estimator itself (``model``): its settings decide every step, and it
keeps the result, as a scikit-learn estimator's ``fit`` does.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from functools import partial

import numpy as np

from ..data import read_manifest
from ..data.fingerprint import training_record
from ..inference import VariantParameters, make_buckets
from ..inference.checkpoint import FitCheckpoint
from ..inference.distributed.workers import LocalBackend, PartitionWorker
from ..inference.em import NonFiniteELBOError
from .base import data_source, keep_vocabulary
from .fit_starts import StartOutcome, search
from .memory import fit_bytes
from .placement import in_given_order
from .placement import partitions as cut_partitions

__all__ = [
    "check_fit_arguments",
    "check_start",
    "buckets_of",
    "fit_in_process",
    "fit_partitioned",
    "fit_on",
    "checkpoint_fingerprint",
]


def check_fit_arguments(init_params, grown, checkpoint) -> None:
    """Refuse, in one line, the arguments of ``fit`` that do not go together: ``init_params``
    (one run from that start) with ``grown`` starts, and a ``checkpoint`` with ``grown`` starts
    (a checkpoint does not record them)."""
    if init_params is not None and grown:
        raise ValueError("fit: give init_params or grown starts, not both")
    if checkpoint is not None and grown:
        raise ValueError("fit: checkpoint= does not resume grown starts (fit_path); give one or the other")


def check_start(params: VariantParameters, n_states: int, n_symbols: int, sharing) -> None:
    """Refuse, in one line, ``init_params`` of another shape or variant than the model's."""
    if not isinstance(params, VariantParameters):
        raise TypeError(
            f"init_params must be VariantParameters (a fitted model's params_), got {type(params).__name__}"
        )
    if (params.n_states, params.n_symbols) != (n_states, n_symbols):
        raise ValueError(
            f"init_params has K = {params.n_states} states and V = {params.n_symbols} symbols; this "
            f"model has K = {n_states} (n_states) and V = {n_symbols} (n_symbols)"
        )
    theirs, ours = ([sh.kind(g) for g in ("pi", "A", "B")] for sh in (params.sharing, sharing))
    if theirs != ours:
        raise ValueError(
            f"init_params have pi, A, B {', '.join(theirs)}; this model's are {', '.join(ours)} (sharing)"
        )


def fit_in_process(model, seqs: list, init_params=None, grown=(), checkpoint=None) -> None:
    """Fit ``model`` on validated sequences in this process (``seqs``: list of (N_m,) int64
    arrays, symbols below ``model.n_symbols_``): the EM driver over one partition holding every
    bucket. Refused before anything is allocated when the memory estimate of the fit (with the
    K - 1 fit's per-sequence state that ``grown`` holds, on a path) exceeds the limit."""
    kept = getattr(grown, "previous_states", None) is not None  # the K - 1 fit's state, held
    estimate = partial(fit_bytes, path_states=model.n_states - 1) if kept else fit_bytes
    knob = "fewer states (n_states / --states) or fewer sequences"
    model.placement().check_memory(seqs, "fitting", knob, estimate)
    runner = LocalBackend([PartitionWorker(seqs, **model.placement().worker_options)])
    counts = np.bincount(np.concatenate(seqs), minlength=model.n_symbols_)
    content = training_record(seqs, "")["sha256"] if checkpoint is not None else None
    fit_on(model, runner, counts, init_params, grown, checkpoint, content)


def buckets_of(model, seqs: list) -> list:
    """``seqs`` (validated (N_m,) int64 arrays) in ``model``'s buckets: its ``bucket_cells`` and
    emission layout (:func:`ldhmm.inference.make_buckets`)."""
    return make_buckets(
        seqs, max_cells=model.bucket_cells, sparse=model.sparse_emissions, n_symbols=model.n_symbols_
    )


def fit_partitioned(
    model, data, backend: str, client, n_partitions, init_params=None, grown=(), checkpoint=None
) -> None:
    """Fit ``model`` over partitions of ``data`` (a directory written by
    :func:`ldhmm.data.write_partitioned`, whose workers read their own files, or sequences in
    memory) on ``backend`` (``"local"`` or ``"dask"`` with ``client``); sets ``n_partitions_``,
    ``vocabulary_`` (where the data names its symbols) and ``training_data_`` beside what
    :func:`fit_on` sets."""
    partitions, directory = cut_partitions(data, backend, client, n_partitions, model._validate_for_fit)
    manifest = read_manifest(data) if directory else None
    if directory:
        V = int(manifest["n_symbols"])
        if model.n_symbols is not None and model.n_symbols < V:
            raise ValueError(f"n_symbols={model.n_symbols} but {data} holds {V} symbols")
        model.n_symbols_ = model.n_features_in_ = int(model.n_symbols or V)
    placement = model.placement()
    placement.check_partitions(placement.process_sizes(partitions, backend), backend)
    runner = placement.runner(backend, client, partitions)
    model.n_partitions_ = runner.n_partitions
    content = (
        training_record(in_given_order(partitions), "")["sha256"]
        if checkpoint is not None and not directory
        else None
    )
    counts = np.sum(runner.call("symbol_counts"), axis=0)
    fit_on(model, runner, counts, init_params, grown, checkpoint, content)
    keep_vocabulary(model, manifest.get("vocabulary") if directory else getattr(data, "vocabulary", None))
    if directory:  # its tokens never pass through this process: sizes from its manifest, no hash
        sizes = {k: int(manifest[k]) for k in ("n_sequences", "n_tokens")}
        model.training_data_ = {"source": str(data), **sizes, "sha256": None}
    else:
        model.training_data_ = training_record(in_given_order(partitions), data_source(data))


def fit_on(model, runner, symbol_counts, init_params=None, grown=(), checkpoint=None, content=None) -> None:
    """The start policy (:func:`ldhmm.models.fit_starts.search`) over a backend's partitions,
    its outcome recorded on ``model``.

    ``symbol_counts``: (V,) int, the data's count of each symbol; ``grown``: further starts
    raced after the policy's; ``checkpoint``: a directory the fit is checkpointed in and
    resumed from (:mod:`ldhmm.inference.checkpoint`), which must hold a fit of the data whose
    coded sequences hash to ``content`` (SHA-256; None where the tokens never pass through this
    process). A non-finite ELBO stops the fit with the last finite parameters kept (the model
    stays usable for scoring) and raises.
    """
    if init_params is not None:
        check_start(init_params, model.n_states, len(symbol_counts), model.sharing)
    store = None
    if checkpoint is not None:
        fingerprint = {
            **checkpoint_fingerprint(model, symbol_counts, runner, init_params),
            "data_sha256": content,
        }
        store = FitCheckpoint(checkpoint, fingerprint, model.sharing)
    try:
        found = search(
            model, partial(model._engine, checkpoint=store), runner, symbol_counts, init_params, grown
        )
    except NonFiniteELBOError as err:
        model._set_params(err.last_params)
        model._set_convergence(err.convergence)
        raise
    _record(model, found, grown)


def _record(model, found: StartOutcome, grown) -> None:
    """Set ``model``'s learned attributes from the start policy's outcome."""
    result = found.result
    model.start_kind_, model.kept_restart_ = found.kind, found.kept_restart
    model.restart_elbo_histories_, model.init_elbo_history_ = found.restart_histories, found.init_history
    model.start_elbo_histories_ = dict(found.start_histories)
    if found.hmm_histories is not None:
        model.hmm_objective_histories_ = found.hmm_histories
    # a path's next K continues from this run (in process: its partition's state)
    keep = getattr(grown, "keep_states", False) and result.states is not None
    model._path_states = [result.states] if keep else None
    model.recoveries_ = list(result.recoveries)
    model._set_params(result.params)
    model.elbo_history_ = np.asarray(result.elbo_history)
    model.e_step_elbo_history_ = np.asarray(result.e_step_elbo_history)
    model.elbo_trace_ = list(result.trace)
    model._set_convergence(result.convergence)
    model.prior_capped_ = result.capped


def checkpoint_fingerprint(model, symbol_counts, runner, init_params) -> dict:
    """What a checkpoint must match to be resumed: the settings (not ``verbose``), the data's
    symbol counts ((V,) int), the partitions' sizes, and the starting point given (a CRC-32 of
    each of its tensors)."""
    config = {k: v for k, v in model.get_config().items() if k != "verbose"}
    start = None
    if init_params is not None:
        start = [
            zlib.crc32(np.ascontiguousarray(t.detach().cpu().numpy()).tobytes())
            for d in ("prior", "posterior", "log_point")
            for _, t in sorted(getattr(init_params, d).items())
        ]
    return {
        "class": type(model).__name__,
        # objects (a guide given as an object) by their class: a repr may hold an address
        "config": json.loads(json.dumps(config, default=lambda o: type(o).__qualname__)),
        "symbol_counts": hashlib.sha256(np.asarray(symbol_counts, dtype=np.int64).tobytes()).hexdigest(),
        "partitions": [list(map(int, size)) for size in runner.call("size")],
        "init_params": start,
    }
