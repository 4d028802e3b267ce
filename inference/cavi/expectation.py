"""The E-step of one bucket: per-sequence coordinate ascent with the database-level parameters fixed.

Data flow (docs/architecture.md)::

    buckets --E-step (per bucket, independent)--> per-sequence counts, entropies, ELBOs
            --reduce--> sufficient statistics (sums over sequences)

The E-step of a bucket alternates the guide's q(Z) update with the Dirichlet updates
``g = prior + expected counts`` of the per-sequence groups until every sequence's ELBO changes by
less than ``e_step_tol`` (relative); converged sequences drop out of the batch. Per-sequence counts
and the guide's state are kept between EM iterations, so the next E-step starts where the last
one ended (warm start) and every step is an ascent step: the total ELBO never decreases.

One driver for every guide (:class:`ldhmm.inference.cavi.protocol.GuideProtocol`): where the guide
declares a compiled update (``compiled_update``) and the tensors are float64 on CPU, a bucket
runs whole in the compiled kernel (:func:`ldhmm.inference.cavi.kernels.fused_sweeps.fused_e_step`);
otherwise, and for sequences whose compiled recursion underflowed, sweep by sweep in torch with
the guide's ``update_hidden`` (the reference the tests compare the kernel against).

Where a sequence's ascent starts when it has no warm state (the start policy) is
:mod:`ldhmm.inference.cavi.sequence_starts`; the E-step of many buckets reduced to the M-step's sums is
:mod:`ldhmm.inference.cavi.e_step_totals`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..batch import Bucket
from ..ops.dirichlet import expected_log_dirichlet, log_multivariate_beta
from ..ops.potentials import emission_potentials, weighted_sum
from ..parameters import EVENT_DIMS, VariantParameters, group_shape
from ..sharing import GROUPS, SEQUENCE
from . import kernels
from .emissions import (
    LOCAL_CHUNK,
    EmissionLogSums,
    LocalView,
    chunks,
    emission_log_sums,
    token_potentials,
)
from .guides import check_compiled_update
from .kernels.fused_sweeps import FAMILIES, PriorTerms, fused_e_step, prior_special_values, shifted_potentials
from .protocol import GuideProtocol, update_hidden

__all__ = [
    "BucketState",
    "expected_counts",
    "collapsed_terms",
    "compiled_family",
    "starts_from_counts",
    "prior_terms",
    "e_step_bucket",
    "sequence_log_sums",
]


@dataclass
class BucketState:
    """Per-sequence variational state of one bucket, kept between EM iterations.

    Attributes
    ----------
    counts : dict[str, Tensor]
        Expected counts per group (shapes as :func:`expected_counts`).
    entropy : Tensor, shape (M_b,)
    guide_state : object
        The guide's own state (FF: ``phi``), or None.
    elbo : Tensor, shape (M_b,)
        Per-sequence ELBO, including the terms of database-level groups.
    local_elbo : Tensor, shape (M_b,)
        The part of ``elbo`` that depends on nothing database-level except the priors:
        entropy plus the per-sequence groups' expected-log terms minus their KLs.
    sum_expected_log : dict[str, Tensor]
        ``sum_m E_q[log theta_m]`` of every per-sequence group over this bucket (empty where the
        best of several starts was kept without them: ``best_of_starts(..., log_sums=False)``).
    n_sweeps : int
    symbols : LongTensor (M_b, W), optional
        Sparse emission layout: the symbol of each slot of ``counts["B"]`` (the bucket's
        ``symbols``; see :mod:`ldhmm.inference.cavi.emissions`). None in the dense layout.
    """

    counts: dict
    entropy: torch.Tensor
    guide_state: object
    elbo: torch.Tensor
    local_elbo: torch.Tensor
    sum_expected_log: dict
    n_sweeps: int
    symbols: torch.Tensor | None = None


def expected_counts(state_marginals, transition_counts, tokens, n_symbols):
    """Per-sequence expected counts of every group.

    Parameters
    ----------
    state_marginals : Tensor, shape (M, T, K)
    transition_counts : Tensor, shape (M, K, K)
    tokens : LongTensor, shape (M, T)
        Indices into the emission axis: symbols (dense layout) or slots (sparse).
    n_symbols : int
        Width of the emission axis: V (dense) or W (sparse).

    Returns
    -------
    dict with ``pi`` (M, K), ``A`` (M, K, K), ``B`` (M, K, n_symbols)
    """
    M, T, K = state_marginals.shape
    emission = state_marginals.new_zeros(M, n_symbols, K)
    emission.scatter_add_(1, tokens[:, :, None].expand(M, T, K), state_marginals)
    # Copies, not views: a view of the (M, T, K) marginals would keep them alive between EM iterations.
    return {
        "pi": state_marginals[:, 0].clone(),
        "A": transition_counts,
        "B": emission.transpose(1, 2).contiguous(),
    }


def sequence_log_sums(params: VariantParameters, counts: dict, bucket: Bucket) -> dict:
    """``sum_m w_m E_q[log theta_m]`` over a bucket at its counts, ``q(theta_m) = Dir(prior +
    n_m)``, for every per-sequence group (B's in parts, :class:`EmissionLogSums`); ``w_m`` the
    bucket's ``weights`` (one each where it has none: then the same numbers as the sums the
    E-step's routes form as they go).

    Parameters
    ----------
    params : VariantParameters
    counts : dict of Tensor, ``pi`` (M_b, K), ``A`` (M_b, K, K), ``B`` (M_b, K, W)
    bucket : Bucket
    """
    seq_groups = params.sharing.groups(SEQUENCE)
    out = {}
    for g in seq_groups:
        if g == "B":
            out[g] = emission_log_sums(params.prior["B"], counts["B"], bucket)
            continue
        elog = expected_log_dirichlet(params.prior[g].double() + counts[g].double())
        if bucket.weights is not None:
            elog = elog * bucket.weights.double().reshape((-1,) + (1,) * (elog.dim() - 1))
        out[g] = elog.sum(0).to(counts[g].dtype)
    return out


def collapsed_terms(counts, params, seq_groups, prior_log_beta):
    """``E_q[log p(counts | theta)] - KL(q(theta) || p(theta))`` at the optimal q(theta).

    With ``g = prior + counts`` the expected-log terms cancel against the KL's
    ``(g - prior) . E log theta``, leaving ``log B(g) - log B(prior)`` per Dirichlet row: the
    ELBO needs no digamma, only the next q(Z) update does.
    """
    terms = 0.0
    for g in seq_groups:
        # float64: log B of concentrations near 1e6 are ~1e7 and their differences matter.
        value = (
            log_multivariate_beta(params.prior[g].double() + counts[g].double()) - prior_log_beta[g].double()
        )
        terms = terms + (value if g == "pi" else value.sum(-1))
    return terms.to(counts["B"].dtype) if isinstance(terms, torch.Tensor) else terms


def compiled_family(guide: GuideProtocol, counts: dict, guide_state) -> str | None:
    """The compiled update that will run the E-step of a bucket, or None for the torch route.

    The guide's ``compiled_update`` (if it declares one the kernel knows), when the kernels are
    enabled and every tensor the kernel would update in place is float64 on CPU.
    """
    family = getattr(guide, "compiled_update", None)
    if family is None or not kernels.ENABLED:
        return None
    check_compiled_update(guide)  # the kernel must not stand in for an update of the guide's own
    if family not in FAMILIES:
        raise ValueError(
            f"{type(guide).__name__}.compiled_update is {family!r}; the compiled "
            f"E-step knows {sorted(FAMILIES)} (or None for the torch route)"
        )
    tensors = list(counts.values())
    if FAMILIES[family][1] and isinstance(guide_state, torch.Tensor):
        tensors.append(guide_state)
    if any(t.dtype != torch.float64 or t.device.type != "cpu" for t in tensors):
        return None
    return family


def starts_from_counts(guide: GuideProtocol, counts: dict) -> bool:
    """Whether the E-step of these counts runs the guide's compiled update and that update
    carries no state between sweeps (PF): it starts from the counts alone, so the guide's
    start state (E log theta of every sequence, in torch: as costly as a sweep) is not built."""
    family = compiled_family(guide, counts, None)
    return family is not None and not FAMILIES[family][1]


def _tensors_key(params: VariantParameters) -> tuple:
    """Identifies the parameters' current values: each tensor's storage and in-place version."""
    return tuple(
        (name, g, t.data_ptr(), t._version)
        for name, d in (("prior", params.prior), ("posterior", params.posterior), ("point", params.log_point))
        for g, t in sorted(d.items())
    )


def prior_terms(params: VariantParameters) -> tuple[tuple, PriorTerms, tuple, tuple]:
    """The priors, their derived terms and the database-level E log theta, as the compiled
    E-step takes them (float64 numpy; groups that do not apply get placeholder ones).

    O(K V) special functions: computed once per parameters object (cached on it, keyed by the
    tensors' versions so that an in-place change recomputes), not once per bucket.
    """
    key = _tensors_key(params)
    cached = getattr(params, "_prior_terms_cache", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    value = _prior_terms(params)
    params._prior_terms_cache = (key, value)
    return value


def _prior_terms(params: VariantParameters) -> tuple[tuple, PriorTerms, tuple, tuple]:
    K, V = params.n_states, params.n_symbols
    prior, fixed, flags = [], [], []
    for g in GROUPS:
        per_sequence = params.sharing.kind(g) == SEQUENCE
        flags.append(per_sequence)
        shape = group_shape(g, K, V)
        dummy = torch.ones(shape, dtype=torch.float64)
        prior.append((params.prior[g] if per_sequence else dummy).contiguous().numpy())
        # The kernel reads E log theta of database-level groups only: a per-sequence group's
        # placeholder has the right number of dimensions, one entry (not K x V at large V).
        unused = torch.ones((1,) * len(shape), dtype=torch.float64)
        fixed.append((unused if per_sequence else params.fixed_expected_log(g)[0]).contiguous().numpy())
    prior_pi, prior_A, prior_B = prior
    prior_log_beta_piA = 0.0
    for flag, a in ((flags[0], prior_pi), (flags[1], prior_A)):
        if flag:
            prior_log_beta_piA += float(log_multivariate_beta(torch.from_numpy(a)).sum())
    beta = torch.from_numpy(np.ascontiguousarray(prior_B))
    psi_B = torch.digamma(beta)
    rowsum_B = prior_B.sum(1)
    terms = PriorTerms(
        prior_log_beta_piA=prior_log_beta_piA,
        lgamma_B=torch.lgamma(beta).numpy(),
        psi_B=psi_B.numpy(),
        rowsum_B=rowsum_B,
        lgamma_rowsum_B=torch.lgamma(torch.from_numpy(rowsum_B)).numpy(),
        elog_pi=expected_log_dirichlet(torch.from_numpy(np.ascontiguousarray(prior_pi))).numpy(),
        elog_A=expected_log_dirichlet(torch.from_numpy(np.ascontiguousarray(prior_A))).numpy(),
        # reusing psi(beta): one K x V digamma, not two
        elog_B=expected_log_dirichlet(beta, digamma=psi_B).numpy(),
        **prior_special_values(prior, rowsum_B, flags),
        **shifted_potentials(fixed, flags),
    )
    return tuple(prior), terms, tuple(fixed), tuple(flags)


def _e_step_compiled(family, bucket, params, counts, phi, max_iter, tol, record_trace) -> dict:
    """:func:`ldhmm.inference.cavi.kernels.fused_sweeps.fused_e_step` on a bucket; arrays back as tensors.

    ``counts`` (and FF's ``phi``) are updated in place.
    """
    prior, terms, fixed, flags = prior_terms(params)
    if phi is not None:
        phi = phi.contiguous()
    out = fused_e_step(
        family,
        bucket.emission_tokens.numpy(),
        bucket.lengths.numpy(),
        prior,
        terms,
        fixed,
        flags,
        tuple(counts[g].numpy() for g in GROUPS),
        max_iter,
        tol,
        record_trace,
        None if phi is None else phi.numpy(),
        None if bucket.symbols is None else bucket.symbols.numpy(),
    )
    for key, value in list(out.items()):
        if isinstance(value, np.ndarray):
            out[key] = torch.from_numpy(value)
    sums = out["sum_expected_log"]
    out["sum_expected_log"] = {g: torch.from_numpy(v) for g, v in sums.items() if g != "B"}
    if "B" in sums:
        n_ok, rows, delta, symbols = sums["B"]
        out["sum_expected_log"]["B"] = EmissionLogSums(n_ok, rows, [(delta, symbols)])
    return out


def _e_step_torch(
    bucket,
    params,
    guide,
    counts,
    guide_state,
    max_iter,
    tol,
    history,
    seq_groups,
    fixed_groups,
    fixed_elog,
    prior_log_beta,
    *,
    iteration=None,
) -> BucketState:
    """The E-step sweep by sweep in torch with the guide's ``update_hidden`` (told the EM
    ``iteration`` and the sweep where it takes them), shrinking the batch to unconverged
    sequences."""
    tokens, mask = bucket.tokens, bucket.mask
    Mb = bucket.n_sequences
    V = params.n_symbols
    dtype = counts["B"].dtype

    elog = params.expected_logs(counts, fixed_elog)
    if guide_state is None:
        guide_state = guide.init_state(elog["pi"], elog["A"], emission_potentials(elog["B"], tokens), mask)

    entropy = torch.zeros(Mb, dtype=dtype)
    elbo = torch.full((Mb,), -math.inf, dtype=dtype)
    active = torch.arange(Mb)
    n_sweeps = 0
    for n_sweeps in range(1, max_iter + 1):
        full = active.numel() == Mb
        sub_tokens = tokens if full else tokens[active]
        sub_mask = mask if full else mask[active]
        log_obs = emission_potentials(elog["B"], sub_tokens)
        sub_state = guide_state if full else guide.select_state(guide_state, active)
        update, sub_state = update_hidden(
            guide, sub_state, elog["pi"], elog["A"], log_obs, sub_mask, iteration=iteration, sweep=n_sweeps
        )
        new_counts = expected_counts(update.state_marginals, update.transition_counts, sub_tokens, V)
        new_elbo = update.entropy + collapsed_terms(new_counts, params, seq_groups, prior_log_beta)
        for g in fixed_groups:
            new_elbo = new_elbo + weighted_sum(new_counts[g], fixed_elog[g], EVENT_DIMS[g])
        old_elbo = elbo if full else elbo[active]
        if full:
            counts = new_counts
            guide_state = sub_state
            entropy = update.entropy
            elbo = new_elbo
        else:
            for g in GROUPS:
                counts[g][active] = new_counts[g]
            guide_state = guide.scatter_state(guide_state, active, sub_state)
            entropy[active] = update.entropy
            elbo[active] = new_elbo
        if history is not None:
            history.append(float(elbo.sum()))
        if not seq_groups:
            break  # q(Z) given database-level parameters is exact after one update
        converged = (new_elbo - old_elbo).abs() <= tol * new_elbo.abs()
        keep = ~converged
        if not bool(keep.any()):
            break
        if n_sweeps < max_iter:
            active = active[keep]
            elog = params.expected_logs({g: new_counts[g][keep] for g in seq_groups}, fixed_elog)

    local = collapsed_terms(counts, params, seq_groups, prior_log_beta)
    final_elog = {
        g: expected_log_dirichlet(params.prior[g].double() + counts[g].double()) for g in seq_groups
    }
    return BucketState(
        counts=counts,
        entropy=entropy,
        guide_state=guide_state,
        elbo=elbo,
        local_elbo=entropy + local,
        sum_expected_log={g: final_elog[g].sum(0) for g in seq_groups},
        n_sweeps=n_sweeps,
    )


def _e_step_local(
    bucket,
    params,
    guide,
    counts,
    guide_state,
    max_iter,
    tol,
    history,
    *,
    iteration=None,
) -> BucketState:
    """The torch route in the sparse layout: chunks of the bucket, each as a dense problem over
    the symbols it contains plus one lumped remainder (:class:`LocalView`), exact by the
    Dirichlet's aggregation property. The bucket runs as one chunk when ``history`` is recorded."""
    M = bucket.n_sequences
    parts = []
    for start, stop in chunks(M, M if history is not None else LOCAL_CHUNK):
        idx = torch.arange(start, stop)
        view = LocalView(bucket.select(idx), params)
        local = view.params
        seq_groups = local.sharing.groups(SEQUENCE)
        fixed_groups = [g for g in GROUPS if g not in seq_groups]
        sub_counts = {g: c[idx].clone() for g, c in counts.items()}
        sub_counts["B"] = view.dense_counts(sub_counts["B"])
        dense_terms = (
            seq_groups,
            fixed_groups,
            {g: local.fixed_expected_log(g) for g in fixed_groups},
            {g: log_multivariate_beta(local.prior[g].double()) for g in seq_groups},
        )
        sub_state = guide.select_state(guide_state, idx)
        run = _e_step_torch(
            view.bucket,
            local,
            guide,
            sub_counts,
            sub_state,
            max_iter,
            tol,
            history,
            *dense_terms,
            iteration=iteration,
        )
        run.counts["B"] = view.slot_counts(run.counts["B"])
        parts.append((idx, run))
    runs = [r for _, r in parts]
    out_counts = {g: torch.cat([r.counts[g] for r in runs]) for g in GROUPS}
    for idx, run in parts:
        guide_state = guide.scatter_state(guide_state, idx, run.guide_state)
    seq_groups = params.sharing.groups(SEQUENCE)
    sum_elog = {g: sum(r.sum_expected_log[g] for r in runs) for g in seq_groups if g != "B"}
    if "B" in seq_groups:
        sum_elog["B"] = emission_log_sums(params.prior["B"], out_counts["B"], bucket)
    return BucketState(
        counts=out_counts,
        entropy=torch.cat([r.entropy for r in runs]),
        guide_state=guide_state,
        elbo=torch.cat([r.elbo for r in runs]),
        local_elbo=torch.cat([r.local_elbo for r in runs]),
        sum_expected_log=sum_elog,
        n_sweeps=max(r.n_sweeps for r in runs),
        symbols=bucket.symbols,
    )


def _e_step_any(
    bucket, params, guide, counts, guide_state, max_iter, tol, history, *dense_terms, iteration=None
):
    """The torch route in either layout (``dense_terms``: seq_groups, fixed_groups, fixed_elog,
    prior_log_beta of the dense route; ``iteration``: the EM iteration, for the guide)."""
    if bucket.sparse:
        return _e_step_local(
            bucket, params, guide, counts, guide_state, max_iter, tol, history, iteration=iteration
        )
    return _e_step_torch(
        bucket, params, guide, counts, guide_state, max_iter, tol, history, *dense_terms, iteration=iteration
    )


def e_step_bucket(
    bucket: Bucket,
    params: VariantParameters,
    guide: GuideProtocol,
    state: BucketState | None = None,
    max_iter: int = 100,
    tol: float = 1e-6,
    history: list | None = None,
    consume_state: bool = False,
    iteration: int | None = None,
) -> BucketState:
    """Coordinate ascent for every sequence of one bucket until its ELBO converges.

    One sweep is: q(Z) update from the current ``E log theta``, then ``g = prior + counts`` for
    every per-sequence group. Sequences whose ELBO changed by at most ``tol * |ELBO|`` leave the
    batch.

    Parameters
    ----------
    bucket : Bucket
    params : VariantParameters
        Held fixed.
    guide : GuideProtocol
    state : BucketState, optional
        Warm start: the counts and guide state of the previous EM iteration.
    max_iter : int
        Sweeps at most.
    tol : float
    history : list, optional
        If given, the bucket's summed ELBO after every sweep is appended (for tests).
    consume_state : bool
        Update ``state``'s tensors in place instead of copying them (saves a copy of the
        per-sequence state; the caller must not use ``state`` afterwards).
    iteration : int, optional
        The EM iteration (1-based; None outside a fit), passed with the sweep to a guide's
        ``update_hidden`` that takes them (:func:`ldhmm.inference.cavi.protocol.update_hidden`).

    Returns
    -------
    BucketState
    """
    sharing = params.sharing
    seq_groups = sharing.groups(SEQUENCE)
    fixed_groups = [g for g in GROUPS if g not in seq_groups]
    mask = bucket.mask
    Mb = bucket.n_sequences
    K, V = params.n_states, params.n_symbols
    dtype = params.dtype
    fixed_elog = {g: params.fixed_expected_log(g) for g in fixed_groups}

    W = bucket.emission_width(V)
    if state is None:
        counts = {g: torch.zeros((Mb,) + group_shape(g, K, W), dtype=dtype) for g in GROUPS}
        guide_state = None
    else:
        counts = {g: (c if consume_state else c.clone()) for g, c in state.counts.items()}
        guide_state = state.guide_state
        if isinstance(guide_state, torch.Tensor) and not consume_state:
            guide_state = guide_state.clone()  # compiled paths update it in place

    if guide_state is None and not starts_from_counts(guide, counts):
        # Cold start (q(theta) = the prior where no counts exist yet): the guide's own start,
        # the same for the compiled and the torch route. Without a state the counts are the
        # zeros made above: None asks for the prior's potentials, computed once.
        start_counts = None if state is None else counts
        guide_state = guide.init_state(*token_potentials(params, start_counts, bucket, fixed_elog), mask)
    family = compiled_family(guide, counts, guide_state)
    if family is None or not bucket.sparse:
        # the dense torch route's log B(prior): O(K V), so only where it may run
        prior_log_beta = {g: log_multivariate_beta(params.prior[g].double()) for g in seq_groups}
    else:
        prior_log_beta = None
    dense_terms = (seq_groups, fixed_groups, fixed_elog, prior_log_beta)
    if family is None:
        return _e_step_any(
            bucket,
            params,
            guide,
            counts,
            guide_state,
            max_iter,
            tol,
            history,
            *dense_terms,
            iteration=iteration,
        )
    carries_state = FAMILIES[family][1]
    result = _e_step_compiled(
        family,
        bucket,
        params,
        counts,
        guide_state if carries_state else None,
        max_iter,
        tol,
        record_trace=history is not None,
    )
    entropy, elbo, local = result["entropy"], result["elbo"], result["local"]
    guide_state = result["phi"] if carries_state else guide_state
    failed = result["failed"]
    n_sweeps = int(result["sweeps"].max())
    sum_elog = result["sum_expected_log"]
    if history is not None:
        filled = result["trace"].numpy().copy()
        for i in range(1, filled.shape[1]):
            filled[:, i] = np.where(np.isnan(filled[:, i]), filled[:, i - 1], filled[:, i])
        history.extend(float(v) for v in filled[:, :n_sweeps].sum(0))
    if bool(failed.any()):
        # The scaled recursion underflowed: redo these sequences sweep by sweep in torch (the
        # chain falls back to log space there) from the counts they had reached, then add
        # their statistics.
        idx = failed.nonzero()[:, 0]
        sub = bucket.select(idx)
        redo = _e_step_any(
            sub,
            params,
            guide,
            {g: c[idx] for g, c in counts.items()},
            guide.select_state(guide_state, idx),
            max_iter,
            tol,
            None,
            *dense_terms,
            iteration=iteration,
        )
        for g in GROUPS:
            counts[g][idx] = redo.counts[g]
        guide_state = guide.scatter_state(guide_state, idx, redo.guide_state)
        entropy[idx], elbo[idx], local[idx] = redo.entropy, redo.elbo, redo.local_elbo
        sum_elog = {g: sum_elog[g] + redo.sum_expected_log[g] for g in seq_groups}
        n_sweeps = max(n_sweeps, redo.n_sweeps)
    return BucketState(counts, entropy, guide_state, elbo, local, sum_elog, n_sweeps, bucket.symbols)
