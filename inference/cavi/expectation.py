"""The E-step driver: per-sequence coordinate ascent with the database-level parameters fixed.

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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch

from ..batch import Bucket
from ..ops.dirichlet import expected_log_dirichlet, log_multivariate_beta
from ..ops.hashing import hashed_uniform
from ..ops.potentials import emission_potentials, weighted_sum
from ..parameters import EVENT_DIMS, VariantParameters, group_shape
from ..sharing import GROUPS, SEQUENCE
from . import kernels
from .emissions import (
    LOCAL_CHUNK,
    EmissionLogSums,
    LocalView,
    add_emission_counts,
    chunks,
    emission_log_sums,
    token_potentials,
    total_emission_counts,
)
from .exact_chain import ExactChain, forward_backward
from .guides import FFGuide, check_compiled_update
from .kernels.fused_sweeps import FAMILIES, PriorTerms, fused_e_step, prior_special_values, shifted_potentials
from .protocol import GuideProtocol, update_hidden

__all__ = [
    "BucketState",
    "EStepTotals",
    "expected_counts",
    "collapsed_terms",
    "compiled_family",
    "prior_terms",
    "e_step_bucket",
    "STARTS",
    "guide_starts",
    "RANDOM_STARTS",
    "default_starts",
    "rotating_start",
    "EXTRA_STARTS",
    "held_out_starts",
    "start_state",
    "best_of_starts",
    "e_step",
    "independent_pair_counts",
    "start_scratch_bytes",
    "BEST_OF_STARTS_COPIES",
]

#: Where a sequence's coordinate ascent can start when no warm state exists (the held-out
#: E-step and a fit's first one run every start and keep each sequence's best bound; a
#: restart of a fit runs them on its current state too):
#:
#: ``"prior"``: q(theta) = the prior, q(Z) from the guide's ``init_state`` (the cold start).
#: ``"mean"``: counts from the exact chain under the log prior *means*, then the guide from
#: there. Where a learned prior is sparse, the cold start's ``E log theta = psi(a) - psi(a_0)``
#: all but forbids what the prior makes rare (psi(0.01) is about -100), and coordinate ascent
#: stays in that corner; the log mean does not.
#: ``"chain"``: the best converged E-step of the exact-chain (PF) family first, then the
#: guide from its counts. For a mean-field guide this escapes the poor per-sequence optima
#: that its own starts fall into.
#:
#: ``"random:<i>"``: counts from random, fairly sharp marginals (the i-th draw, hashed from
#: the sequence's position in the database, so it does not depend on bucketing), then the
#: guide from there: where the posterior of a sequence is multimodal, a few random starts
#: find the modes that the deterministic ones miss.
#:
#: Every start is a valid point of the guide's own family, so the best per sequence is still
#: that family's bound (an FF score stays an FF bound). A guide may narrow the list with a
#: ``starts`` attribute (PF: ``("prior", "mean")``: its "chain" start is its own best).
STARTS = ("prior", "mean", "chain")
#: A start that a guide may add to its held-out E-step (``held_out_starts``), beside
#: :data:`STARTS`:
#:
#: ``"factorized"``: the fully factorized (FF) family's own held-out E-step first (its starts
#: and the same random draws), then the guide from its counts. For a chain guide (PF) this
#: makes the held-out bound at least FF's on every sequence: FF's q(Z) lies in the chain
#: family, so the first q(Z) update from FF's q(theta) already reaches FF's bound, and
#: coordinate ascent only climbs from there (docs/math.md, "Held-out E-step").
#:
#: ``"constant"``: one start per state k, every position in k (counts of the one-state path),
#: then the guide from there. Under learned priors at their caps (concentrations near 1e-6
#: next to 1e5) a sequence's posterior has corners that coordinate ascent cannot leave:
#: ``psi(1e-6)`` is about -1e6, so a start that puts a little mass on a transition the sequence
#: does not need keeps it, and one that puts none never finds it. The one-state paths are the
#: corners a fit reaches where it keeps a sequence in one state.
#:
#: ``"smoothed"``: the cold start's E-step under the prior with every per-sequence concentration
#: raised to at least :data:`SMOOTHED_FLOOR` (a Dirichlet with no corners to stick in), then
#: the guide from its counts under the real prior: the path a fit takes while its priors move
#: to sparse values, in one step.
EXTRA_STARTS = ("factorized", "constant", "smoothed")
#: The extra starts every guide's held-out E-step runs (a guide adds its own with a
#: ``held_out_starts`` attribute; PF: ``("factorized",)``).
HELD_OUT_EXTRA_STARTS = ("constant", "smoothed")
#: The smallest concentration of the ``"smoothed"`` start's prior.
SMOOTHED_FLOOR = 1.0
#: Random starts of the held-out E-step, a fit's first E-step and its refreshes, by default.
RANDOM_STARTS = 3


def default_starts(guide, n_random: int = RANDOM_STARTS) -> tuple:
    """The guide's deterministic starts (:func:`guide_starts`) and ``n_random`` random ones."""
    return guide_starts(guide) + tuple(f"random:{i}" for i in range(n_random))


