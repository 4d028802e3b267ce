"""The collapsed M-step: Dirichlet-multinomial sums, their Newton maximizer, and the EM step."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import optimize, special

from ldhmm.inference import (
    LDHMM_SHARING,
    FFGuide,
    PFGuide,
    VariationalEM,
    e_step,
    init_parameters,
    log_multivariate_beta,
    m_step,
    make_buckets,
    total_elbo,
)
from ldhmm.inference.cavi import maximization
from ldhmm.inference.cavi.kernels import dirichlet_multinomial as dm_kernel
from ldhmm.inference.cavi.kernels.dirichlet_multinomial import count_table, table_sums
from ldhmm.inference.cavi.kernels.special import gamma_functions_scalar
from ldhmm.inference.cavi.maximization import maximize_collapsed, state_count_table

_SPEC = importlib.util.spec_from_file_location(
    "reference_dirichlet", Path(__file__).with_name("reference_dirichlet.py")
)
reference_dirichlet = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(reference_dirichlet)
dirichlet_multinomial_objective = reference_dirichlet.dirichlet_multinomial_objective
dirichlet_multinomial_sums = reference_dirichlet.dirichlet_multinomial_sums
dirichlet_multinomial_sums_reference = reference_dirichlet.dirichlet_multinomial_sums_reference
newton_dirichlet_multinomial = reference_dirichlet.newton_dirichlet_multinomial


def test_gamma_functions_match_scipy_over_the_concentration_range():
    x = np.concatenate([np.logspace(-7, 7, 500), np.random.default_rng(0).uniform(0, 30, 500)])
    lg, psi, tri = np.array([gamma_functions_scalar(v) for v in x]).T  # the compiled scalar, one call each
    np.testing.assert_allclose(lg, special.gammaln(x), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(psi, special.digamma(x), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(tri, special.polygamma(1, x), rtol=1e-13)


def _random_count_batches(rng, R, D, sizes):
    batches = []
    for m in sizes:
        c = rng.gamma(0.7, 2.0, (m, R, D)) * (rng.random((m, R, D)) < 0.6)
        c[0] = 0.0  # a sequence without counts in any row
        batches.append(c)
    return batches


def test_compiled_sums_equal_the_dense_reference():
    rng = np.random.default_rng(1)
    alpha = rng.uniform(1e-3, 5.0, (4, 6))
    alpha[0, 0] = 1e5
    batches = _random_count_batches(rng, 4, 6, [1, 7, 40])
    entry, row = dirichlet_multinomial_sums(alpha, batches)
    entry_ref, row_ref = dirichlet_multinomial_sums_reference(alpha, batches)
    np.testing.assert_allclose(entry, entry_ref, rtol=1e-11, atol=1e-9)
    np.testing.assert_allclose(row, row_ref, rtol=1e-11, atol=1e-9)
    # entry[0] - row[0] summed is the objective itself
    f = dirichlet_multinomial_objective(torch.from_numpy(alpha), torch.from_numpy(np.concatenate(batches)))
    np.testing.assert_allclose(entry[0].sum(-1) - row[0], f.numpy(), rtol=1e-11)


@pytest.mark.parametrize("sums", ["compiled", "reference"])
def test_newton_reaches_the_optimum_found_by_lbfgs(sums):
    rng = np.random.default_rng(2)
    R, D = 3, 5
    # over-dispersed counts: each sequence draws its own distribution, so the optimum is finite
    theta = rng.dirichlet(np.full(D, 2.0), size=(60, R))
    counts = np.stack([[rng.multinomial(rng.integers(3, 30), t) for t in row] for row in theta])
    counts = counts.astype(np.float64) * rng.uniform(0.8, 1.0, counts.shape)  # not integers
    batches = [counts[:25], counts[25:]]
    start = np.ones((R, D))
    res = newton_dirichlet_multinomial(
        start, batches, sums=None if sums == "compiled" else dirichlet_multinomial_sums_reference
    )
    C = torch.from_numpy(counts)
    before = dirichlet_multinomial_objective(torch.from_numpy(start), C).numpy()
    after = dirichlet_multinomial_objective(torch.from_numpy(res.concentration), C).numpy()
    np.testing.assert_allclose(res.gain, after - before, rtol=1e-9, atol=1e-9)
    for r in range(R):

        def negative(log_a, r=r):
            return -float(
                dirichlet_multinomial_objective(torch.from_numpy(np.exp(log_a))[None], C[:, r : r + 1])
            )

        best = optimize.minimize(
            negative,
            np.zeros(D),
            method="L-BFGS-B",
            options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 10_000},
        )
        assert after[r] >= -best.fun - 1e-7
        np.testing.assert_allclose(res.concentration[r], np.exp(best.x), rtol=1e-4)


def test_a_row_without_counts_keeps_its_concentration():
    counts = np.zeros((10, 2, 3))
    counts[:, 0] = np.random.default_rng(3).gamma(1.0, 2.0, (10, 3))
    start = np.array([[1.0, 2.0, 3.0], [0.5, 0.25, 4.0]])
    res = newton_dirichlet_multinomial(start, [counts])
    np.testing.assert_array_equal(res.concentration[1], start[1])
    assert res.gain[1] == 0.0


def test_newton_keeps_concentrations_finite_when_sequences_agree():
    # identical proportions in every sequence: the likelihood grows without bound in the scale
    counts = np.tile(np.array([[[2.0, 1.0, 1.0]]]), (50, 1, 1))
    res = newton_dirichlet_multinomial(np.ones((1, 3)), [counts], max_iter=200)
    assert np.all(np.isfinite(res.concentration)) and np.all(res.concentration > 0)
    assert res.gain[0] > 0


@pytest.mark.parametrize("guide", [PFGuide(), FFGuide()], ids=["pf", "ff"])
def test_collapsed_m_step_reports_the_elbo_it_reaches(small_db, guide):
    """The M value equals H[q(Z)] + sum_m log B(new prior + n_m) - log B(new prior), recomputed
    from the counts with torch, and is >= the E value."""
    buckets = make_buckets(small_db, max_cells=600)
    params = init_parameters(LDHMM_SHARING, 3, 4, seed=0, n_tokens=sum(map(len, small_db)))
    states, totals = e_step(buckets, params, guide, None, max_iter=30, tol=1e-10)
    e_value = total_elbo(params, totals)
    new, m_value, _ = m_step(params, totals, newton_max_iter=5, states=states, method="collapsed")
    recomputed = 0.0
    for st in states:
        recomputed += float(st.entropy.sum())
        for g in ("pi", "A", "B"):
            prior = new.prior[g]
            recomputed += float(
                (
                    log_multivariate_beta(prior + st.counts[g])
                    - log_multivariate_beta(prior).expand_as(log_multivariate_beta(prior + st.counts[g]))
                ).sum()
            )
    assert m_value == pytest.approx(recomputed, rel=1e-10)
    assert m_value >= e_value


def test_m_step_methods_validate_and_collapsed_climbs_faster(small_db):
    with pytest.raises(ValueError, match="m_step"):
        VariationalEM(PFGuide(), m_step="newton")
    buckets = make_buckets(small_db, max_cells=600)
    params = init_parameters(LDHMM_SHARING, 3, 4, seed=0, n_tokens=sum(map(len, small_db)))
    final = {}
    for method in ("collapsed", "paper"):
        result = VariationalEM(PFGuide(), max_iter=8, tol=0.0, m_step=method).fit(buckets, params)
        values = np.array([v for _, v in result.trace])
        assert np.all(np.diff(values) >= -1e-8 * np.abs(values[1:]))
        final[method] = result.elbo_history[-1]
    assert final["collapsed"] > final["paper"]


def test_sums_do_not_depend_on_the_thread_count(small_db, numba_threads):
    import numba

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one numba thread only")
    rng = np.random.default_rng(5)
    alpha = rng.uniform(0.1, 3.0, (3, 4))
    batches = _random_count_batches(rng, 3, 4, [1000, 37])
    params = init_parameters(LDHMM_SHARING, 3, 4, seed=0, n_tokens=sum(map(len, small_db)))
    buckets = make_buckets(small_db, max_cells=10**6, max_padding_ratio=100)
    results = []
    for threads in (1, 2):
        assert numba_threads(threads) == threads
        sums = dirichlet_multinomial_sums(alpha, batches)
        states, totals = e_step(buckets, params, PFGuide(), None, max_iter=5, tol=0.0)
        results.append((sums, totals.sum_expected_log, totals.local_elbo))
    (s1, e1, l1), (s2, e2, l2) = results
    for x, y in zip(s1, s2):
        np.testing.assert_array_equal(x, y)
    for g in e1:
        np.testing.assert_array_equal(np.asarray(e1[g]), np.asarray(e2[g]))
    assert l1 == l2


def test_gain_is_measured_from_a_prior_outside_the_box():
    rng = np.random.default_rng(6)
    counts = rng.gamma(1.0, 2.0, (40, 2, 3))
    start = np.array([[1e-8, 1.0, 2.0], [3e6, 1.0, 1.0]])
    res = newton_dirichlet_multinomial(start, [counts])
    C = torch.from_numpy(counts)
    before = dirichlet_multinomial_objective(torch.from_numpy(start), C).numpy()
    after = dirichlet_multinomial_objective(torch.from_numpy(res.concentration), C).numpy()
    np.testing.assert_allclose(res.gain, after - before, rtol=1e-9, atol=1e-9)
    assert np.all(res.gain >= 0)


def test_serial_and_parallel_passes_agree_bitwise(monkeypatch, numba_threads):
    """Each entry's sum is added up by one thread in a fixed order: the pass on numba's threads
    gives the one-thread pass's numbers."""
    numba_threads(2)  # two where numba has them (the suite's workers default to one)
    rng = np.random.default_rng(7)
    batches = _random_count_batches(rng, 3, 5, [300, 41])
    alpha = rng.uniform(0.05, 4.0, (3, 5))
    table = count_table({"g": ((3, 5), batches)})
    monkeypatch.setattr(dm_kernel, "PARALLEL_MIN_VALUES", 0)
    parallel = table_sums(table, {"g": alpha})["g"]
    monkeypatch.setattr(dm_kernel, "PARALLEL_MIN_VALUES", 1 << 62)
    serial = table_sums(table, {"g": alpha})["g"]
    for x, y in zip(parallel, serial):
        np.testing.assert_array_equal(x, y)


