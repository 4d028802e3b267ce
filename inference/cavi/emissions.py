"""Emission layouts: per-sequence emission state dense over V, or sparse over what a sequence uses.

A per-sequence emission group ``q(B_m) = Dir(beta + n_m)`` has expected counts ``n_m`` (K, V)
that are zero outside the symbols sequence m contains. The **dense** layout stores them as they
are (M, K, V); the **sparse** layout stores, for each sequence, its distinct symbols
(``Bucket.symbols``, (M_b, W)) and a K x W block of counts, W at most the sequence's length. The
layout is chosen from K and V alone (:func:`emission_layout`), so every partition of a
distributed fit takes the same path.

Nothing else changes in the sparse layout, because of the *aggregation property* of the
Dirichlet: if ``B ~ Dir(a)`` then the components of a subset S of symbols together with the lumped
remainder ``1 - sum_S B_v`` are ``Dir(a_S, sum_{v not in S} a_v)``. Every quantity of a sequence
(its ELBO, ``E log B`` at its symbols, draws of ``B`` at its symbols) depends only on its own
symbols and the row totals ``sum_v a_kv``. Database-level sums (the M-step's statistics, total
counts) add the sparse blocks up by symbol, plus one closed-form term per row for the zeros.

:class:`LocalView` turns a few sequences of a sparse bucket into an ordinary dense problem over
the union of their symbols plus one lumped "rest" symbol, so that every dense routine (the torch
E-step, importance sampling, decoding) runs on them unchanged and exactly.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..batch import Bucket
from ..ops.dirichlet import expected_log_dirichlet
from ..ops.potentials import emission_potentials
from ..parameters import VariantParameters
from ..sharing import POINT, SEQUENCE, SHARED
from .kernels.dirichlet_multinomial import SUM_BLOCK
from .kernels.sparse import expected_log_terms, scatter_blocks, scatter_rows, sequential_row_sums

__all__ = [
    "EMISSION_LAYOUTS",
    "SPARSE_MIN_SYMBOLS",
    "emission_layout",
    "n_slots",
    "slot_mask",
    "total_emission_counts",
    "add_emission_counts",
    "EmissionLogSums",
    "emission_log_sums",
    "expected_log_emissions",
    "token_potentials",
    "LocalView",
    "LOCAL_CHUNK",
    "chunks",
    "expected_emissions",
    "predictive_emissions",
    "dense_emission_posterior",
]

#: Layouts a model accepts: ``"auto"`` picks one from K and V (:func:`emission_layout`).
EMISSION_LAYOUTS = ("auto", "dense", "sparse")

#: ``"auto"`` stores emission counts sparsely from this many symbols on. Below it the dense
#: block (K x V per sequence) is at most a few KB and the dense layout runs the same kernel
#: without the slot indirection (benchmarks/vocabulary_size.py measures both).
SPARSE_MIN_SYMBOLS = 512


def emission_layout(n_states: int, n_symbols: int, layout: str = "auto") -> str:
    """``"dense"`` or ``"sparse"`` for a model with K states and V symbols.

    ``"auto"`` depends on K and V only (never on the data), so that every partition of a
    database, and every process of a distributed fit, makes the same choice.
    """
    if layout not in EMISSION_LAYOUTS:
        raise ValueError(f"emission_layout must be one of {EMISSION_LAYOUTS}, got {layout!r}")
    if layout != "auto":
        return layout
    return "sparse" if n_symbols >= SPARSE_MIN_SYMBOLS else "dense"


def n_slots(bucket: Bucket) -> torch.Tensor:
    """Number of distinct symbols of each sequence of a sparse bucket, LongTensor (M_b,)."""
    return bucket.slots.masked_fill(~bucket.mask, -1).max(1).values + 1


def slot_mask(bucket: Bucket) -> torch.Tensor:
    """True on the real (not padding) slots of a sparse bucket, BoolTensor (M_b, W_b)."""
    W = bucket.symbols.shape[1]
    return torch.arange(W)[None, :] < n_slots(bucket)[:, None]


def total_emission_counts(counts_B: torch.Tensor, bucket: Bucket, n_symbols: int) -> torch.Tensor:
    """``sum_m n_m`` (K, V) of a bucket's emission counts in either layout, added in sequence
    order in both (so that both layouts give the same sums)."""
    if not bucket.sparse:
        return torch.from_numpy(counts_B.numpy().sum(0))  # numpy: sequence by sequence
    out = scatter_rows(counts_B.double().numpy(), bucket.symbols.numpy(), n_symbols)
    return torch.from_numpy(out).to(counts_B.dtype)


def add_emission_counts(total: np.ndarray, counts_B: torch.Tensor, bucket: Bucket) -> None:
    """``total += sum_m n_m`` in place, float64 (K, V): the same numbers as
    ``total + total_emission_counts(...)`` (a bucket's sum formed in sequence order, then
    added), but the sparse layout touches only the symbols the bucket contains: no K x V array
    per bucket."""
    if not bucket.sparse:
        total += counts_B.numpy().sum(0)
        return
    # One block of all M_b sequences: the bucket's sum in sequence order, added to ``total``.
    scatter_blocks(
        counts_B.double().numpy(), bucket.symbols.numpy(), total.shape[1], max(1, bucket.n_sequences), total
    )


class EmissionLogSums:
    """``sum_m E_q[log B_m]`` (K, V) over some sequences, ``q(B_m) = Dir(beta + n_m)``, kept in
    parts so that the O(K V) work is done once per E-step, not once per bucket::

        n psi(beta) + sum_m [psi(beta + n_m) - psi(beta)] - rows[:, None]  (+ complete)

    with ``rows`` = ``sum_m psi(beta_0 + n_m0)`` (K,); the middle sum is zero outside each
    sequence's own symbols and is kept as per-slot terms (``terms``: pairs (values (M, K, W),
    symbols (M, W) or None for slot = symbol), or (K, V) arrays already added up) until
    :meth:`absorb` adds them by symbol into one K x V buffer (in the dense kernels' block order,
    :func:`ldhmm.inference.cavi.kernels.sparse.scatter_blocks`: both layouts give the same numbers).
    ``complete`` holds (K, V) sums already whole (the torch route's).
    """

    def __init__(self, n: int = 0, rows=0.0, terms=(), complete=None):
        self.n = int(n)
        self.rows = rows
        self.terms = list(terms)
        self.complete = complete
        self.buffer = None

    def __add__(self, other):
        if isinstance(other, torch.Tensor):
            other = EmissionLogSums(complete=other)
        out = EmissionLogSums(self.n + other.n, self.rows + other.rows, self.terms + other.terms)
        out.complete = _add_optional(self.complete, other.complete)
        for part in (self, other):
            if part.buffer is not None:
                out.terms.append((part.buffer, None))
        return out

    __radd__ = __add__

    def absorb(self, other, n_symbols: int) -> None:
        """Add ``other`` into this one in place; its per-slot terms go into this one's K x V
        buffer now (``other`` should be dropped afterwards: it still refers to them)."""
        if isinstance(other, torch.Tensor):
            other = EmissionLogSums(complete=other)
        self.n += other.n
        self.rows = self.rows + other.rows
        self.complete = _add_optional(self.complete, other.complete)
        for values, symbols in other.terms + ([(other.buffer, None)] if other.buffer is not None else []):
            if self.buffer is None:
                K = values.shape[-2]
                self.buffer = np.zeros((K, int(n_symbols)))
            if values.ndim == 2:
                self.buffer += values
            else:
                if symbols is None:
                    symbols = np.broadcast_to(np.arange(values.shape[2]), values.shape[::2])
                scatter_blocks(values, symbols, int(n_symbols), SUM_BLOCK, self.buffer)

    def total(self, prior_B: torch.Tensor, psi_B: np.ndarray | None = None) -> torch.Tensor:
        """The (K, V) sums, float64 (``psi_B``: ``psi(beta)``, if already at hand)."""
        V = int(prior_B.shape[1])
        whole = EmissionLogSums()
        whole.absorb(self, V)
        out = None
        if whole.n or whole.buffer is not None or not np.isscalar(whole.rows):
            if psi_B is None:
                psi_B = torch.digamma(prior_B.double()).numpy()
            delta = whole.buffer if whole.buffer is not None else 0.0
            out = torch.from_numpy(
                whole.n * psi_B + delta - np.asarray(whole.rows, dtype=np.float64)[..., None]
            )
        if whole.complete is not None:
            complete = torch.as_tensor(whole.complete).double()
            out = complete if out is None else out + complete
        return out if out is not None else torch.zeros(tuple(prior_B.shape), dtype=torch.float64)


def _add_optional(a, b):
    if a is None:
        return b
    return a if b is None else a + b


def emission_log_sums(prior_B: torch.Tensor, counts_B: torch.Tensor, bucket: Bucket) -> EmissionLogSums:
    """``sum_m E_q[log B_m]`` over a bucket, ``q(B_m) = Dir(prior + n_m)``, in parts
    (:class:`EmissionLogSums`): O(K W) per sequence, nothing of size K x V. Each sequence
    weighed by the bucket's ``weights`` where it has them."""
    symbols = bucket.symbols.numpy() if bucket.sparse else None
    prior, counts = prior_B.double().numpy(), counts_B.double().numpy()
    delta, rows = expected_log_terms(prior, counts, symbols)
    if bucket.weights is None:
        return EmissionLogSums(bucket.n_sequences, rows, [(delta, symbols)])
    weights = bucket.weights.double().numpy()
    delta *= weights[:, None, None]
    # psi(beta_0 + n_m0) per sequence, weighed (the kernel's ``rows`` are their plain sum). Each
    # n_m0 added left to right, as the kernel does: numpy's vectorized sum groups the additions
    # by position, so the dense layout's zeros would change the rounding against the sparse one's
    # slots (and a last-bit difference here is amplified by the paper's M-step).
    M, K, W = counts.shape
    totals = sequential_row_sums(np.ascontiguousarray(counts).reshape(M * K, W)).reshape(M, K)
    psi_rows = torch.digamma(torch.from_numpy(sequential_row_sums(prior)[None, :] + totals)).numpy()
    return EmissionLogSums(int(round(weights.sum())), weights @ psi_rows, [(delta, symbols)])


def expected_log_emissions(prior_B: torch.Tensor, counts_B: torch.Tensor, bucket: Bucket) -> torch.Tensor:
    """``E_q[log B_m]`` at each sequence's slots, (M_b, K, W) (dense layout: (M_b, K, V)).

    The row totals are those of all V symbols (aggregation property), so the values equal the
    dense layout's at the same symbols.
    """
    a = prior_B.double()
    c = counts_B.double()
    if not bucket.sparse:
        return expected_log_dirichlet(a + c).to(counts_B.dtype)
    gathered = a[:, bucket.symbols].permute(1, 0, 2)
    totals = a.sum(-1)[None, :] + c.sum(-1)  # (M, K)
    return expected_log_dirichlet(gathered + c, total=totals).to(counts_B.dtype)


def token_potentials(
    params: VariantParameters, counts: dict | None, bucket: Bucket, fixed: dict | None = None
):
    """``E log pi``, ``E log A`` and the emission potentials ``E log B[k, x_n]`` (M_b, T, K) of
    a bucket at its counts, in either layout (what a guide's ``init_state`` and ``update_hidden``
    take). ``counts=None`` means zero counts, q(theta) = the prior for every sequence (the cold
    start): the prior's E log theta is computed once, O(K^2 + K V), and repeated for the
    bucket's sequences (the same values as at explicit zeros)."""
    seq_groups = params.sharing.groups(SEQUENCE)
    elog = {}
    for g in ("pi", "A"):
        if g not in seq_groups:
            elog[g] = fixed[g] if fixed is not None else params.fixed_expected_log(g)
        elif counts is None:
            e = expected_log_dirichlet(params.prior[g].double()).to(params.dtype)
            elog[g] = e.expand((bucket.n_sequences,) + tuple(e.shape)).contiguous()
        else:
            conc = params.prior[g].double() + counts[g].double()
            elog[g] = expected_log_dirichlet(conc).to(counts[g].dtype)
    if "B" not in seq_groups:
        fixed_B = fixed["B"] if fixed is not None else params.fixed_expected_log("B")
        log_obs = emission_potentials(fixed_B, bucket.tokens)
    elif counts is None:
        log_B = expected_log_dirichlet(params.prior["B"].double()).to(params.dtype)[None]
        log_obs = emission_potentials(log_B, bucket.tokens)
    else:
        log_B = expected_log_emissions(params.prior["B"], counts["B"], bucket)
        log_obs = emission_potentials(log_B, bucket.emission_tokens)
    return elog["pi"], elog["A"], log_obs


def _rest_of(values: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """The lumped remainder of (K, V) rows: the sum over the columns not ``kept``, (K, 1)."""
    keep = torch.zeros(values.shape[-1], dtype=torch.bool)
    keep[kept] = True
    return values[:, ~keep].sum(-1, keepdim=True)


class LocalView:
    """A few sequences of a sparse bucket as a dense problem over the symbols they contain.

    The local vocabulary is the union U of the sequences' symbols, plus (when U < V) one lumped
    symbol "rest" standing for all the others: priors and posteriors of B get the column
    ``sum_{v not in U} a_kv``, point estimates the remaining probability mass. By the
    aggregation property every per-sequence quantity (ELBO, E log B at the tokens, draws of B
    at the tokens, Viterbi paths) is the same as over all V symbols; the rest symbol never
    occurs in the tokens and never gets counts.

    Parameters
    ----------
    bucket : Bucket
        In the sparse layout.
    params : VariantParameters
    """

    def __init__(self, bucket: Bucket, params: VariantParameters):
        if not bucket.sparse:
            raise ValueError("LocalView needs a bucket in the sparse layout")
        self.source = bucket
        V = params.n_symbols
        real = slot_mask(bucket)
        union = torch.unique(bucket.symbols[real])
        self.union = union
        self.has_rest = int(union.numel()) < V
        # local id of every slot (padding slots: any valid id, they carry no counts)
        self.slot_ids = torch.searchsorted(union, bucket.symbols).clamp_max(union.numel() - 1)
        self.real_slots = real
        local_tokens = torch.gather(self.slot_ids, 1, bucket.slots) * bucket.mask
        # the dense problem's bucket: its own tokens, the rest (weights, start keys) the bucket's
        self.bucket = dataclasses.replace(bucket, tokens=local_tokens, symbols=None, slots=None)
        self.params = self._restrict(params)
        self.n_local = int(union.numel()) + int(self.has_rest)

    def _restrict(self, params: VariantParameters) -> VariantParameters:
        union = self.union

        def restrict(values, point=False):
            kept = values[:, union]
            if not self.has_rest:
                return kept
            if point:
                mass = 1.0 - kept.double().exp().sum(-1, keepdim=True)
                rest = torch.log(mass.clamp_min(torch.finfo(torch.float64).tiny)).to(values.dtype)
            else:
                rest = _rest_of(values, union)
            return torch.cat([kept, rest], -1)

        sharing = params.sharing
        new = VariantParameters(sharing, dict(params.prior), dict(params.posterior), dict(params.log_point))
        kind = sharing.kind("B")
        if kind in (SEQUENCE, SHARED):
            new.prior["B"] = restrict(params.prior["B"])
        if kind == SHARED:
            new.posterior["B"] = restrict(params.posterior["B"])
        if kind == POINT:
            new.log_point["B"] = restrict(params.log_point["B"], point=True)
        return new

    def dense_counts(self, counts_B: torch.Tensor) -> torch.Tensor:
        """Slot counts (M_b, K, W) as local dense counts (M_b, K, n_local)."""
        M, K, _ = counts_B.shape
        out = counts_B.new_zeros(M, K, self.n_local)
        masked = counts_B * self.real_slots[:, None, :]
        return out.scatter_add_(2, self.slot_ids[:, None, :].expand_as(counts_B), masked)

    def slot_counts(self, dense_B: torch.Tensor) -> torch.Tensor:
        """Local dense counts (M_b, K, n_local) back to slot counts (M_b, K, W)."""
        picked = torch.gather(dense_B, 2, self.slot_ids[:, None, :].expand(-1, dense_B.shape[1], -1))
        return picked * self.real_slots[:, None, :]


#: Sequences per dense local problem (:class:`LocalView`) of the sparse layout: the union of
#: their symbols, and so the local problem's width, stays at most this many times a length.
LOCAL_CHUNK = 256


def expected_emissions(prior_B: torch.Tensor, counts_B: torch.Tensor, bucket: Bucket) -> torch.Tensor:
    """``E_q[B_m]`` at each sequence's slots, float64 (M_b, K, W) (sparse layout)."""
    a = prior_B.double()
    c = counts_B.double()
    gathered = a[:, bucket.symbols].permute(1, 0, 2)
    return (gathered + c) / (a.sum(-1)[None, :] + c.sum(-1))[..., None]


def predictive_emissions(
    weights: torch.Tensor, prior_B: torch.Tensor, counts_B: torch.Tensor, bucket: Bucket
) -> torch.Tensor:
    """``sum_k w_mk E_q[B_m][k, v]`` for every symbol v, float64 (M_b, V) (sparse layout).

    ``E_q[B_m][k, v] = (a_kv + n_mkv) / (a_k0 + n_mk0)``: the prior part is one (M_b, K) x
    (K, V) product, the counts add at each sequence's own symbols.
    """
    a = prior_B.double()
    c = counts_B.double()
    scaled = weights.double() / (a.sum(-1)[None, :] + c.sum(-1))  # (M, K)
    out = scaled @ a
    at_slots = torch.einsum("mk,mkw->mw", scaled, c)
    return out.scatter_add_(1, bucket.symbols, at_slots)


def dense_emission_posterior(posterior: dict, beta) -> np.ndarray:
    """``g_B`` (M, K, V) from the sparse form of :meth:`VariantHMM.posterior`
    (``B_symbols``, ``B_counts``) and the learned emission prior ``beta`` (K, V): the Dirichlet
    parameters of every q(B_m). M x K x V numbers: for small V (or a few sequences) only."""
    beta = np.asarray(beta, dtype=np.float64)
    out = np.repeat(beta[None], len(posterior["B_symbols"]), axis=0)
    for m, (symbols, counts) in enumerate(zip(posterior["B_symbols"], posterior["B_counts"])):
        out[m][:, symbols] += counts
    return out


def chunks(n: int, size: int):
    """Row ranges ``[start, stop)`` covering ``0..n`` in chunks of at most ``size``."""
    return [(start, min(n, start + size)) for start in range(0, n, size)]
