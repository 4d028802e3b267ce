"""The M-step: database-level parameters given the E-step's per-sequence results.

Learned priors of per-sequence groups by Newton-Raphson, two methods (both ascent steps on the
same ELBO): ``"collapsed"`` (:func:`maximize_collapsed`, every learned prior in the same passes
over the counts; the default) and ``"paper"``
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
from .kernels.dirichlet_multinomial import CountTable, count_table, table_sums

__all__ = [
    "M_STEP_METHODS",
    "PROGRESS_TOL",
    "GAIN_FRACTION",
    "DirichletMultinomialResult",
    "maximize_collapsed",
    "database_terms",
    "total_elbo",
    "count_batches",
    "state_count_table",
    "m_step",
]


#: The M-step stops once the gain it expects from its next pass is below this fraction of what
#: it has gained so far (the next EM iteration starts from there anyway).
PROGRESS_TOL = 1e-2

#: With EM's relative tolerance ``tol`` given, it also stops once that expected gain is below
#: ``GAIN_FRACTION * tol * |ELBO|``: far below what EM's stopping rule can see.
GAIN_FRACTION = 1e-2

# Re-solves of a Newton step after holding the coordinates at a bound that it pushed out of
# the box (each O(D); one is the rule, the first solve rarely pushes more than the capped one).
HOLD_ROUNDS = 4


@dataclass
class DirichletMultinomialResult:
    """Outcome of :func:`maximize_collapsed` (dicts by group) or
    ``tests/reference_dirichlet.py::newton_dirichlet_multinomial`` (arrays of its one group).

    Attributes
    ----------
    concentration : ndarray (R, D), or dict of them
    gain : ndarray (R,), or dict of them
        Increase of the objective ``sum_m log B(a + n_m) - log B(a)`` per row (>= 0).
    n_passes : int
        Passes over the counts, each over every group with rows still moving (a round over the
        partitions of a distributed fit).
    capped : bool
    """

    concentration: object
    gain: object
    n_passes: int
    capped: bool


def maximize_collapsed(
    initial: dict,
    sums,
    max_iter: int = 50,
    tol: float = 1e-8,
    objective_tol: float = 1e-12,
    progress_tol: float = PROGRESS_TOL,
    gain_tol: float = 0.0,
    min_value: float = MIN_CONCENTRATION,
    max_value: float = MAX_CONCENTRATION,
) -> DirichletMultinomialResult:
    """Maximize ``f(a) = sum_m [log B(a + n_m) - log B(a)]`` per row of every group
    (Dirichlet-multinomial / Polya likelihood of expected counts), the collapsed M-step.

    With q(Z) fixed and q(theta_m) = Dir(a + n_m) optimal for any a, the ELBO as a function of
    the prior is ``f(a)`` plus terms free of ``a``: maximizing it moves ``a`` and every
    q(theta_m) together, which the paper's M-step (``q(theta)`` held fixed) does only over many
    EM iterations when sequences are short.

    Every group's rows are separate problems, solved side by side: each pass evaluates every
    row still moving, of every group, at its candidate (one round over the partitions of a
    distributed fit), and the same pass gives the next step's derivatives. A row's candidate is
    a projected Newton step in ``t = log a`` (:func:`_newton_step`) where the Hessian
    ``diag(q) + z 1 1^T`` (``q_d = sum_m psi'(a_d + n_md) - psi'(a_d)``,
    ``z = sum_m psi'(a_0) - psi'(a_0 + n_m0)``) is negative definite on the coordinates free to
    move, else Minka's fixed-point step ``a_d <- a_d sum_m[psi(a_d + n_md) - psi(a_d)] /
    sum_m[psi(a_0 + n_m0) - psi(a_0)]``, which never decreases ``f``. A candidate is kept only
    if it does not decrease ``f``; a rejected Newton candidate is followed by the fixed-point
    one at the next pass, and a row whose fixed-point candidate is rejected stops.

    Parameters
    ----------
    initial : dict[str, array (R, D)], positive
    sums : callable
        ``sums(alphas, rows) -> {group: (entry (3, R, D), row (3, R))}`` (see
        :func:`ldhmm.inference.cavi.kernels.dirichlet_multinomial.table_sums`; only the rows
        flagged in the boolean ``rows[group]`` are needed).
    max_iter : int
        Passes after the first at most (each row: candidates evaluated).
    tol : float
        A row stops when its largest relative change falls below ``tol``, or when a step gains
        less than ``objective_tol * |f|`` (flat directions, e.g. a concentration growing
        towards the cap).
    progress_tol, gain_tol : float
        Every row stops when the gain expected from the next pass (Newton: the quadratic
        model's; fixed point: the row's last gain), summed over the rows still moving, is below
        ``progress_tol`` times the gain so far, or below ``gain_tol`` (nats).
    min_value, max_value : float
        Box for the iterates (see ``MIN_CONCENTRATION``).

    Returns
    -------
    DirichletMultinomialResult
        With dicts by group.
    """
    init = {g: np.asarray(v, dtype=np.float64) for g, v in initial.items()}
    a = {g: np.clip(v, min_value, max_value) for g, v in init.items()}
    active = {g: np.ones(v.shape[0], dtype=bool) for g, v in a.items()}
    current = sums(a, active)
    f = {g: e[0].sum(-1) - r[0] for g, (e, r) in current.items()}
    passes = 1
    f_start = {g: v.copy() for g, v in f.items()}
    clipped = {g: (a[g] != init[g]).any(-1) for g in a}
    if any(c.any() for c in clipped.values()):
        # A prior given outside the box (user parameters): the gain is measured from where it was.
        outside = sums({g: init[g] for g in a}, clipped)
        for g, (e, r) in outside.items():
            f_start[g] = np.where(clipped[g], e[0].sum(-1) - r[0], f_start[g])
        passes += 1
    fixed_next = {g: np.zeros_like(v) for g, v in active.items()}
    last_gain = {g: np.full(v.shape, np.inf) for g, v in active.items()}
    gained = 0.0
    for _ in range(max_iter):
        candidate, newton, expected = {}, {}, 0.0
        for g in a:
            candidate[g], newton[g], row_expected = _candidates(
                a[g], *current[g], active[g], fixed_next[g], last_gain[g], min_value, max_value
            )
            expected += float(row_expected[active[g]].sum())
        if expected <= gain_tol or (gained > 0.0 and expected <= progress_tol * gained):
            break
        evaluated = sums(candidate, active)
        passes += 1
        for g in a:
            entry_new, row_new = evaluated[g]
            f_new = entry_new[0].sum(-1) - row_new[0]
            improved = active[g] & (f_new >= f[g])
            entry, row = current[g]
            moving = np.zeros_like(improved)
            for r in np.flatnonzero(improved):  # row by row: D-long temporaries, no R x D copy
                moving[r] = (np.abs(candidate[g][r] - a[g][r]) / a[g][r]).max() > tol
                a[g][r] = candidate[g][r]
                entry[:, r] = entry_new[:, r]
            row[:, improved] = row_new[:, improved]
            gain = np.where(improved, f_new - f[g], 0.0)
            gained += float(gain.sum())
            last_gain[g] = np.where(improved, gain, last_gain[g])
            f[g] = np.where(improved, f_new, f[g])
            fixed_next[g] = active[g] & ~improved & newton[g]
            active[g] = (improved & moving & (gain > objective_tol * np.abs(f[g]))) | fixed_next[g]
        del candidate, evaluated
        if not any(v.any() for v in active.values()):
            break
    concentration, gains = {}, {}
    capped = False
    for g in a:
        worse = f[g] < f_start[g]  # only possible for a row that started outside the box
        concentration[g] = np.where(worse[:, None], init[g], a[g])
        gains[g] = np.where(worse, 0.0, f[g] - f_start[g])
        capped |= bool((concentration[g] >= max_value).any())
    return DirichletMultinomialResult(concentration, gains, passes, capped)


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


def _candidates(a, entry, row, active, fixed_next, last_gain, min_value, max_value):
    """Every active row's next candidate, row by row so that the temporaries are D long, not
    R x D (at V = 10^6 each R x D array is 8 R MB).

    Returns
    -------
    candidate : (R, D)
        The Newton step where it applies (:func:`_newton_step`) and the row's last Newton
        candidate was not rejected, else the fixed-point step; inactive rows keep ``a``.
    newton : bool (R,)
        Which rows took the Newton step.
    expected : (R,)
        The gain expected from the candidate: the quadratic model's for a Newton step, the
        row's last gain for a fixed-point step (inf before its first).
    """
    R = a.shape[0]
    candidate = a.copy()
    newton = np.zeros(R, dtype=bool)
    expected = np.zeros(R)
    for r in np.flatnonzero(active):
        step = None if fixed_next[r] else _newton_step(a[r], entry[:, r], row[:, r], min_value, max_value)
        if step is not None:
            candidate[r], expected[r] = step
            newton[r] = True
        else:
            candidate[r] = _fixed_point_step(a[r], entry[1, r], row[1, r], min_value, max_value)
            expected[r] = last_gain[r]
    return candidate, newton, expected


def _fixed_point_step(a_r, psi_sums, psi_row, min_value, max_value):
    """Minka's fixed-point step of one row (a row without any counts has a flat objective:
    it keeps its value)."""
    if not psi_row > 0:
        return a_r
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        fixed = a_r * psi_sums / psi_row
    return np.clip(np.nan_to_num(fixed, nan=-1.0), min_value, max_value)


def _newton_step(a_r, entry_r, row_r, min_value, max_value):
    """A projected Newton step of one row in ``t = log a``, and the gain the quadratic model
    expects from it; None where it does not apply.

    The Hessian in t is ``diag(h) + z a a^T`` with ``h = a^2 q + a g`` (``g`` the gradient in
    a): diagonal plus rank one, solved in O(D). Coordinates at a bound of the box whose step
    points out of it are held there (the step is solved on the others), and the step is
    shortened as a whole, never coordinate by coordinate, so that it keeps its direction: to
    ``MAX_LOG_STEP`` at most, and to where the first coordinate reaches a bound (set exactly
    there, to be held at the next step). Clipping coordinates one by one turned a step along
    a flat direction of the objective (the whole row growing, one entry reaching the cap first)
    into one that decreased ``f`` in most rows of a fit on click data. Multiplicative steps suit
    concentrations spanning 1e-6..1e6.

    Returns
    -------
    (candidate (D,), expected gain) or None
        None where the Hessian is not negative definite on the free coordinates or the result
        is not finite and positive.
    """
    g = entry_r[1] - row_r[1]
    q = entry_r[2]
    z = -row_r[2]
    grad_t = a_r * g
    at_max = a_r >= max_value
    at_min = a_r <= min_value
    free = ~((at_max & (grad_t > 0)) | (at_min & (grad_t < 0)))
    step = np.zeros_like(a_r)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        h = a_r * a_r * q + a_r * g
        for _ in range(HOLD_ROUNDS):
            if not free.any():
                return None
            a_f, h_f, grad_f = a_r[free], h[free], grad_t[free]
            inv_h = 1.0 / h_f
            denominator = 1.0 + z * (a_f * a_f * inv_h).sum()
            if not (bool((h_f < 0).all()) and denominator > 0.0):
                return None
            step[:] = 0.0
            step[free] = -(grad_f - z * (a_f * grad_f * inv_h).sum() / denominator * a_f) * inv_h
            held = free & ((at_max & (step > 0)) | (at_min & (step < 0)))
            if not held.any():
                break
            free &= ~held
        # (after HOLD_ROUNDS, coordinates still pushing out of the box stay where they are)
        step[(at_max & (step > 0)) | (at_min & (step < 0))] = 0.0
        del h, a_f, h_f, grad_f, inv_h
        length = 1.0
        largest = np.abs(step).max()
        if largest > MAX_LOG_STEP:
            length = MAX_LOG_STEP / largest
        up = step > 0
        down = step < 0
        t = np.log(a_r)
        to_bound = np.full_like(a_r, np.inf)
        to_bound[up] = (np.log(max_value) - t[up]) / step[up]
        to_bound[down] = (np.log(min_value) - t[down]) / step[down]
        first = int(np.argmin(to_bound))
        reaches = to_bound[first] < length
        if reaches:
            length = to_bound[first]
        candidate = np.clip(a_r * np.exp(length * step), min_value, max_value)
        if reaches:
            candidate[first] = max_value if step[first] > 0 else min_value
        slope = float((grad_t * step).sum())
    if not (np.isfinite(candidate).all() and (candidate > 0).all() and np.isfinite(slope)):
        return None
    return candidate, (length - 0.5 * length * length) * slope


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


def state_count_table(states, groups, weights: list | None = None) -> CountTable:
    """The :class:`CountTable` of ``groups`` (name -> (R, D)) over the buckets' states;
    ``weights``: per bucket, how many sequences each row stands for (None: one each)."""
    batches = {g: (shape, count_batches(states, g, shape[0])) for g, shape in groups.items()}
    return count_table(batches, weights)


def m_step(
    params: VariantParameters,
    totals,
    newton_max_iter: int = 100,
    states: list | None = None,
    method: str = "collapsed",
    count_sums=None,
    elbo_tol: float = 0.0,
) -> tuple[VariantParameters, float, bool]:
    """Update the database-level parameters given the E-step's results.

    Learned priors of per-sequence groups, two methods (both Newton-Raphson, both ascent steps
    on the same ELBO):

    - ``"paper"``: maximize ``sum_m E_q[log Dir(theta_m | a)]`` with every q(theta_m) held fixed
      (the paper's M-step; needs only ``totals.sum_expected_log``);
    - ``"collapsed"``: maximize ``sum_m log B(a + n_m) - log B(a)`` (``n_m`` the expected counts
      in ``states``), i.e. the ELBO over the prior *and* every q(theta_m) = Dir(a + n_m) jointly
      (:func:`maximize_collapsed`, every group in the same passes). When sequences are short
      the paper's M-step barely moves a concentration per EM iteration; this one does not have
      that coupling. ``newton_max_iter`` passes after the first at most (a generalized EM step:
      the next iterations go on from there).

    Shared groups: the posterior ``prior + total counts`` (a coordinate-ascent step of VB).
    Point groups: normalized total counts (+ pseudocount); a row without any mass keeps its
    previous value instead of becoming 0/0.

    Parameters
    ----------
    params : VariantParameters
    totals : EStepTotals
    newton_max_iter : int
    states : list of BucketState, optional
        Required by ``method="collapsed"`` when a prior is learned and ``count_sums`` is not given.
    method : {"collapsed", "paper"}
    count_sums : callable, optional
        ``count_sums(alphas, rows) -> {group: (entry (3, R, D), row (3, R))}`` for a dict of
        concentrations (R, D) and of boolean rows (R,) by group: the collapsed M-step's sums
        over every sequence's counts, computed where the counts are (one round over the
        partitions of a distributed fit); default: from ``states`` in this process.
    elbo_tol : float
        EM's relative tolerance: the collapsed M-step stops once the gain it expects from its
        next pass is below ``GAIN_FRACTION * elbo_tol * |ELBO|`` (0: only ``PROGRESS_TOL``).

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
    learned = sharing.groups(SEQUENCE) if sharing.learn_prior else ()
    if learned and method == "collapsed":
        shapes = {g: params.prior[g].shape for g in learned}
        initial = {g: params.prior[g].reshape(-1, shapes[g][-1]).double().numpy() for g in learned}
        if count_sums is None:
            if states is None:
                raise ValueError("the collapsed M-step needs the E-step's per-sequence states")
            table = state_count_table(states, {g: a.shape for g, a in initial.items()})
            count_sums = lambda alphas, rows: table_sums(table, alphas, rows)
        gain_tol = GAIN_FRACTION * elbo_tol * abs(total_elbo(params, totals)) if elbo_tol > 0 else 0.0
        res = maximize_collapsed(initial, count_sums, max_iter=newton_max_iter, gain_tol=gain_tol)
        for g in learned:
            a = params.prior[g]
            new.prior[g] = torch.from_numpy(res.concentration[g]).to(a.dtype).reshape(a.shape)
            elbo += float(res.gain[g].sum())
        capped = res.capped
    for g in learned if method == "paper" else ():
        # Newton in float64 whatever the model's dtype.
        a = params.prior[g]
        rows = a.reshape(-1, a.shape[-1]).double()
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