def rotating_start(starts: tuple, turn: int, n_random: int = RANDOM_STARTS) -> tuple:
    """The one start of a fit's ``turn``-th rotating E-step (``turn`` >= 1): ``starts`` (a fit's,
    :func:`default_starts`) in turn, a random one replaced by a new draw (``"random:<n_random +
    turn>"``, never one of the first E-step's), so that every turn of the cycle searches anew."""
    start = starts[turn % len(starts)]
    if start.startswith("random:"):
        start = f"random:{n_random + turn}"
    return (start,)


def held_out_starts(guide, n_random: int = RANDOM_STARTS) -> tuple:
    """The starts of the held-out E-step: :func:`default_starts`, the guide's
    ``held_out_starts`` attribute (a subset of :data:`EXTRA_STARTS`; PF: ``("factorized",)``)
    and :data:`HELD_OUT_EXTRA_STARTS`."""
    extra = tuple(getattr(guide, "held_out_starts", ()))
    unknown = [s for s in extra if s not in EXTRA_STARTS]
    if unknown:
        raise ValueError(
            f"{type(guide).__name__}.held_out_starts must be a subset of {EXTRA_STARTS}, got {extra}"
        )
    extra += tuple(s for s in HELD_OUT_EXTRA_STARTS if s not in extra)
    return default_starts(guide, n_random) + extra


def expand_starts(starts: tuple, n_states: int) -> tuple:
    """``starts`` with ``"constant"`` replaced by one start per state (``"constant:<k>"``)."""
    out = []
    for start in starts:
        out += [f"constant:{k}" for k in range(n_states)] if start == "constant" else [start]
    return tuple(out)


# The exact-chain family that seeds the "chain" start.
_SEED = ExactChain()
# The fully factorized family that seeds the "factorized" start.
_FACTORIZED = FFGuide()


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
        ``sum_m E_q[log theta_m]`` of every per-sequence group over this bucket.
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


@dataclass
class EStepTotals:
    """Sums over the whole database after an E-step.

    Attributes
    ----------
    n_sequences : int
    local_elbo : float
        ``sum_m`` of the per-sequence local ELBO parts.
    sum_expected_log : dict[str, Tensor]
        Per-sequence groups: ``sum_m E_q[log theta_m]``.
    total_counts : dict[str, Tensor]
        Every group: expected counts summed over sequences.
    max_sweeps : int
    """

    n_sequences: int
    local_elbo: float
    sum_expected_log: dict
    total_counts: dict
    max_sweeps: int


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


def _starts_from_counts(guide: GuideProtocol, counts: dict) -> bool:
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

    if guide_state is None and not _starts_from_counts(guide, counts):
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


def guide_starts(guide) -> tuple:
    """The starts the E-step runs for ``guide``: its ``starts`` attribute, else :data:`STARTS`."""
    starts = tuple(getattr(guide, "starts", STARTS))
    unknown = [s for s in starts if s not in STARTS and not s.startswith("random:")]
    if not starts or unknown:
        raise ValueError(
            f"{type(guide).__name__}.starts must be a non-empty subset of {STARTS}, got {starts}"
        )
    return starts


def start_state(
    start: str,
    bucket: Bucket,
    params: VariantParameters,
    guide,
    max_iter: int,
    tol: float,
    n_random: int = RANDOM_STARTS,
):
    """The state a start begins from (see :data:`STARTS`, :data:`EXTRA_STARTS`): None for
    ``"prior"`` (cold start); otherwise expected counts with the guide's ``init_state`` under
    their E log theta. ``n_random``: the random draws of the "factorized" start's FF E-step."""
    if start == "prior":
        return None
    if start == "mean":
        seq_groups = params.sharing.groups(SEQUENCE)
        log_mean = {
            g: torch.log(params.prior[g] / params.prior[g].sum(-1, keepdim=True))[None]
            if g in seq_groups
            else params.fixed_expected_log(g)
            for g in GROUPS
        }
        post = forward_backward(
            log_mean["pi"], log_mean["A"], emission_potentials(log_mean["B"], bucket.tokens), bucket.mask
        )
        counts = expected_counts(
            post.state_marginals,
            post.transition_counts,
            bucket.emission_tokens,
            bucket.emission_width(params.n_symbols),
        )
    elif start == "chain":
        counts = best_of_starts(bucket, params, _SEED, guide_starts(_SEED), None, max_iter, tol).counts
    elif start == "factorized":
        ff_starts = held_out_starts(_FACTORIZED, n_random)
        counts = best_of_starts(bucket, params, _FACTORIZED, ff_starts, None, max_iter, tol).counts
    elif start == "smoothed":
        floored = dict(params.prior)
        for g in params.sharing.groups(SEQUENCE):
            floored[g] = torch.clamp(params.prior[g], min=SMOOTHED_FLOOR)
        smooth = replace(params, prior=floored)
        counts = e_step_bucket(bucket, smooth, guide, None, max_iter=max_iter, tol=tol).counts
    elif start.startswith("random:"):
        counts = _random_counts(bucket, params, int(start.split(":", 1)[1]))
    elif start.startswith("constant:"):
        counts = _one_state_counts(bucket, params, int(start.split(":", 1)[1]))
    else:
        raise ValueError(f"unknown start {start!r}; use one of {STARTS + EXTRA_STARTS} or 'random:<i>'")
    guide_state = None
    if not _starts_from_counts(guide, counts):
        guide_state = guide.init_state(*token_potentials(params, counts, bucket), bucket.mask)
    return BucketState(counts, None, guide_state, None, None, {}, 0, bucket.symbols)


