"""The E-step of many buckets (a partition's), reduced to the M-step's sums.

Each bucket runs :func:`ldhmm.inference.cavi.expectation.e_step_bucket` from its warm state, or
:func:`ldhmm.inference.cavi.sequence_starts.best_of_starts` where starts are asked for; the per-sequence
state stays with the caller and the sums over sequences (:class:`EStepTotals`, O(K V) numbers)
go to the M-step. Buckets are added in order, so the sums do not depend on threads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..batch import Bucket
from ..parameters import VariantParameters
from ..sharing import GROUPS, SEQUENCE
from .emissions import EmissionLogSums, add_emission_counts, total_emission_counts
from .expectation import BucketState, e_step_bucket, prior_terms, sequence_log_sums
from .sequence_starts import best_of_starts

__all__ = ["EStepTotals", "e_step"]


@dataclass
class EStepTotals:
    """Sums over the whole database after an E-step.

    Attributes
    ----------
    n_sequences : int
    local_elbo : float
        ``sum_m`` of the per-sequence local ELBO parts.
    sum_expected_log : dict[str, Tensor]
        Per-sequence groups: ``sum_m E_q[log theta_m]`` (the paper's M-step's statistics;
        empty where the E-step was told not to form them, ``log_sums=False``).
    total_counts : dict[str, Tensor]
        Every group: expected counts summed over sequences.
    max_sweeps : int
    """

    n_sequences: int
    local_elbo: float
    sum_expected_log: dict
    total_counts: dict
    max_sweeps: int


@dataclass
class _BucketSums:
    """What a bucket adds to the database's sums: its per-sequence counts and local ELBO (each
    row as many times as the sequences it stands for), its groups' ``sum_m E log theta_m`` and
    how many sequences it stands for."""

    counts: dict
    local_elbo: torch.Tensor
    sum_expected_log: dict
    n_sequences: int


def _plain_sums(st: BucketState, bucket: Bucket) -> _BucketSums:
    """A bucket of one sequence per row: its state's own numbers (the sums the E-step formed)."""
    return _BucketSums(st.counts, st.local_elbo, st.sum_expected_log, bucket.n_sequences)


def _weighted_sums(params: VariantParameters, st: BucketState, bucket: Bucket, log_sums: bool) -> _BucketSums:
    """A bucket whose rows stand for ``bucket.weights`` identical sequences each: every row's
    numbers times its weight, and (``log_sums``) the E log theta sums formed anew with the
    weights (the E-step's own are of one copy each)."""
    w = bucket.weights
    counts = {g: c * w.to(c.dtype).reshape((-1,) + (1,) * (c.dim() - 1)) for g, c in st.counts.items()}
    n = int(round(float(w.sum())))
    sum_elog = sequence_log_sums(params, st.counts, bucket) if log_sums else {}
    return _BucketSums(counts, st.local_elbo * w.to(st.local_elbo.dtype), sum_elog, n)


def e_step(
    buckets: list[Bucket],
    params: VariantParameters,
    guide,
    states: list[BucketState | None] | None = None,
    max_iter: int = 100,
    tol: float = 1e-6,
    progress: Callable | None = None,
    starts: tuple = (),
    iteration: int | None = None,
    log_sums: bool = True,
) -> tuple[list[BucketState], EStepTotals]:
    """Run :func:`e_step_bucket` on every bucket and reduce the sufficient statistics.

    ``states`` (the previous iteration's, for warm starts) is consumed: its entries are updated
    in place and then dropped from the list, so only one copy of the per-sequence state lives.
    With ``starts`` (see :data:`STARTS`), every bucket runs :func:`best_of_starts` with its
    warm state among the runs. ``iteration`` (the EM iteration; None outside a fit) goes to
    the guide's ``update_hidden`` where it takes it. ``log_sums`` False: the totals' and the
    merged states' ``sum_expected_log`` are left empty (only the paper's M-step reads them).
    """
    states = states if states is not None else [None] * len(buckets)
    new_states = []
    seq_groups = params.sharing.groups(SEQUENCE)
    if not seq_groups:
        starts = ()  # q(Z) given database-level parameters is exact: every start ends alike
    log_groups = seq_groups if log_sums else []
    sum_elog = {g: EmissionLogSums() if g == "B" else 0.0 for g in log_groups}
    totals = {g: 0.0 for g in GROUPS}
    # B's total counts are added in place into one (K, V) array (the sparse layout touches only
    # each bucket's symbols; float64: other dtypes add a bucket's sum as before).
    V = params.n_symbols
    count_total_B = np.zeros((params.n_states, V)) if params.dtype == torch.float64 else None
    local = 0.0
    n = 0
    sweeps = 0
    for i, bucket in enumerate(buckets):
        if starts:
            st = best_of_starts(
                bucket,
                params,
                guide,
                starts,
                states[i],
                max_iter=max_iter,
                tol=tol,
                iteration=iteration,
                log_sums=log_sums,
            )
        else:
            st = e_step_bucket(
                bucket,
                params,
                guide,
                states[i],
                max_iter=max_iter,
                tol=tol,
                consume_state=True,
                iteration=iteration,
            )
        states[i] = None
        new_states.append(st)
        if bucket.weights is not None:
            sums = _weighted_sums(params, st, bucket, log_sums)
        else:
            sums = _plain_sums(st, bucket)
        for g in log_groups:
            if g == "B":
                # absorbed into one K x V buffer; the bucket's per-slot terms (as large as its
                # B counts) are let go
                sum_elog[g].absorb(sums.sum_expected_log.pop(g), V)
            else:
                sum_elog[g] = sum_elog[g] + sums.sum_expected_log[g]
        for g in GROUPS:
            if g == "B" and count_total_B is not None:
                add_emission_counts(count_total_B, sums.counts[g], bucket)
            elif g == "B":
                totals[g] = totals[g] + total_emission_counts(sums.counts[g], bucket, V)
            else:
                totals[g] = totals[g] + sums.counts[g].sum(0)
        local += float(sums.local_elbo.sum())
        n += sums.n_sequences
        sweeps = max(sweeps, st.n_sweeps)
        if progress is not None:
            progress(bucket.n_sequences)
    if count_total_B is not None and buckets:
        totals["B"] = torch.from_numpy(count_total_B)
    if "B" in sum_elog:
        # The O(K V) part of sum_m E log B_m, once per E-step.
        _, terms, _, _ = prior_terms(params)
        sum_elog["B"] = sum_elog["B"].total(params.prior["B"], terms.psi_B).to(params.dtype)
    return new_states, EStepTotals(n, local, sum_elog, totals, sweeps)
