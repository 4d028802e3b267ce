"""Closed-form variational EM for LDHMM and its variants (coordinate ascent + Newton M-step).

Data flow (ARCHITECTURE.md)::

    buckets --E-step (per bucket, independent)--> per-sequence counts, entropies, ELBOs
            --reduce--> sufficient statistics (sums over sequences)
            --M-step--> new database-level parameters

The E-step of a bucket alternates the guide's q(Z) update with the Dirichlet updates
``g = prior + expected counts`` of the per-sequence groups until every sequence's ELBO changes by
less than ``e_step_tol`` (relative); converged sequences drop out of the batch. Per-sequence counts
and the guide's state are kept between EM iterations, so the next E-step starts where the last
one ended (warm start) and every step is an ascent step: the total ELBO never decreases.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from .batch import Bucket
from .dirichlet import (
    dirichlet_prior_objective,
    expected_log_dirichlet,
    kl_dirichlet,
    newton_dirichlet,
    newton_dirichlet_multinomial,
)
from .forward_backward import emission_potentials
from .guides import _weighted_sum
from .variants import GROUPS, POINT, SEQUENCE, SHARED, ParameterSharing

__all__ = [
    "log_multivariate_beta",
    "VariantParameters",
    "BucketState",
    "EStepTotals",
    "init_parameters",
    "expected_counts",
    "e_step_bucket",
    "e_step",
    "m_step",
    "M_STEP_METHODS",
    "VariationalEM",
]

_EVENT_DIMS = {"pi": (-1,), "A": (-1, -2), "B": (-1, -2)}


@dataclass
class VariantParameters:
    """Database-level parameters of a variant.

    Attributes
    ----------
    sharing : ParameterSharing
    prior : dict[str, Tensor]
        Dirichlet concentration of every ``"sequence"`` and ``"shared"`` group:
        ``pi`` (K,), ``A`` (K, K) (row i is the prior of row i), ``B`` (K, V).
    posterior : dict[str, Tensor]
        Dirichlet posterior of every ``"shared"`` group (same shapes).
    log_point : dict[str, Tensor]
        Log-probabilities of every ``"point"`` group (same shapes; rows normalized).
    """

    sharing: ParameterSharing
    prior: dict = field(default_factory=dict)
    posterior: dict = field(default_factory=dict)
    log_point: dict = field(default_factory=dict)

    def _any(self) -> torch.Tensor:
        for d in (self.prior, self.posterior, self.log_point):
            if "B" in d:
                return d["B"]
        raise RuntimeError("parameters lack B")

    @property
    def n_states(self) -> int:
        return int(self._any().shape[0])

    @property
    def n_symbols(self) -> int:
        return int(self._any().shape[1])

    @property
    def dtype(self) -> torch.dtype:
        return self._any().dtype

    def fixed_expected_log(self, group: str) -> torch.Tensor:
        """E[log theta] of a database-level group, with a leading batch dimension of 1."""
        kind = self.sharing.kind(group)
        if kind == SHARED:
            return expected_log_dirichlet(self.posterior[group])[None]
        if kind == POINT:
            return self.log_point[group][None]
        raise ValueError(f"group {group} is per-sequence")

    def expected_logs(self, counts: dict, fixed: dict | None = None) -> dict:
        """``E log theta`` of every group: per-sequence groups from ``Dir(prior + counts)``
        (leading dimension M), database-level groups with a leading dimension of 1.

        ``fixed`` may carry the database-level values already computed (they do not change
        within an E-step).
        """
        # Digamma differences in float64 whatever the dtype: with concentrations up to 1e6,
        # float32 cannot even represent prior + counts (see docs/performance.md).
        elog = {g: expected_log_dirichlet(self.prior[g].double() + counts[g].double()).to(counts[g].dtype)
                for g in self.sharing.groups(SEQUENCE)}
        for g in GROUPS:
            if g not in elog:
                elog[g] = fixed[g] if fixed is not None else self.fixed_expected_log(g)
        return elog

    def clone(self) -> "VariantParameters":
        return VariantParameters(
            self.sharing,
            {k: v.clone() for k, v in self.prior.items()},
            {k: v.clone() for k, v in self.posterior.items()},
            {k: v.clone() for k, v in self.log_point.items()},
        )


def _group_shape(group: str, K: int, V: int) -> tuple:
    return {"pi": (K,), "A": (K, K), "B": (K, V)}[group]


def init_parameters(
    sharing: ParameterSharing,
    n_states: int,
    n_symbols: int,
    symbol_frequencies: np.ndarray | None = None,
    seed: int = 0,
    prior_concentration: float = 1.0,
    n_tokens: float = 1.0,
    dtype=torch.float64,
) -> VariantParameters:
    """Random asymmetric starting parameters (identical rows would stay identical forever).

    Parameters
    ----------
    sharing : ParameterSharing
    n_states, n_symbols : int
    symbol_frequencies : array of shape (V,), optional
        Empirical symbol frequencies; emission starting points are random perturbations of it.
    seed : int
    prior_concentration : float
        Per-entry concentration of fixed priors (``"shared"`` groups, and ``"sequence"`` groups
        when the prior is not learned).
    n_tokens : float
        Size of the database, used to give shared posteriors a data-sized starting point.
    dtype : torch.dtype

    Returns
    -------
    VariantParameters
    """
    K, V = n_states, n_symbols
    gen = torch.Generator().manual_seed(int(seed))
    if symbol_frequencies is None:
        freq = torch.full((V,), 1.0 / V, dtype=dtype)
    else:
        freq = torch.as_tensor(symbol_frequencies, dtype=dtype)
        freq = (freq + 1e-3) / (freq + 1e-3).sum()

    def random_rows(group):
        shape = _group_shape(group, K, V)
        noise = 0.5 + torch.rand(shape, generator=gen, dtype=dtype)
        base = freq.expand(shape) if group == "B" else torch.ones(shape, dtype=dtype)
        rows = base * noise
        return rows / rows.sum(-1, keepdim=True)

    params = VariantParameters(sharing)
    for group in GROUPS:
        kind = sharing.kind(group)
        rows = random_rows(group)
        D = rows.shape[-1]
        if kind == SEQUENCE:
            if sharing.learn_prior:
                # Mean entry ~1: neither sparse nor so concentrated that sequences cannot differ.
                params.prior[group] = rows * D
            else:
                params.prior[group] = torch.full_like(rows, prior_concentration)
        elif kind == SHARED:
            params.prior[group] = torch.full_like(rows, prior_concentration)
            scale = n_tokens / (K if group != "pi" else max(n_tokens, 1.0))
            params.posterior[group] = params.prior[group] + rows * max(scale, 1.0)
        else:
            params.log_point[group] = torch.log(rows)
    return params


def expected_counts(state_marginals, transition_counts, tokens, n_symbols):
    """Per-sequence expected counts of every group.

    Parameters
    ----------
    state_marginals : Tensor, shape (M, T, K)
    transition_counts : Tensor, shape (M, K, K)
    tokens : LongTensor, shape (M, T)
    n_symbols : int

    Returns
    -------
    dict with ``pi`` (M, K), ``A`` (M, K, K), ``B`` (M, K, V)
    """
    M, T, K = state_marginals.shape
    emission = state_marginals.new_zeros(M, n_symbols, K)
    emission.scatter_add_(1, tokens[:, :, None].expand(M, T, K), state_marginals)
    # Copies, not views: a view of the (M, T, K) marginals would keep them alive between EM iterations.
    return {"pi": state_marginals[:, 0].clone(), "A": transition_counts,
            "B": emission.transpose(1, 2).contiguous()}


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
    """

    counts: dict
    entropy: torch.Tensor
    guide_state: object
    elbo: torch.Tensor
    local_elbo: torch.Tensor
    sum_expected_log: dict
    n_sweeps: int