def independent_pair_counts(marginals: torch.Tensor) -> torch.Tensor:
    """``sum_n r_n r_(n+1)^T`` of every sequence: the pair counts of independent positions.

    Parameters
    ----------
    marginals : Tensor, shape (M, T, K)

    Returns
    -------
    Tensor, shape (M, K, K)

    The product is formed a chunk of sequences at a time: whole it would be M x (T-1) x K x K
    values (K = 200 on a bucket of 3,000 cells: 1 GB); a chunk's is at most the marginals' size,
    or one sequence's (:func:`start_scratch_bytes`). Each sequence's sum runs over its positions
    in the same order whatever the chunk, so the counts are those of the whole product.
    """
    M, T, K = marginals.shape
    rows = max(1, (M * T * K) // max(1, (T - 1) * K * K))
    if rows >= M:
        return (marginals[:, :-1, :, None] * marginals[:, 1:, None, :]).sum(1)
    return torch.cat([(c[:, :-1, :, None] * c[:, 1:, None, :]).sum(1) for c in marginals.split(rows)])


def start_scratch_bytes(cells: int, max_length: int, n_states: int) -> int:
    """Peak scratch bytes of one start's counts (:func:`_random_counts`, the largest) on a
    bucket of ``cells`` padded positions: the hashed keys and uniforms, ``u**3``, the marginals
    and their normalized, masked copies (eight float64 or uint64 arrays (cells, K)), and one
    chunk of :func:`independent_pair_counts`' product (at most the marginals' size, or one
    sequence's (T-1) x K x K)."""
    K = int(n_states)
    return 8 * (8 * cells * K + max(cells * K, max(0, int(max_length) - 1) * K * K))


#: Bucket states alive at once in :func:`best_of_starts` beside the kept ones: the warm run,
#: a start's counts, its run and the per-sequence best's copy.
BEST_OF_STARTS_COPIES = 4


def _one_state_counts(bucket: Bucket, params: VariantParameters, state: int) -> dict:
    """Expected counts of the path that stays in ``state`` at every position."""
    marginals = torch.zeros(bucket.tokens.shape + (params.n_states,), dtype=params.dtype)
    marginals[..., state] = 1.0
    marginals = marginals * bucket.mask[..., None]
    pairs = independent_pair_counts(marginals)
    return expected_counts(marginals, pairs, bucket.emission_tokens, bucket.emission_width(params.n_symbols))


def _random_counts(bucket: Bucket, params: VariantParameters, draw: int) -> dict:
    """Expected counts of random marginals ``r_n ~ u^3`` (normalized; u uniform, hashed from
    (draw, sequence index, position, state)) with the pair counts of independent positions."""
    M, T = bucket.tokens.shape
    K = params.n_states
    u = hashed_uniform(
        draw, bucket.index.numpy()[:, None, None], np.arange(T)[None, :, None], np.arange(K)[None, None, :]
    )
    marginals = torch.from_numpy(u**3).to(params.dtype)
    marginals = marginals / marginals.sum(-1, keepdim=True) * bucket.mask[..., None]
    pairs = independent_pair_counts(marginals)
    return expected_counts(marginals, pairs, bucket.emission_tokens, bucket.emission_width(params.n_symbols))


def best_of_starts(
    bucket: Bucket,
    params: VariantParameters,
    guide: GuideProtocol,
    starts: tuple,
    warm: BucketState | None = None,
    max_iter: int = 100,
    tol: float = 1e-6,
    iteration: int | None = None,
) -> BucketState:
    """Coordinate ascent from each start (and from ``warm``, if given), keeping for every
    sequence the run with the highest ELBO (ties: the earlier run, ``warm`` first).

    Each sequence's bound is its own, so the per-sequence maximum is a bound of the same
    family; with ``warm`` among the runs the result is never below its warm continuation, so
    the EM objective still never decreases.
    """
    runs = []
    if warm is not None:
        runs.append(
            e_step_bucket(
                bucket,
                params,
                guide,
                warm,
                max_iter=max_iter,
                tol=tol,
                consume_state=True,
                iteration=iteration,
            )
        )
    n_random = sum(s.startswith("random:") for s in starts)
    for start in expand_starts(starts, params.n_states):
        begin = start_state(start, bucket, params, guide, max_iter, tol, n_random)
        runs.append(
            e_step_bucket(
                bucket,
                params,
                guide,
                begin,
                max_iter=max_iter,
                tol=tol,
                consume_state=True,
                iteration=iteration,
            )
        )
        # Folded as the runs come (the first maximum is kept, as over the whole list): two
        # runs' state in memory, however many starts.
        if len(runs) == 2:
            runs = [_best_per_sequence(runs, bucket, params, guide)]
    return _best_per_sequence(runs, bucket, params, guide)


def _best_per_sequence(runs: list, bucket: Bucket, params: VariantParameters, guide) -> BucketState:
    """Each sequence's state from the run with the highest ELBO (first maximum on ties; a run
    that went non-finite never wins), with the bucket's sums of E log theta recomputed."""
    best = runs[0]
    if len(runs) == 1:
        return best
    choice = torch.nan_to_num(torch.stack([r.elbo for r in runs]), nan=-math.inf).argmax(0)
    if not bool((choice > 0).any()):
        return best
    counts = {g: c.clone() for g, c in best.counts.items()}
    entropy, elbo, local = best.entropy.clone(), best.elbo.clone(), best.local_elbo.clone()
    guide_state = best.guide_state
    for r, run in enumerate(runs[1:], start=1):
        idx = (choice == r).nonzero()[:, 0]
        if idx.numel() == 0:
            continue
        for g in GROUPS:
            counts[g][idx] = run.counts[g][idx]
        guide_state = guide.scatter_state(guide_state, idx, guide.select_state(run.guide_state, idx))
        entropy[idx], elbo[idx], local[idx] = run.entropy[idx], run.elbo[idx], run.local_elbo[idx]
    seq_groups = params.sharing.groups(SEQUENCE)
    sum_elog = {
        g: expected_log_dirichlet(params.prior[g].double() + counts[g].double()).sum(0).to(counts[g].dtype)
        for g in seq_groups
        if g != "B"
    }
    if "B" in seq_groups:
        sum_elog["B"] = emission_log_sums(params.prior["B"], counts["B"], bucket)
    n_sweeps = max(r.n_sweeps for r in runs)
    return BucketState(counts, entropy, guide_state, elbo, local, sum_elog, n_sweeps, bucket.symbols)


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
) -> tuple[list[BucketState], EStepTotals]:
    """Run :func:`e_step_bucket` on every bucket and reduce the sufficient statistics.

    ``states`` (the previous iteration's, for warm starts) is consumed: its entries are updated
    in place and then dropped from the list, so only one copy of the per-sequence state lives.
    With ``starts`` (see :data:`STARTS`), every bucket runs :func:`best_of_starts` with its
    warm state among the runs. ``iteration`` (the EM iteration; None outside a fit) goes to
    the guide's ``update_hidden`` where it takes it.
    """
    states = states if states is not None else [None] * len(buckets)
    new_states = []
    seq_groups = params.sharing.groups(SEQUENCE)
    if not seq_groups:
        starts = ()  # q(Z) given database-level parameters is exact: every start ends alike
    sum_elog = {g: EmissionLogSums() if g == "B" else 0.0 for g in seq_groups}
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
                bucket, params, guide, starts, states[i], max_iter=max_iter, tol=tol, iteration=iteration
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
        for g in seq_groups:
            if g == "B":
                # absorbed into one K x V buffer; the bucket's per-slot terms (as large as its
                # B counts) are let go
                sum_elog[g].absorb(st.sum_expected_log.pop(g), V)
            else:
                sum_elog[g] = sum_elog[g] + st.sum_expected_log[g]
        for g in GROUPS:
            if g == "B" and count_total_B is not None:
                add_emission_counts(count_total_B, st.counts[g], bucket)
            elif g == "B":
                totals[g] = totals[g] + total_emission_counts(st.counts[g], bucket, V)
            else:
                totals[g] = totals[g] + st.counts[g].sum(0)
        local += float(st.local_elbo.sum())
        n += bucket.n_sequences
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
