"""What a fitted model says about each sequence after the held-out E-step: its variational
posterior, the posterior means of its parameters, its state marginals, the predictive
distribution of its next symbol, its most probable state path, and an importance-sampled
``log p(x)``.

Pure functions of (parameters, guide, bucket, bucket state), run by a partition's worker
(:class:`ldhmm.inference.distributed.workers.PartitionWorker`, where the sequences live: in this
process for :class:`ldhmm.models.variant_hmm.VariantHMM`'s in-memory input, or on a cluster).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from ..ops.dirichlet import dirichlet_log_density, sample_dirichlet
from ..ops.importance import importance_diagnostics
from ..ops.potentials import emission_potentials
from ..ops.viterbi import unpad_paths, viterbi_log
from ..parameters import VariantParameters
from ..sharing import GROUPS, POINT, SEQUENCE
from .emissions import (
    LOCAL_CHUNK,
    LocalView,
    chunks,
    expected_emissions,
    n_slots,
    predictive_emissions,
    token_potentials,
)
from .exact_chain import forward_log_normalizer
from .protocol import update_hidden

__all__ = [
    "state_marginals",
    "posterior_means",
    "emission_index",
    "bucket_posterior",
    "next_symbol_proba",
    "viterbi_paths",
    "log_marginal_is",
    "importance_weights",
    "stack_posterior",
    "posterior_table",
    "read_posterior",
]


def state_marginals(guide, params: VariantParameters, bucket, state) -> torch.Tensor:
    """q(z_n) of a bucket at the fitted q(theta): one more q(Z) update from its E log theta.

    Returns
    -------
    Tensor (M_b, L_b, K)
    """
    update, _ = update_hidden(
        guide, state.guide_state, *token_potentials(params, state.counts, bucket), bucket.mask
    )
    return update.state_marginals


def posterior_means(params: VariantParameters, bucket, state) -> dict:
    """``E_q[theta]`` of every group for a bucket after the E-step, float64.

    Per-sequence groups: ``Dir(prior + counts)`` normalized, leading dimension M_b; shared
    groups: the posterior normalized, point groups: ``exp(log_point)``, both with a leading
    dimension of 1. Shapes: ``pi`` (., K), ``A`` (., K, K), ``B`` (., K, V), or (M_b, K, W_b)
    at each sequence's slots in the sparse layout (:func:`emission_index` indexes it).
    """
    means = {}
    for g in GROUPS:
        kind = params.sharing.kind(g)
        if kind == SEQUENCE and g == "B" and bucket.sparse:
            means[g] = expected_emissions(params.prior[g], state.counts[g], bucket)
            continue
        if kind == SEQUENCE:
            conc = params.prior[g].double() + state.counts[g].double()
        elif kind == POINT:
            means[g] = params.log_point[g].double().exp()[None]
            continue
        else:
            conc = params.posterior[g].double()[None]
        means[g] = conc / conc.sum(-1, keepdim=True)
    return means


def emission_index(params: VariantParameters, bucket) -> torch.Tensor:
    """What indexes the last axis of ``posterior_means(...)["B"]`` per token, (M_b, L_b): slots
    where B is per-sequence and stored sparsely, else the symbols."""
    if bucket.sparse and params.sharing.kind("B") == SEQUENCE:
        return bucket.emission_tokens
    return bucket.tokens


def bucket_posterior(params: VariantParameters, guide, bucket, state):
    """Per-sequence posterior of one bucket, row by row.

    Yields
    ------
    (row, dict) for each sequence of the bucket: ``elbo`` (float), ``g_<group>`` for every
    per-sequence group (Dirichlet parameters of q: (K,), (K, K), (K, V); not ``g_B`` in the
    sparse layout), ``B_symbols`` (D_m,) int64 and ``B_counts`` (K, D_m) in the sparse layout
    (``q(B_m) = Dir(beta + n_m)``, ``n_m`` zero at every other symbol), ``state_marginals``
    (N_m, K). All float64 numpy arrays, copies.
    """
    sparse = bucket.sparse
    groups = [g for g in params.sharing.groups(SEQUENCE) if not (sparse and g == "B")]
    conc = {g: (params.prior[g] + state.counts[g]).double().numpy() for g in groups}
    sparse_B = sparse and "B" in params.sharing.groups(SEQUENCE)
    widths = n_slots(bucket).tolist() if sparse_B else None
    marg = state_marginals(guide, params, bucket, state).double().numpy()
    elbo = state.elbo.double().numpy()
    lengths = bucket.lengths.tolist()
    for row in range(bucket.n_sequences):
        out = {"elbo": float(elbo[row])}
        for g in groups:
            out[f"g_{g}"] = conc[g][row].copy()
        if sparse_B:
            out["B_symbols"] = bucket.symbols[row, : widths[row]].numpy().copy()
            out["B_counts"] = state.counts["B"][row, :, : widths[row]].double().numpy().copy()
        out["state_marginals"] = marg[row, : int(lengths[row])].copy()
        yield row, out


def next_symbol_proba(params: VariantParameters, guide, bucket, state) -> np.ndarray:
    """Posterior predictive distribution of each sequence's next symbol (docs/math.md,
    "Next-event prediction and decoding")::

        p(x_(n+1) = v | x_1..x_n) = sum_(i,j) q(z_n = i) E_q[A_m][i, j] E_q[B_m][j, v]

    Returns
    -------
    ndarray, shape (M_b, V), float64; rows sum to 1.
    """
    means = posterior_means(params, bucket, state)
    marg = state_marginals(guide, params, bucket, state).double()
    rows = torch.arange(bucket.n_sequences)
    last = marg[rows, bucket.lengths.long() - 1]  # q(z_n), (M_b, K)
    w = torch.einsum("mi,mij->mj", last, means["A"].expand(bucket.n_sequences, -1, -1))
    if bucket.sparse and params.sharing.kind("B") == SEQUENCE:
        p = predictive_emissions(w, params.prior["B"], state.counts["B"], bucket)
    elif means["B"].shape[0] == 1:
        p = w @ means["B"][0]
    else:
        p = torch.einsum("mj,mjv->mv", w, means["B"])
    return (p / p.sum(-1, keepdim=True)).numpy()


def viterbi_paths(params: VariantParameters, bucket, state) -> list:
    """Most probable hidden-state path of each sequence of a bucket on the chain with its
    posterior means ``E_q[pi_m]``, ``E_q[A_m]``, ``E_q[B_m]`` (:func:`posterior_means`).

    Returns
    -------
    list of ndarray, each (N_m,) int64 (states in 0..K-1), in the bucket's row order.
    """
    # a point estimate's exact zero is a potential of -inf (the path avoids it)
    logs = {g: torch.log(v) for g, v in posterior_means(params, bucket, state).items()}
    log_obs = emission_potentials(logs["B"], emission_index(params, bucket))
    return unpad_paths(viterbi_log(logs["pi"], logs["A"], log_obs, bucket.mask))


def log_marginal_is(
    params: VariantParameters,
    buckets,
    states,
    n_samples: int,
    bucket_cells: int,
    diagnostics: list | None = None,
) -> list:
    """Importance-sampled ``log p(x_m)`` of each sequence of each bucket (docs/math.md).

    The proposal is the fitted ``q(theta_m)`` (the E-step's ``states``); ``log p(x | theta_s)``
    is exact (forward algorithm). Point groups enter at their value; shared groups are drawn
    from their posterior. Draws come from torch's global generator: seed it (inside
    ``torch.random.fork_rng``) before calling.

    Parameters
    ----------
    params : VariantParameters
    buckets, states : lists of Bucket and BucketState (the held-out E-step's)
    n_samples : int
    bucket_cells : int
        How many (draw, sequence, position) cells one forward pass may hold.
    diagnostics : list, optional
        If given, one ``(std_error, ess)`` pair of (M_b,) arrays per bucket is appended
        (:func:`ldhmm.inference.ops.importance.importance_diagnostics`; the estimates are the
        same numbers either way).

    Returns
    -------
    list of ndarray, one (M_b,) float64 array per bucket.
    """
    out = []
    seq_groups = params.sharing.groups(SEQUENCE)
    for b, st in zip(buckets, states):
        Mb = b.n_sequences
        result = np.empty(Mb)
        std_error, ess = np.empty(Mb), np.empty(Mb)
        # Draw as many samples at once as fit in the bucket's cell budget.
        chunk = max(1, min(n_samples, bucket_cells // max(1, Mb * b.max_length)))
        # Sparse layout: a few sequences at a time as a dense problem over their own symbols
        # plus one lumped remainder (LocalView): B is drawn at those symbols only, never as
        # S x K x V (the Dirichlet's aggregation property keeps it exact).
        parts = chunks(Mb, LOCAL_CHUNK) if b.sparse else [(0, Mb)]
        for start, stop in parts:
            idx = torch.arange(start, stop)
            if b.sparse:
                view = LocalView(b.select(idx), params)
                local_params, bucket = view.params, view.bucket
                counts = {g: c[idx] for g, c in st.counts.items()}
                counts["B"] = view.dense_counts(counts["B"])
            else:
                local_params, bucket, counts = params, b, st.counts
            n = stop - start
            log_w = []
            done = 0
            while done < n_samples:
                S = min(chunk, n_samples - done)
                weights = importance_weights(local_params, bucket, counts, seq_groups, S)
                log_w.append(weights.reshape(S, n))
                done += S
            stacked = torch.cat(log_w)
            result[start:stop] = (torch.logsumexp(stacked, 0) - math.log(n_samples)).numpy()
            if diagnostics is not None:
                std_error[start:stop], ess[start:stop] = importance_diagnostics(stacked.double().numpy())
        out.append(result)
        if diagnostics is not None:
            diagnostics.append((std_error, ess))
    return out


def importance_weights(params: VariantParameters, bucket, counts, seq_groups, n_draws: int) -> torch.Tensor:
    """``log p(x, theta_s) - log q(theta_s)`` for ``n_draws`` draws per sequence, shape (S*M_b,)."""
    Mb = bucket.n_sequences
    log_theta = {}
    log_ratio = torch.zeros(n_draws * Mb, dtype=params.dtype)
    for g in GROUPS:
        kind = params.sharing.kind(g)
        if kind == POINT:
            log_theta[g] = params.log_point[g][None]
            continue
        if kind == SEQUENCE:
            proposal = params.prior[g] + counts[g]
        else:  # shared posterior: the same q for every sequence
            proposal = params.posterior[g].expand((Mb,) + params.posterior[g].shape)
        proposal = proposal.repeat((n_draws,) + (1,) * (proposal.dim() - 1))
        theta = sample_dirichlet(proposal)
        log_theta[g] = torch.log(theta)
        if kind == SEQUENCE:
            prior = params.prior[g].expand_as(proposal)
            log_ratio = (
                log_ratio + dirichlet_log_density(theta, prior) - dirichlet_log_density(theta, proposal)
            )
    tokens = bucket.tokens.repeat(n_draws, 1)
    mask = bucket.mask.repeat(n_draws, 1)
    log_lik = forward_log_normalizer(
        log_theta["pi"], log_theta["A"], emission_potentials(log_theta["B"], tokens), mask
    )
    return log_lik + log_ratio


def stack_posterior(rows: list, params: VariantParameters, sparse: bool) -> dict:
    """The per-sequence dicts of :func:`bucket_posterior`, in order, as the arrays of
    :meth:`ldhmm.models.variant_hmm.VariantHMM.posterior`: ``elbo`` (M,), ``g_<group>``
    (M, ...) stacked, and ``B_symbols``, ``B_counts`` (sparse layout) and ``state_marginals``
    as lists of arrays."""
    out = {"elbo": np.array([r["elbo"] for r in rows], dtype=np.float64)}
    for g in params.sharing.groups(SEQUENCE):
        if sparse and g == "B":
            out["B_symbols"] = [r["B_symbols"] for r in rows]
            out["B_counts"] = [r["B_counts"] for r in rows]
            continue
        shape = tuple(params.prior[g].shape)
        out[f"g_{g}"] = np.stack([r[f"g_{g}"] for r in rows]) if rows else np.empty((0,) + shape)
    out["state_marginals"] = [r["state_marginals"] for r in rows]
    return out


def posterior_table(keys, rows: list, params: VariantParameters, sparse: bool):
    """One Parquet-ready row per sequence (the schema :func:`read_posterior` reads).

    Columns: ``sequence`` (database position or id), ``elbo``, ``state_marginals`` (N_m x K
    values, row-major), ``g_pi`` / ``g_A`` / ``g_B`` for each per-sequence group (flattened
    row-major; not ``g_B`` in the sparse layout), and in the sparse layout ``B_symbols``
    (D_m int64) and ``B_counts`` (K x D_m, row-major). The schema's metadata records
    ``ldhmm.n_states``, ``ldhmm.n_symbols`` and ``ldhmm.layout``.
    """
    columns = {
        "sequence": pa.array(list(keys)),
        "elbo": pa.array([r["elbo"] for r in rows], type=pa.float64()),
        "state_marginals": _list_column([r["state_marginals"] for r in rows], pa.float64()),
    }
    for g in params.sharing.groups(SEQUENCE):
        if sparse and g == "B":
            columns["B_symbols"] = _list_column([r["B_symbols"] for r in rows], pa.int64())
            columns["B_counts"] = _list_column([r["B_counts"] for r in rows], pa.float64())
        else:
            columns[f"g_{g}"] = _list_column([r[f"g_{g}"] for r in rows], pa.float64())
    metadata = {
        "ldhmm.n_states": str(params.n_states),
        "ldhmm.n_symbols": str(params.n_symbols),
        "ldhmm.layout": "sparse" if sparse else "dense",
    }
    return pa.table(columns).replace_schema_metadata(metadata)


def _list_column(arrays: list, type_) -> pa.Array:
    """Flattened arrays as one list column (offsets + one values buffer: no per-row objects)."""
    lengths = np.array([a.size for a in arrays], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(
        np.int32 if lengths.sum() < 2**31 else np.int64
    )
    values = np.concatenate([a.ravel() for a in arrays]) if arrays else np.empty(0)
    values = pa.array(values.astype(type_.to_pandas_dtype(), copy=False), type=type_)
    if offsets.dtype == np.int64:
        return pa.LargeListArray.from_arrays(pa.array(offsets), values)
    return pa.ListArray.from_arrays(pa.array(offsets), values)


def read_posterior(paths) -> dict:
    """Read the Parquet files of ``posterior(..., out=DIR)`` back into the arrays of
    :meth:`ldhmm.models.variant_hmm.VariantHMM.posterior`, with ``sequence`` (the keys, the
    order of every other entry), files in the given order.

    Parameters
    ----------
    paths : str, Path or list of them (a directory means its ``part-*.parquet`` files, sorted)
    """
    if isinstance(paths, (str, os.PathLike)):
        path = Path(paths)
        paths = sorted(path.glob("part-*.parquet")) if path.is_dir() else [path]
    tables = [pq.read_table(p) for p in paths]
    if not tables:
        raise ValueError("read_posterior: no part-*.parquet files")
    meta = tables[0].schema.metadata or {}
    if b"ldhmm.n_states" not in meta:
        raise ValueError(f"{paths[0]}: not a posterior written by ldhmm (no ldhmm.n_states metadata)")
    K = int(meta[b"ldhmm.n_states"])
    V = int(meta[b"ldhmm.n_symbols"])
    table = pa.concat_tables(tables)
    out = {"sequence": table.column("sequence").to_pylist(), "elbo": table.column("elbo").to_numpy()}
    out["state_marginals"] = [np.asarray(v).reshape(-1, K) for v in _rows(table, "state_marginals")]
    shapes = {"g_pi": (K,), "g_A": (K, K), "g_B": (K, V)}
    for name, shape in shapes.items():
        if name in table.column_names:
            out[name] = (
                np.stack([np.asarray(v).reshape(shape) for v in _rows(table, name)])
                if len(table)
                else (np.empty((0,) + shape))
            )
    if "B_symbols" in table.column_names:
        out["B_symbols"] = [np.asarray(v, dtype=np.int64) for v in _rows(table, "B_symbols")]
        out["B_counts"] = [np.asarray(v).reshape(K, -1) for v in _rows(table, "B_counts")]
    return out


def _rows(table, name: str) -> list:
    """A list column as one numpy array per row (split of the flat values at the offsets)."""
    if len(table) == 0:
        return []
    column = table.column(name).combine_chunks()
    offsets = column.offsets.to_numpy()
    values = column.values.to_numpy(zero_copy_only=False)
    return np.split(values[offsets[0] : offsets[-1]], offsets[1:-1] - offsets[0])