def log_multivariate_beta(concentration: torch.Tensor) -> torch.Tensor:
    """``log B(g) = sum_d lgamma(g_d) - lgamma(sum_d g_d)`` over the last dimension."""
    return torch.lgamma(concentration).sum(-1) - torch.lgamma(concentration.sum(-1))


def _collapsed_terms(counts, params, seq_groups, prior_log_beta):
    """``E_q[log p(counts | theta)] - KL(q(theta) || p(theta))`` at the optimal q(theta).

    With ``g = prior + counts`` the expected-log terms cancel against the KL's
    ``(g - prior) . E log theta``, leaving ``log B(g) - log B(prior)`` per Dirichlet row: the
    ELBO needs no digamma, only the next q(Z) update does.
    """
    terms = 0.0
    for g in seq_groups:
        # float64: log B of concentrations near 1e6 are ~1e7 and their differences matter.
        value = (log_multivariate_beta(params.prior[g].double() + counts[g].double())
                 - prior_log_beta[g].double())
        terms = terms + (value if g == "pi" else value.sum(-1))
    return terms.to(counts["B"].dtype) if isinstance(terms, torch.Tensor) else terms


def _e_step_steps(bucket, params, guide, counts, guide_state, max_iter, tol, history,
                  seq_groups, fixed_groups, fixed_elog, prior_log_beta):
    """The E-step sweep by sweep in torch, shrinking the batch to unconverged sequences."""
    tokens, mask = bucket.tokens, bucket.mask
    Mb = bucket.n_sequences
    V = params.n_symbols
    dtype = counts["B"].dtype

    elog = params.expected_logs(counts, fixed_elog)
    if guide_state is None:
        guide_state = guide.init_state(
            elog["pi"], elog["A"], emission_potentials(elog["B"], tokens), mask
        )

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
        update, sub_state = guide.update_hidden(sub_state, elog["pi"], elog["A"], log_obs, sub_mask)
        new_counts = expected_counts(update.state_marginals, update.transition_counts, sub_tokens, V)
        new_elbo = update.entropy + _collapsed_terms(new_counts, params, seq_groups, prior_log_beta)
        for g in fixed_groups:
            new_elbo = new_elbo + _weighted_sum(new_counts[g], fixed_elog[g], _EVENT_DIMS[g])
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

    return entropy, elbo, guide_state, counts, n_sweeps


