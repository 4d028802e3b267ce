"""SQUAREM and damped Anderson acceleration on the learned priors (``acceleration="squarem"``,
``"anderson"``, inference/acceleration.py; issue 44, direction 2): the extrapolations, the
acceptance test and its fallback, and accelerated fits
that keep every property of plain EM's (the ELBO never falls, the same optimum, the numbers of
any partitioning), in fewer E-steps where the priors' path is what is slow."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldhmm.inference import VariationalEM, acceleration
from ldhmm.inference.acceleration import (
    LOG_BOUNDS,
    Anderson,
    Squarem,
    SquaremStep,
    accepts,
    anderson_step,
    log_priors,
    squarem_step,
    with_log_priors,
)
from ldhmm.inference.checkpoint import FitCheckpoint
from ldhmm.inference.distributed.workers import PartitionWorker
from ldhmm.inference.parameters import init_parameters
from ldhmm.inference.sharing import LDHMM_SHARING
from ldhmm.models import LDHMM
from ldhmm.models.fit_settings import EFFORTS, FitSettings

#: An easy case whose run is the priors' slow path: one run from the database-level HMM, no
#: rotating start, a tight tolerance (plain EM: 24 E-steps of LDHMM).
SLOW_PATH = {"effort": "quick", "start_every": 0, "tol": 1e-7, "max_iter": 300}


@pytest.fixture(scope="module")
def squarem_on_the_slow_path(small_db):
    """SQUAREM's fit of the slow path on one partition, fitted once for the tests that only read
    it (the fit is deterministic: every test sees the numbers it would have fitted itself)."""
    return LDHMM(3, seed=0, acceleration="squarem", **SLOW_PATH).fit(small_db)


@pytest.fixture(scope="module")
def squarem_on_two_partitions(small_db):
    """The same fit on two in-process partitions, fitted once for the tests that only read it."""
    return LDHMM(3, seed=0, acceleration="squarem", **SLOW_PATH).fit(small_db, n_partitions=2)


@pytest.fixture
def em_work(monkeypatch):
    """Counts, while the test runs: E-steps of LDHMM runs (not the database-level HMM's),
    extrapolated points tried and kept."""
    work = {"e_steps": 0, "tried": 0, "kept": 0}
    e_step, plain_accepts = PartitionWorker.e_step, acceleration.accepts

    def counting_e_step(self, params, *args, **kwargs):
        work["e_steps"] += params.sharing.has_sequence_groups
        return e_step(self, params, *args, **kwargs)

    def counting_accepts(candidate, plain):
        kept = plain_accepts(candidate, plain)
        work["tried"] += 1
        work["kept"] += kept
        return kept

    monkeypatch.setattr(PartitionWorker, "e_step", counting_e_step)
    monkeypatch.setattr(acceleration, "accepts", counting_accepts)
    return work


def test_one_cycle_lands_on_the_fixed_point_of_a_linear_map():
    """S3 is exact on a linear contraction ``F(t) = c + R (t - c)`` with ``R = rho I``."""
    c, rho = np.array([0.5, -1.0, 2.0]), 0.9
    t0 = np.array([3.0, 1.0, -2.0])
    t1 = c + rho * (t0 - c)
    t2 = c + rho * (t1 - c)
    step = squarem_step(t0, t1, t2)
    assert step.steplength == pytest.approx(-1 / (1 - rho))
    np.testing.assert_allclose(step.theta, c, atol=1e-12)
    # the bound on |s| shortens it: s = -2, between theta2 and the fixed point
    short = squarem_step(t0, t1, t2, max_step=2.0)
    assert short.steplength == -2.0
    np.testing.assert_allclose(short.theta, t0 + 4 * (t1 - t0) + 4 * (t2 - 2 * t1 + t0))


def test_the_step_is_never_shorter_than_the_plain_one_and_stays_in_the_box():
    t0, t1 = np.zeros(2), np.array([1.0, 0.0])
    # ||v|| > ||r||: s would be above -1; clamped to -1, which is theta2 exactly
    t2 = np.array([-1.0, 3.0])
    step = squarem_step(t0, t1, t2)
    assert step.steplength == -1.0 and np.array_equal(step.theta, t2)
    # v = 0 (a straight line at constant speed): no finite s, the plain step
    assert squarem_step(t0, t1, 2 * t1).steplength == -1.0
    # a long step is clipped to the M-step's box of log concentrations
    far = squarem_step(np.array([13.0]), np.array([13.5]), np.array([13.99]))
    assert far.steplength < -1 and far.theta[0] == LOG_BOUNDS[1]


def _linear_map_iterates(n_points: int):
    """Plain iterates ``x_j`` and images ``g_j = F(x_j)`` of a random linear contraction ``F(x)
    = R x + b`` of R^3 (spectral radius 0.8, not symmetric) from 0, and its fixed point."""
    rng = np.random.default_rng(0)
    R = rng.normal(size=(3, 3))
    R = 0.8 * R / np.abs(np.linalg.eigvals(R)).max()
    b = rng.normal(size=3)
    points, images = [np.zeros(3)], [b.copy()]
    while len(points) < n_points:
        points.append(images[-1])
        images.append(R @ points[-1] + b)
    return points, images, np.linalg.solve(np.eye(3) - R, b)


def test_anderson_lands_on_the_fixed_point_of_a_linear_map_from_n_differences():
    """Type-II Anderson with n differences is exact on a linear map of R^n (it is GMRES there);
    the damping ``delta`` moves the point from ``g_k`` that share of the way."""
    box = (-1e9, 1e9)
    points, images, fixed = _linear_map_iterates(4)
    np.testing.assert_allclose(anderson_step(points, images, 1.0, bounds=box), fixed, atol=1e-10)
    half = anderson_step(points, images, 0.5, bounds=box)
    np.testing.assert_allclose(half, 0.5 * images[-1] + 0.5 * fixed, atol=1e-10)
    # fewer differences than dimensions: closer than the plain step, not exact
    short = anderson_step(points[-3:], images[-3:], 1.0, bounds=box)
    assert np.linalg.norm(short - fixed) < np.linalg.norm(images[-1] - fixed)
    assert np.linalg.norm(short - fixed) > 1e-6


def test_anderson_without_a_difference_or_a_finite_answer_is_the_plain_step():
    points, images, _ = _linear_map_iterates(3)
    assert anderson_step(points[-1:], images[-1:]) is None
    assert anderson_step(points, images, damping=0.0) is None
    assert anderson_step(points, [np.full(3, np.nan)] + images[1:]) is None
    # a long step is clipped to the M-step's box of log concentrations
    far = anderson_step([np.array([13.0]), np.array([13.5])], [np.array([13.5]), np.array([13.9])])
    assert far[0] == LOG_BOUNDS[1]


def test_a_point_is_kept_where_its_elbo_is_finite_and_not_below_the_plain_one():
    assert accepts(-10.0, -10.0) and accepts(-9.0, -10.0)
    assert not accepts(-10.5, -10.0)
    assert not accepts(float("nan"), -10.0) and not accepts(-math.inf, -10.0)


def test_log_priors_round_trip():
    params = init_parameters(LDHMM_SHARING, 3, 4, seed=0)
    groups = ("pi", "A", "B")
    theta = log_priors(params, groups)
    assert theta.shape == (3 + 9 + 12,)
    back = with_log_priors(params, groups, theta)
    for g in groups:
        np.testing.assert_allclose(back.prior[g].numpy(), params.prior[g].numpy(), rtol=1e-14)
        assert back.prior[g].dtype == params.prior[g].dtype


def test_plain_em_is_the_default_and_every_preset_leaves_it():
    engine = VariationalEM(object())
    assert engine.acceleration == "none" and engine._stepper() == engine._iteration
    assert isinstance(VariationalEM(object(), acceleration="squarem")._stepper(), Squarem)
    assert isinstance(VariationalEM(object(), acceleration="anderson")._stepper(), Anderson)
    for effort in EFFORTS:
        assert FitSettings(effort=effort).arguments(VariationalEM)["acceleration"] == "none"
    assert FitSettings(acceleration="squarem").arguments(VariationalEM)["acceleration"] == "squarem"
    with pytest.raises(ValueError, match="acceleration must be one of"):
        VariationalEM(object(), acceleration="nesterov")
    with pytest.raises(ValueError, match="acceleration must be None or one of"):
        LDHMM(2, acceleration="fast")


def test_an_accelerated_fit_is_not_checkpointed(tmp_path):
    checkpoint = FitCheckpoint(tmp_path / "c", {}, LDHMM_SHARING)
    with pytest.raises(ValueError, match="not checkpointed"):
        VariationalEM(object(), acceleration="squarem", checkpoint=checkpoint)


def _never_falls(model) -> None:
    """The recorded ELBO of ``model``'s fit never falls: its trace (E- and M-steps), its kept
    run's history and every run's."""
    trace = np.array([v for _, v in model.elbo_trace_])
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:]))
    assert np.all(np.diff(model.elbo_history_) >= 0)
    for record in model.restart_elbo_histories_:
        assert np.all(np.diff(record) >= 0)


@pytest.mark.parametrize(
    "options",
    [{"effort": "quick"}, {"effort": "standard"}, {"effort": "thorough", "n_init": 1}, SLOW_PATH],
    ids=["quick", "standard", "thorough", "slow-path"],
)
def test_an_accelerated_fit_never_lets_the_elbo_fall(small_db, options, request):
    """Every recorded value, E- and M-steps alike: only kept points are recorded, and a point
    is kept where its E-step ends at or above the last recorded value."""
    if options is SLOW_PATH:  # the module's fit of these options
        model = request.getfixturevalue("squarem_on_the_slow_path")
    else:
        model = LDHMM(3, seed=0, acceleration="squarem", **options).fit(small_db)
    _never_falls(model)


def test_the_same_optimum_in_half_the_e_steps_on_a_slow_path(small_db, em_work):
    """The counts are deterministic: upper bounds pinned (plain EM: 24 E-steps and iterations;
    SQUAREM 12 E-steps, 11 iterations, one extrapolation of two kept, when pinned)."""
    plain = LDHMM(3, seed=0, **SLOW_PATH).fit(small_db)
    plain_e_steps = em_work["e_steps"]
    em_work.update(e_steps=0)
    fast = LDHMM(3, seed=0, acceleration="squarem", **SLOW_PATH).fit(small_db)
    n_tokens = sum(map(len, small_db))
    assert abs(fast.elbo_history_[-1] - plain.elbo_history_[-1]) / n_tokens < 1e-3
    assert plain_e_steps == len(plain.elbo_history_) == 24
    assert isinstance(fast.n_iter_, int) and fast.n_iter_ <= 11
    assert em_work["e_steps"] <= 12 and em_work["kept"] >= 1
    assert em_work["e_steps"] == fast.n_iter_ + em_work["tried"] - em_work["kept"]


def test_an_overshoot_falls_back_to_plain_em_bit_for_bit(small_db, em_work, monkeypatch):
    """Every extrapolation sent to the box's lowest corner (concentrations 1e-6) ends below the
    plain point, is refused, and the states saved before it are put back: the fit is plain
    EM's, number for number, with one E-step more per refusal."""
    tried = []

    def overshoot(theta0, theta1, theta2, max_step=math.inf, bounds=LOG_BOUNDS):
        tried.append(1)
        return SquaremStep(np.full_like(np.asarray(theta2), bounds[0]), -2.0)

    plain = LDHMM(3, seed=0, effort="thorough", n_init=1).fit(small_db)
    monkeypatch.setattr(acceleration, "squarem_step", overshoot)
    em_work.update(tried=0, kept=0)
    refused = LDHMM(3, seed=0, effort="thorough", n_init=1, acceleration="squarem").fit(small_db)
    # (a step computed where the run stops or refreshes next is not tried)
    assert 0 < em_work["tried"] <= len(tried) and em_work["kept"] == 0
    assert refused.elbo_trace_ == plain.elbo_trace_
    for g in ("pi", "A", "B"):
        assert np.array_equal(refused.params_.prior[g].numpy(), plain.params_.prior[g].numpy()), g


@pytest.mark.parametrize(
    "options", [{"effort": "standard"}, {"effort": "thorough", "n_init": 1}], ids=["standard", "thorough"]
)
def test_an_anderson_fit_never_lets_the_elbo_fall(small_db, options):
    _never_falls(LDHMM(3, seed=0, acceleration="anderson", **options).fit(small_db))


def test_anderson_reaches_the_same_optimum_in_fewer_e_steps_on_a_slow_path(small_db, em_work):
    """Deterministic counts, upper bounds pinned (plain EM: 24 E-steps; Anderson 13 E-steps, 10
    iterations, 2 of 5 points kept, when pinned); the ELBO never falls on the way."""
    plain_elbo = LDHMM(3, seed=0, **SLOW_PATH).fit(small_db).elbo_history_[-1]
    em_work.update(e_steps=0, tried=0, kept=0)
    fast = LDHMM(3, seed=0, acceleration="anderson", **SLOW_PATH).fit(small_db)
    _never_falls(fast)
    assert abs(fast.elbo_history_[-1] - plain_elbo) / sum(map(len, small_db)) < 1e-3
    assert fast.n_iter_ <= 10 and em_work["e_steps"] <= 13 and em_work["kept"] >= 1
    assert em_work["e_steps"] == fast.n_iter_ + em_work["tried"] - em_work["kept"]


def test_an_anderson_overshoot_falls_back_to_plain_em_bit_for_bit(small_db, em_work, monkeypatch):
    """Every Anderson point sent to the box's lowest corner is refused and the saved states put
    back: the fit is plain EM's, number for number."""
    tried = []

    def overshoot(points, images, damping=1.0, bounds=LOG_BOUNDS):
        tried.append(damping)
        return np.full_like(np.asarray(images[-1]), bounds[0]) if len(points) > 1 else None

    plain = LDHMM(3, seed=0, effort="thorough", n_init=1).fit(small_db)
    monkeypatch.setattr(acceleration, "anderson_step", overshoot)
    em_work.update(tried=0, kept=0)
    refused = LDHMM(3, seed=0, effort="thorough", n_init=1, acceleration="anderson").fit(small_db)
    assert 0 < em_work["tried"] <= len(tried) and em_work["kept"] == 0
    # each refusal halves the damping (to its least)
    assert tried[0] == acceleration.ANDERSON_DAMPING0 and min(tried) >= acceleration.ANDERSON_DAMPING_MIN
    assert refused.elbo_trace_ == plain.elbo_trace_
    for g in ("pi", "A", "B"):
        assert np.array_equal(refused.params_.prior[g].numpy(), plain.params_.prior[g].numpy()), g


def test_partitions_change_only_rounding(squarem_on_the_slow_path, squarem_on_two_partitions):
    """The extrapolation runs on the driver: two partitions give the one partition's fit up to
    the order of the sums."""
    one, two = squarem_on_the_slow_path, squarem_on_two_partitions
    assert len(two.elbo_history_) == len(one.elbo_history_)
    np.testing.assert_allclose(two.elbo_history_, one.elbo_history_, rtol=1e-6)


def test_any_worker_count_gives_the_local_backends_numbers(
    small_db, squarem_on_two_partitions, local_cluster
):
    """The same partitions on two Dask worker processes: the same numbers (==)."""
    distributed = pytest.importorskip("distributed")
    local = squarem_on_two_partitions
    cluster = local_cluster()
    with cluster, distributed.Client(cluster) as client:
        remote = LDHMM(3, seed=0, acceleration="squarem", **SLOW_PATH).fit(
            small_db, backend="dask", client=client, n_partitions=2
        )
    assert remote.elbo_trace_ == local.elbo_trace_
    for g in ("pi", "A", "B"):
        assert np.array_equal(remote.params_.prior[g].numpy(), local.params_.prior[g].numpy()), g
