"""The M-step: database-level parameters given the E-step's per-sequence results.

Learned priors of per-sequence groups by Newton-Raphson, two methods (both ascent steps on the
same ELBO): ``"collapsed"`` (:func:`newton_dirichlet_multinomial`, the default) and ``"paper"``
(:func:`ldhmm.inference.ops.dirichlet.newton_dirichlet`); shared groups take their VB posterior,
point groups their normalized counts. docs/math.md derives both M-steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..ops.dirichlet import (
    MAX_CONCENTRATION,
    MAX_LOG_STEP,
    MIN_CONCENTRATION,
    dirichlet_prior_objective,
    expected_log_dirichlet,
    kl_dirichlet,
    newton_dirichlet,
)
from ..ops.potentials import weighted_sum
from ..parameters import EVENT_DIMS, VariantParameters
from ..sharing import POINT, SEQUENCE, SHARED
from .kernels.dirichlet_multinomial import dirichlet_multinomial_sums

__all__ = [
    "M_STEP_METHODS",
    "DirichletMultinomialResult",
    "newton_dirichlet_multinomial",
    "database_terms",
    "total_elbo",
    "count_batches",
    "m_step",
]


@dataclass
class DirichletMultinomialResult:
    """Outcome of :func:`newton_dirichlet_multinomial`.

    Attributes
    ----------
    concentration : ndarray (R, D)
    gain : ndarray (R,)
        Increase of the objective ``sum_m log B(a + n_m) - log B(a)`` per row (>= 0).
    n_passes : int
        Passes over the counts (each costs one lgamma/digamma/trigamma per non-zero count of
        the rows still moving).
    capped : bool
    """

    concentration: object
    gain: object
    n_passes: int
    capped: bool


def newton_dirichlet_multinomial(
    initial,
    count_batches,
    max_iter: int = 50,
    tol: float = 1e-8,
    objective_tol: float = 1e-12,
    min_value: float = MIN_CONCENTRATION,
    max_value: float = MAX_CONCENTRATION,
    sums=None,
) -> DirichletMultinomialResult:
    """Maximize ``f(a) = sum_m [log B(a + n_m) - log B(a)]`` per row (Dirichlet-multinomial /
    Polya likelihood of expected counts), the collapsed M-step.

    With q(Z) fixed and q(theta_m) = Dir(a + n_m) optimal for any a, the ELBO as a function of
    the prior is ``f(a)`` plus terms free of ``a``: maximizing it moves ``a`` and every
    q(theta_m) together, which the paper's M-step (``q(theta)`` held fixed) does only over many
    EM iterations when sequences are short.

    The Hessian is ``diag(q) + z 1 1^T`` with ``q_d = sum_m psi'(a_d + n_md) - psi'(a_d)`` and
    ``z = sum_m psi'(a_0) - psi'(a_0 + n_m0)``; ``f`` is not concave everywhere, so a row takes the
    Newton step only where that Hessian is negative definite and the step increases ``f``, and
    otherwise Minka's fixed-point step ``a_d <- a_d sum_m[psi(a_d + n_md) - psi(a_d)] /
    sum_m[psi(a_0 + n_m0) - psi(a_0)]``, which never decreases ``f``. A row whose candidates
    both fail to increase ``f`` stops where it is.

    Parameters
    ----------
    initial : array (R, D), positive
    count_batches : list of arrays (M_b, R, D)
        Expected counts of every sequence (rows with no counts contribute nothing).
    max_iter : int
    tol : float
        A row stops when its largest relative change falls below ``tol``, or when a step gains
        less than ``objective_tol * |f|`` (flat directions, e.g. a concentration growing
        towards the cap).
    min_value, max_value : float
        Box for the iterates (see ``MIN_CONCENTRATION``).
    sums : callable, optional
        ``sums(a, count_batches, rows) -> (entry (3, R, D), row (3, R))`` (only the rows
        flagged in the boolean ``rows`` are needed); default: the compiled
        kernel (its twin :func:`ldhmm.inference.ops.dirichlet.dirichlet_multinomial_sums_reference`
        gives the same).

    Returns
    -------
    DirichletMultinomialResult
    """
    if sums is None:
        sums = dirichlet_multinomial_sums
    initial = np.asarray(initial, dtype=np.float64)
    a = np.clip(initial, min_value, max_value)
    R = a.shape[0]

    def evaluate(x, rows):
        entry, row = sums(x, count_batches, rows)
        f = entry[0].sum(-1) - row[0]
        return f, entry, row

    active = np.ones(R, dtype=bool)
    f, entry, row = evaluate(a, active)
    passes = 1
    f_start = f.copy()
    clipped = (a != initial).any(-1)
    if clipped.any():
        # A prior given outside the box (user parameters): the gain is measured from where it was.
        f_start = np.where(clipped, evaluate(initial, clipped)[0], f_start)
        passes += 1
    for _ in range(max_iter):
        candidate, fixed_point, use_newton = _newton_candidates(a, entry, row, active, min_value, max_value)
        # Only the active rows are recomputed; the others keep their values below.
        f_new, entry_new, row_new = evaluate(candidate, active)
        passes += 1
        retry = active & use_newton & ~(f_new >= f)
        # The rows this evaluation settles take its sums now, so that no more than two (3, R, D)
        # sums are alive when the retry is evaluated.
        _copy_rows(entry, entry_new, active & ~retry & (f_new >= f))
        del entry_new
        if retry.any():
            for r in np.flatnonzero(retry):  # in place: no R x D temporary
                candidate[r] = fixed_point[r]
            f_retry, entry_retry, row_retry = evaluate(candidate, retry)
            passes += 1
            _copy_rows(entry, entry_retry, retry & (f_retry >= f))
            del entry_retry
            f_new = np.where(retry, f_retry, f_new)
            row_new = np.where(retry[None, :], row_retry, row_new)
        improved = active & (f_new >= f)
        f_before = f
        rel_change = np.zeros(R)
        for r in np.flatnonzero(improved):  # row by row: D-long temporaries
            rel_change[r] = (np.abs(candidate[r] - a[r]) / a[r]).max()
            a[r] = candidate[r]
        del candidate, fixed_point
        f = np.where(improved, f_new, f)
        row = np.where(improved[None, :], row_new, row)
        active = improved & (rel_change > tol) & (f - f_before > objective_tol * np.abs(f))
        if not active.any():
            break
    worse = f < f_start  # only possible for a row that started outside the box
    a = np.where(worse[:, None], initial, a)
    gain = np.where(worse, 0.0, f - f_start)
    return DirichletMultinomialResult(a, gain, passes, bool((a >= max_value).any()))


def database_terms(params: VariantParameters, totals) -> float:
    """ELBO terms of the database-level groups given the summed counts."""
    value = 0.0
    for g in params.sharing.groups(SHARED):
        elog = expected_log_dirichlet(params.posterior[g])
        kl = kl_dirichlet(params.posterior[g], params.prior[g]).sum()
        value += float(weighted_sum(totals.total_counts[g], elog, EVENT_DIMS[g]) - kl)
    for g in params.sharing.groups(POINT):
        # With a pseudocount the point estimate is MAP: the objective that the M-step increases
        # (and the one recorded) includes the log-density of its Dirichlet(1 + pseudocount) prior,
        # up to a constant.
        counts = totals.total_counts[g] + params.sharing.pseudocount
        value += float(weighted_sum(counts, params.log_point[g], EVENT_DIMS[g]))
    return value


def total_elbo(params: VariantParameters, totals) -> float:
    """Total ELBO of the database right after an E-step with these parameters."""
    return totals.local_elbo + database_terms(params, totals)


M_STEP_METHODS = ("collapsed", "paper")


def _newton_candidates(a, entry, row, active, min_value, max_value):
    """One Newton step in ``t = log a`` for every row (and Minka's fixed-point step as its
    fallback), row by row so that the temporaries are D long, not R x D (at V = 10^6 each
    R x D array is 8 R MB).

    The Hessian in t is ``diag(h) + z a a^T`` with ``h = a^2 q + a g``, and steps are
    multiplicative, which suits concentrations spanning 1e-6..1e6.

    Returns
    -------
    candidate : (R, D)
        The Newton step where it applies (Hessian negative definite, finite positive result),
        else the fixed-point step; inactive rows keep ``a``.
    fixed_point : (R, D)
    use_newton : bool (R,)
    """
    R = a.shape[0]
    candidate = np.empty_like(a)
    fixed_point = np.empty_like(a)
    use_newton = np.zeros(R, dtype=bool)
    for r in range(R):
        a_r = a[r]
        g = entry[1, r] - row[1, r]
        q = entry[2, r]
        z = -row[2, r]
        h = a_r * a_r * q + a_r * g
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            inv_h = 1.0 / h
            grad_t = a_r * g
            curvature = (a_r * a_r * inv_h).sum()
            coef = z * (a_r * grad_t * inv_h).sum() / (1.0 + z * curvature)
            step_t = -(grad_t - coef * a_r) * inv_h
            newton = a_r * np.exp(np.clip(step_t, -MAX_LOG_STEP, MAX_LOG_STEP))
            fixed = a_r * entry[1, r] / row[1, r]
            negative_definite = bool((h < 0).all()) and bool(1.0 + z * curvature > 0.0)
        del g, h, inv_h, grad_t, step_t
        # A row without any counts has a flat objective: it keeps its value.
        fixed = fixed if row[1, r] > 0 else a_r
        fixed_point[r] = np.clip(np.nan_to_num(fixed, nan=-1.0), min_value, max_value)
        use_newton[r] = negative_definite and bool((newton > 0).all()) and bool(np.isfinite(newton).all())
        if not active[r]:
            candidate[r] = a_r
        elif use_newton[r]:
            candidate[r] = np.clip(newton, min_value, max_value)
        else:
            candidate[r] = fixed_point[r]
    return candidate, fixed_point, use_newton


def _copy_rows(target: np.ndarray, source: np.ndarray, rows: np.ndarray) -> None:
    """``target[:, rows] = source[:, rows]`` row by row (views, no temporary copy: at V = 10^6
    a fancy-indexed (3, R, V) block is 24 R MB)."""
    for r in np.flatnonzero(rows):
        target[:, r] = source[:, r]


def count_batches(states, group: str, rows: int) -> list:
    """Every bucket's expected counts of ``group`` as float64 arrays (M_b, rows, D); in the
    sparse emission layout B's as pairs (counts (M_b, K, W), symbols (M_b, W))."""
    batches = []
    for st in states:
        c = st.counts[group]
        values = c.reshape(c.shape[0], rows, -1).to(torch.float64).numpy()
        if group == "B" and getattr(st, "symbols", None) is not None:
            batches.append((values, st.symbols.numpy()))
        else:
            batches.append(values)
    return batches