def test_counts_too_small_to_move_a_concentration_add_exactly_zero():
    """A count with alpha + n == alpha is skipped: the entry sums are those without it."""
    rng = np.random.default_rng(8)
    counts = rng.gamma(1.0, 2.0, (30, 2, 4))
    alpha = np.array([[1e5, 2.0, 3e4, 0.5], [1.0, 1e6, 7.0, 0.25]])
    tiny = counts.copy()
    tiny[::3, 0, 0] = 1e-13  # 1e5 + 1e-13 == 1e5
    tiny[1::4, 1, 1] = 1e-11  # 1e6 + 1e-11 == 1e6
    assert np.all(alpha[0, 0] + tiny[::3, 0, 0] == alpha[0, 0])
    without = tiny.copy()
    without[::3, 0, 0] = 0.0
    without[1::4, 1, 1] = 0.0
    entry, _ = dirichlet_multinomial_sums(alpha, [tiny])
    entry_without, _ = dirichlet_multinomial_sums(alpha, [without])
    np.testing.assert_array_equal(entry, entry_without)
    entry_ref, _ = dirichlet_multinomial_sums_reference(alpha, [tiny])
    np.testing.assert_allclose(entry, entry_ref, rtol=1e-11, atol=1e-9)


def test_groups_solved_together_equal_groups_solved_apart():
    """Rows of several groups share the passes, not their results."""
    rng = np.random.default_rng(9)
    groups = {"x": (2, 3), "y": (4, 6)}
    batches = {g: _random_count_batches(rng, R, D, [25, 9]) for g, (R, D) in groups.items()}
    start = {g: rng.uniform(0.2, 3.0, shape) for g, shape in groups.items()}
    table = count_table({g: (groups[g], batches[g]) for g in groups})
    sums = lambda alphas, rows: table_sums(table, alphas, rows)
    together = maximize_collapsed(start, sums, progress_tol=0.0)
    passes = []
    for g in groups:
        apart = newton_dirichlet_multinomial(start[g], batches[g])
        np.testing.assert_array_equal(together.concentration[g], apart.concentration)
        np.testing.assert_array_equal(together.gain[g], apart.gain)
        passes.append(apart.n_passes)
    assert together.n_passes == max(passes)