def e_step_bucket(
    bucket: Bucket,
    params: VariantParameters,
    guide,
    state: BucketState | None = None,
    max_iter: int = 100,
    tol: float = 1e-6,
    history: list | None = None,
    consume_state: bool = False,
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
    guide : guide object (see :mod:`inference.guides`)
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

    Returns
    -------
    BucketState
    """
    sharing = params.sharing
    seq_groups = sharing.groups(SEQUENCE)
    fixed_groups = [g for g in GROUPS if g not in seq_groups]
    tokens, mask = bucket.tokens, bucket.mask
    Mb = bucket.n_sequences
    K, V = params.n_states, params.n_symbols
    dtype = params.dtype
    fixed_elog = {g: params.fixed_expected_log(g) for g in fixed_groups}
    prior_log_beta = {g: log_multivariate_beta(params.prior[g].double()) for g in seq_groups}

    if state is None:
        counts = {g: torch.zeros((Mb,) + _group_shape(g, K, V), dtype=dtype) for g in GROUPS}
        guide_state = None
    else:
        counts = {g: (c if consume_state else c.clone()) for g, c in state.counts.items()}
        guide_state = state.guide_state
        if isinstance(guide_state, torch.Tensor) and not consume_state:
            guide_state = guide_state.clone()  # compiled paths update it in place

    fused = getattr(guide, "fused_e_step", None)
    result = None
    if fused is not None:
        result = fused(bucket, params, counts, max_iter, tol, record_trace=history is not None,
                       state=guide_state)
    if result is not None:
        entropy, elbo, local = result["entropy"], result["elbo"], result["local"]
        guide_state = result.get("phi", guide_state)
        failed = result["failed"]
        n_sweeps = int(result["sweeps"].max())
        sum_elog = result["sum_expected_log"]
        if history is not None:
            filled = result["trace"].numpy().copy()
            for i in range(1, filled.shape[1]):
                filled[:, i] = np.where(np.isnan(filled[:, i]), filled[:, i - 1], filled[:, i])
            history.extend(float(v) for v in filled[:, :n_sweeps].sum(0))
        if bool(failed.any()):
            # The scaled recursion underflowed: redo these sequences step by step (log-space
            # fallback inside) from the counts they had reached, then add their statistics.
            idx = failed.nonzero()[:, 0]
            sub = Bucket(bucket.index[idx], tokens[idx], bucket.lengths[idx], mask[idx])
            sub_state = BucketState({g: c[idx] for g, c in counts.items()}, entropy[idx],
                                    guide.select_state(guide_state, idx), elbo[idx], local[idx], {}, 0)
            step_by_step = copy.copy(guide)
            step_by_step.compiled = False
            redo = e_step_bucket(sub, params, step_by_step, sub_state, max_iter, tol)
            for g in GROUPS:
                counts[g][idx] = redo.counts[g]
            guide_state = guide.scatter_state(guide_state, idx, redo.guide_state)
            entropy[idx], elbo[idx], local[idx] = redo.entropy, redo.elbo, redo.local_elbo
            sum_elog = {g: sum_elog[g] + redo.sum_expected_log[g] for g in seq_groups}
            n_sweeps = max(n_sweeps, redo.n_sweeps)
        return BucketState(counts, entropy, guide_state, elbo, local, sum_elog, n_sweeps)

    entropy, elbo, guide_state, counts, n_sweeps = _e_step_steps(
        bucket, params, guide, counts, guide_state, max_iter, tol, history,
        seq_groups, fixed_groups, fixed_elog, prior_log_beta,
    )
    local = _collapsed_terms(counts, params, seq_groups, prior_log_beta)
    final_elog = {g: expected_log_dirichlet(params.prior[g].double() + counts[g].double())
                  for g in seq_groups}
    return BucketState(
        counts=counts,
        entropy=entropy,
        guide_state=guide_state,
        elbo=elbo,
        local_elbo=entropy + local,
        sum_expected_log={g: final_elog[g].sum(0) for g in seq_groups},
        n_sweeps=n_sweeps,
    )


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


def e_step(
    buckets: list[Bucket],
    params: VariantParameters,
    guide,
    states: list[BucketState | None] | None = None,
    max_iter: int = 100,
    tol: float = 1e-6,
    progress: Callable | None = None,
) -> tuple[list[BucketState], EStepTotals]:
    """Run :func:`e_step_bucket` on every bucket and reduce the sufficient statistics.

    ``states`` (the previous iteration's, for warm starts) is consumed: its entries are updated
    in place and then dropped from the list, so only one copy of the per-sequence state lives.
    """
    states = states if states is not None else [None] * len(buckets)
    new_states = []
    seq_groups = params.sharing.groups(SEQUENCE)
    sum_elog = {g: 0.0 for g in seq_groups}
    totals = {g: 0.0 for g in GROUPS}
    local = 0.0
    n = 0
    sweeps = 0
    for i, bucket in enumerate(buckets):
        st = e_step_bucket(bucket, params, guide, states[i], max_iter=max_iter, tol=tol,
                           consume_state=True)
        states[i] = None
        new_states.append(st)
        for g in seq_groups:
            sum_elog[g] = sum_elog[g] + st.sum_expected_log[g]
        for g in GROUPS:
            totals[g] = totals[g] + st.counts[g].sum(0)
        local += float(st.local_elbo.sum())
        n += bucket.n_sequences
        sweeps = max(sweeps, st.n_sweeps)
        if progress is not None:
            progress(bucket.n_sequences)
    return new_states, EStepTotals(n, local, sum_elog, totals, sweeps)


def _database_terms(params: VariantParameters, totals: EStepTotals) -> float:
    """ELBO terms of the database-level groups given the summed counts."""
    value = 0.0
    for g in params.sharing.groups(SHARED):
        elog = expected_log_dirichlet(params.posterior[g])
        kl = kl_dirichlet(params.posterior[g], params.prior[g]).sum()
        value += float(_weighted_sum(totals.total_counts[g], elog, _EVENT_DIMS[g]) - kl)
    for g in params.sharing.groups(POINT):
        # With a pseudocount the point estimate is MAP: the objective that the M-step increases
        # (and the one recorded) includes the log-density of its Dirichlet(1 + pseudocount) prior,
        # up to a constant.
        counts = totals.total_counts[g] + params.sharing.pseudocount
        value += float(_weighted_sum(counts, params.log_point[g], _EVENT_DIMS[g]))
    return value


def total_elbo(params: VariantParameters, totals: EStepTotals) -> float:
    """Total ELBO of the database right after an E-step with these parameters."""
    return totals.local_elbo + _database_terms(params, totals)


M_STEP_METHODS = ("collapsed", "paper")


def _count_batches(states, group: str, rows: int) -> list:
    """Every bucket's expected counts of ``group`` as float64 arrays (M_b, rows, D)."""
    batches = []
    for st in states:
        c = st.counts[group]
        batches.append(c.reshape(c.shape[0], rows, -1).to(torch.float64).numpy())
    return batches


def m_step(
    params: VariantParameters,
    totals: EStepTotals,
    newton_max_iter: int = 100,
    states: list | None = None,
    method: str = "collapsed",
) -> tuple[VariantParameters, float, bool]:
    """Update the database-level parameters given the E-step's results.

    Learned priors of per-sequence groups, two methods (both Newton-Raphson, both ascent steps
    on the same ELBO):

    - ``"paper"``: maximize ``sum_m E_q[log Dir(theta_m | a)]`` with every q(theta_m) held fixed
      (the paper's M-step; needs only ``totals.sum_expected_log``);
    - ``"collapsed"``: maximize ``sum_m log B(a + n_m) - log B(a)`` (``n_m`` the expected counts
      in ``states``), i.e. the ELBO over the prior *and* every q(theta_m) = Dir(a + n_m) jointly
      (:func:`inference.dirichlet.newton_dirichlet_multinomial`). When sequences are short the
      paper's M-step barely moves a concentration per EM iteration; this one does not have that
      coupling. ``newton_max_iter`` Newton steps at most (a generalized EM step: the next
      iterations go on from there).

    Shared groups: the posterior ``prior + total counts`` (a coordinate-ascent step of VB).
    Point groups: normalized total counts (+ pseudocount); a row without any mass keeps its
    previous value instead of becoming 0/0.

    Parameters
    ----------
    params : VariantParameters
    totals : EStepTotals
    newton_max_iter : int
    states : list of BucketState, optional
        Required by ``method="collapsed"`` when a prior is learned.
    method : {"collapsed", "paper"}

    Returns
    -------
    new_params : VariantParameters
    total_elbo : float
        The total ELBO at the new parameters with q(Z) unchanged (and, for ``"collapsed"``,
        q(theta_m) = Dir(new prior + counts)).
    capped : bool
        Whether a learned concentration hit its upper bound.
    """
    if method not in M_STEP_METHODS:
        raise ValueError(f"m_step method must be one of {M_STEP_METHODS}, got {method!r}")
    sharing = params.sharing
    new = params.clone()
    elbo = totals.local_elbo
    capped = False
    if sharing.learn_prior:
        for g in sharing.groups(SEQUENCE):
            a = params.prior[g]
            rows = a.reshape(-1, a.shape[-1])
            if method == "collapsed":
                if states is None:
                    raise ValueError("the collapsed M-step needs the E-step's per-sequence states")
                res = newton_dirichlet_multinomial(
                    rows.to(torch.float64).numpy(), _count_batches(states, g, rows.shape[0]),
                    max_iter=newton_max_iter)
                new.prior[g] = torch.from_numpy(res.concentration).to(a.dtype).reshape(a.shape)
                elbo += float(res.gain.sum())
            else:
                # Newton in float64 whatever the model's dtype.
                rows = rows.double()
                t = totals.sum_expected_log[g].reshape(rows.shape).double()
                before = dirichlet_prior_objective(rows, t, totals.n_sequences).sum()
                res = newton_dirichlet(rows, t, totals.n_sequences, max_iter=newton_max_iter)
                new.prior[g] = res.concentration.reshape(a.shape).to(a.dtype)
                elbo += float(res.objective.sum() - before)
            capped |= res.capped
    for g in sharing.groups(SHARED):
        new.posterior[g] = params.prior[g] + totals.total_counts[g]
    for g in sharing.groups(POINT):
        c = totals.total_counts[g] + sharing.pseudocount
        row_sum = c.sum(-1, keepdim=True)
        probs = c / row_sum.clamp_min(torch.finfo(c.dtype).tiny)
        new.log_point[g] = torch.where(row_sum > 0, torch.log(probs), params.log_point[g])
    elbo += _database_terms(new, totals)
    return new, elbo, capped


@dataclass
class FitResult:
    """What :meth:`VariationalEM.fit` returns."""

    params: VariantParameters
    states: list
    elbo_history: list
    e_step_elbo_history: list
    trace: list
    n_iter: int
    converged: bool
    capped: bool


class VariationalEM:
    """Variational EM driver: configuration and the outer loop, no math.

    Parameters
    ----------
    guide : guide object
    max_iter : int
        EM iterations at most.
    tol : float
        Stop when the total ELBO's relative change falls below ``tol``.
    e_step_max_iter, e_step_tol : int, float
        Per-sequence coordinate-ascent limits inside each E-step.
    progress : bool
        Show a progress bar over EM iterations (tqdm).
    m_step : {"collapsed", "paper"}
        How learned priors are updated (see :func:`m_step`).
    m_step_max_iter : int, optional
        Newton steps per M-step (default: 3 for ``"collapsed"``, whose passes over every
        sequence's counts cost about a third of an E-step sweep each; 100 for ``"paper"``).
    """

    def __init__(self, guide, max_iter=100, tol=1e-4, e_step_max_iter=100, e_step_tol=1e-6,
                 progress=False, m_step="collapsed", m_step_max_iter=None):
        if m_step not in M_STEP_METHODS:
            raise ValueError(f"m_step must be one of {M_STEP_METHODS}, got {m_step!r}")
        self.m_step = m_step
        self.m_step_max_iter = (m_step_max_iter if m_step_max_iter is not None
                                else (3 if m_step == "collapsed" else 100))
        self.guide = guide
        self.max_iter = max_iter
        self.tol = tol
        self.e_step_max_iter = e_step_max_iter
        self.e_step_tol = e_step_tol
        self.progress = progress

    def fit(self, buckets, params: VariantParameters, callback=None) -> FitResult:
        """Alternate E- and M-steps from ``params`` until convergence.

        ``trace`` records ``("E", elbo)`` after every E-step and ``("M", elbo)`` after every
        M-step, so the monotonicity of coordinate ascent can be checked step by step.
        """
        states = None
        history, e_history, trace = [], [], []
        converged = capped = False
        bar = None
        if self.progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=self.max_iter, desc="variational EM", unit="iter", leave=False)
        n_iter = 0
        try:
            for n_iter in range(1, self.max_iter + 1):
                states, totals = e_step(
                    buckets, params, self.guide, states,
                    max_iter=self.e_step_max_iter, tol=self.e_step_tol,
                )
                e_elbo = total_elbo(params, totals)
                params, m_elbo, was_capped = m_step(
                    params, totals, newton_max_iter=self.m_step_max_iter, states=states,
                    method=self.m_step)
                capped |= was_capped
                trace += [("E", e_elbo), ("M", m_elbo)]
                e_history.append(e_elbo)
                history.append(m_elbo)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(elbo=f"{m_elbo:.6g}", sweeps=totals.max_sweeps)
                if callback is not None:
                    callback(n_iter, m_elbo)
                if not math.isfinite(m_elbo):
                    raise FloatingPointError(f"the total ELBO became {m_elbo} at iteration {n_iter}")
                if len(history) > 1 and abs(history[-1] - history[-2]) <= self.tol * abs(history[-1]):
                    converged = True
                    break
        finally:
            if bar is not None:
                bar.close()
        return FitResult(params, states, history, e_history, trace, n_iter, converged, capped)

    def score(self, buckets, params: VariantParameters) -> list[BucketState]:
        """E-step with fixed parameters: the per-sequence held-out ELBO of new sequences."""
        states, _ = e_step(buckets, params, self.guide, None,
                           max_iter=self.e_step_max_iter, tol=self.e_step_tol)
        return states