def _group_sums(count_sums, group: str):
    """``count_sums`` of one group in the signature :func:`newton_dirichlet_multinomial` takes."""
    return lambda alpha, _batches, rows: count_sums(group, alpha, rows)


def m_step(
    params: VariantParameters,
    totals,
    newton_max_iter: int = 100,
    states: list | None = None,
    method: str = "collapsed",
    count_sums=None,
) -> tuple[VariantParameters, float, bool]:
    """Update the database-level parameters given the E-step's results.

    Learned priors of per-sequence groups, two methods (both Newton-Raphson, both ascent steps
    on the same ELBO):

    - ``"paper"``: maximize ``sum_m E_q[log Dir(theta_m | a)]`` with every q(theta_m) held fixed
      (the paper's M-step; needs only ``totals.sum_expected_log``);
    - ``"collapsed"``: maximize ``sum_m log B(a + n_m) - log B(a)`` (``n_m`` the expected counts
      in ``states``), i.e. the ELBO over the prior *and* every q(theta_m) = Dir(a + n_m) jointly
      (:func:`newton_dirichlet_multinomial`). When sequences are short the
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
    count_sums : callable, optional
        ``count_sums(group, alpha (R, D), rows) -> (entry (3, R, D), row (3, R))``: the
        collapsed M-step's sums over every sequence's counts of ``group``, computed where the
        counts are (a round over the partitions of a distributed fit); default: from
        ``states`` in this process.

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
                if count_sums is not None:
                    sums = _group_sums(count_sums, g)
                    batches = None
                elif states is None:
                    raise ValueError("the collapsed M-step needs the E-step's per-sequence states")
                else:
                    sums, batches = None, count_batches(states, g, rows.shape[0])
                res = newton_dirichlet_multinomial(
                    rows.to(torch.float64).numpy(), batches, max_iter=newton_max_iter, sums=sums
                )
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
    elbo += database_terms(new, totals)
    return new, elbo, capped