def test_a_newton_step_holds_a_capped_entry_and_climbs():
    """Sequences drawn from one distribution: the objective grows with the row's scale, up to
    the cap (100 here), which its largest entry has reached. The projected step holds that
    entry and moves the others; the unconstrained step clipped entry by entry (the M-step's
    candidate before) decreases the objective."""
    rng = np.random.default_rng(10)
    theta = np.array([0.6, 0.25, 0.1, 0.05])
    counts = np.stack([rng.multinomial(12, theta) for _ in range(400)]).astype(np.float64)[:, None, :]
    a = np.array([100.0, 40.0, 16.0, 8.0])
    entry, row = dirichlet_multinomial_sums(a[None], [counts])
    step = maximization._newton_step(a, entry[:, 0], row[:, 0], 1e-6, 100.0)
    assert step is not None
    candidate, expected = step
    assert candidate[0] == 100.0 and expected > 0
    C = torch.from_numpy(counts)
    before = float(dirichlet_multinomial_objective(torch.from_numpy(a[None]), C))
    after = float(dirichlet_multinomial_objective(torch.from_numpy(candidate[None]), C))
    assert after > before + 0.5
    g = entry[1, 0] - row[1, 0]
    h = a * a * entry[2, 0] + a * g
    z = -row[2, 0]
    coef = z * (a * a * g / h).sum() / (1.0 + z * (a * a / h).sum())
    clipped = np.clip(a * np.exp(np.clip(-(a * g - coef * a) / h, -5.0, 5.0)), 1e-6, 100.0)
    assert float(dirichlet_multinomial_objective(torch.from_numpy(clipped[None]), C)) < before - 10.0


def test_the_m_step_evaluates_every_group_in_each_round(small_db):
    """One ``count_sums`` call per pass, over every learned prior; the same result as the
    M-step from the states."""
    buckets = make_buckets(small_db, max_cells=600)
    params = init_parameters(LDHMM_SHARING, 3, 4, seed=0, n_tokens=sum(map(len, small_db)))
    states, totals = e_step(buckets, params, PFGuide(), None, max_iter=30, tol=1e-10)
    shapes = {g: params.prior[g].reshape(-1, params.prior[g].shape[-1]).shape for g in ("pi", "A", "B")}
    table = state_count_table(states, shapes)
    calls = []

    def count_sums(alphas, rows):
        calls.append(sorted(alphas))
        return table_sums(table, alphas, rows)

    new, value, _ = m_step(params, totals, newton_max_iter=4, count_sums=count_sums)
    assert 2 <= len(calls) <= 5 and all(c == ["A", "B", "pi"] for c in calls)
    same, same_value, _ = m_step(params, totals, newton_max_iter=4, states=states)
    assert value == same_value
    for g in ("pi", "A", "B"):
        np.testing.assert_array_equal(new.prior[g].numpy(), same.prior[g].numpy())
