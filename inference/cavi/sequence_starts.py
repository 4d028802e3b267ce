"""Where a sequence's coordinate ascent starts when it has no warm state: the start policy.

A fit's first E-step and its refreshes, and every held-out E-step, run several starts per
sequence (:data:`STARTS`, :data:`EXTRA_STARTS`, random draws) and keep each sequence's best
bound (:func:`best_of_starts`); a fit's rotating start (:func:`rotating_start`) runs one of them
beside the warm continuation at every E-step. Which starts a fit runs when is the effort
preset's (:mod:`ldhmm.models.fit_settings`); the E-step of one bucket from one start is
:func:`ldhmm.inference.cavi.expectation.e_step_bucket`.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch

from ..batch import Bucket
from ..ops.hashing import hashed_uniform
from ..ops.potentials import emission_potentials
from ..parameters import VariantParameters
from ..sharing import GROUPS, SEQUENCE
from .emissions import token_potentials
from .exact_chain import ExactChain, forward_backward
from .expectation import BucketState, e_step_bucket, expected_counts, sequence_log_sums, starts_from_counts
from .guides import FFGuide
from .protocol import GuideProtocol

__all__ = [
    "STARTS",
    "EXTRA_STARTS",
    "HELD_OUT_EXTRA_STARTS",
    "SMOOTHED_FLOOR",
    "RANDOM_STARTS",
    "guide_starts",
    "default_starts",
    "rotating_start",
    "held_out_starts",
    "expand_starts",
    "start_state",
    "best_of_starts",
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
#: the sequence's position in the database, or from its content where identical sequences are
#: computed once: it does not depend on bucketing), then the
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
    if not starts_from_counts(guide, counts):
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
    (draw, the sequence's key, position, state); the key: ``bucket.random_keys``) with the pair
    counts of independent positions."""
    M, T = bucket.tokens.shape
    K = params.n_states
    u = hashed_uniform(
        draw,
        bucket.random_keys.numpy()[:, None, None],
        np.arange(T)[None, :, None],
        np.arange(K)[None, None, :],
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
    log_sums: bool = True,
) -> BucketState:
    """Coordinate ascent from each start (and from ``warm``, if given), keeping for every
    sequence the run with the highest ELBO (ties: the earlier run, ``warm`` first); the kept
    state's sums of E log theta formed anew where ``log_sums`` (else left empty).

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
            runs = [_best_per_sequence(runs, bucket, params, guide, log_sums)]
    return _best_per_sequence(runs, bucket, params, guide, log_sums)


def _best_per_sequence(
    runs: list, bucket: Bucket, params: VariantParameters, guide, log_sums: bool = True
) -> BucketState:
    """Each sequence's state from the run with the highest ELBO (first maximum on ties; a run
    that went non-finite never wins), with the bucket's sums of E log theta recomputed where
    ``log_sums`` (else empty)."""
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
    sum_elog = sequence_log_sums(params, counts, bucket) if log_sums else {}
    n_sweeps = max(r.n_sweeps for r in runs)
    return BucketState(counts, entropy, guide_state, elbo, local, sum_elog, n_sweeps, bucket.symbols)
