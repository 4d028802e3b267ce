"""Variational EM: monotone ELBO across E-step sweeps and EM steps, for every guide and variant."""

import math

import numpy as np
import pytest
import torch

from ldhmm.inference import FFGuide, PFGuide, VariationalEM, e_step_bucket, init_parameters, make_buckets
from ldhmm.inference.cavi.emissions import EmissionLogSums
from ldhmm.inference.sharing import (
    HMM_SHARING,
    HMMV_SHARING,
    LDHMM_SHARING,
    VBHMM_SHARING,
    ParameterSharing,
)

SHARINGS = {
    "ldhmm": LDHMM_SHARING,
    "vbhmm": VBHMM_SHARING,
    "hmmv": HMMV_SHARING,
    "hmm": HMM_SHARING,
    "ldhmm-shared-B": ParameterSharing(B="point"),
}


SHARINGS["hmmv-learned"] = ParameterSharing(pi="point", A="sequence", B="point", learn_prior=True)
# Variants without a learned prior run the same M-step whatever the method: test them once.
CASES = [(name, "collapsed") for name in SHARINGS] + [
    ("ldhmm", "paper"),
    ("ldhmm-shared-B", "paper"),
    ("hmmv-learned", "paper"),
]


@pytest.mark.parametrize("guide", [PFGuide(), FFGuide()], ids=["pf", "ff"])
@pytest.mark.parametrize("sharing_name, method", CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_elbo_never_decreases_across_e_and_m_steps(small_db, guide, sharing_name, method):
    sharing = SHARINGS[sharing_name]
    buckets = make_buckets(small_db, max_cells=600)  # several buckets, ragged lengths
    assert len(buckets) > 2
    params = init_parameters(sharing, 3, 4, seed=0, n_tokens=sum(map(len, small_db)))
    result = VariationalEM(guide, max_iter=15, tol=0.0, e_step_tol=1e-8, m_step=method).fit(buckets, params)
    values = np.array([v for _, v in result.trace])
    assert np.all(np.isfinite(values))
    assert np.all(np.diff(values) >= -1e-8 * np.abs(values[1:])), np.diff(values).min()
    for group, value in {**result.params.prior, **result.params.posterior}.items():
        assert torch.isfinite(value).all() and torch.all(value > 0), group


@pytest.mark.parametrize("guide", [PFGuide(), FFGuide()], ids=["pf", "ff"])
def test_elbo_never_decreases_across_e_step_sweeps(small_db, guide):
    params = init_parameters(LDHMM_SHARING, 3, 4, seed=1)
    for bucket in make_buckets(small_db, max_cells=600):
        history = []
        e_step_bucket(bucket, params, guide, max_iter=60, tol=0.0, history=history)
        h = np.array(history)
        assert np.all(np.diff(h) >= -1e-9 * np.abs(h[1:]))


def test_total_elbo_is_sum_of_bucket_elbos_and_bucketing_invariant(small_db):
    params = init_parameters(LDHMM_SHARING, 3, 4, seed=2)
    engine = VariationalEM(PFGuide(), e_step_tol=1e-10, e_step_max_iter=500)
    scores = []
    for cells in (100, 10_000):
        buckets = make_buckets(small_db, max_cells=cells)
        states = engine.score(buckets, params)
        out = np.empty(len(small_db))
        for b, st in zip(buckets, states):
            out[b.index.numpy()] = st.elbo.numpy()
        scores.append(out)
    np.testing.assert_allclose(scores[0], scores[1], rtol=1e-7)


def test_fast_and_reference_paths_agree_on_ragged_batches():
    rng = np.random.default_rng(4)
    seqs = [rng.integers(0, 5, size=n) for n in [1, 1, 2, 7, 30, 3, 1, 12]]
    params = init_parameters(LDHMM_SHARING, 4, 5, seed=3)
    (bucket,) = make_buckets(seqs, max_cells=10**6, max_padding_ratio=100)
    fast = e_step_bucket(bucket, params, PFGuide(), max_iter=20, tol=0)
    ref = e_step_bucket(bucket, params, PFGuide(reference=True), max_iter=20, tol=0)
    assert torch.allclose(fast.elbo, ref.elbo, rtol=1e-12)
    for g in ("pi", "A", "B"):
        assert torch.allclose(fast.counts[g], ref.counts[g], atol=1e-10)


@pytest.mark.parametrize("guide", [PFGuide(), FFGuide()], ids=["pf", "ff"])
def test_float32_path_agrees_with_float64(small_db, guide):
    p64 = init_parameters(LDHMM_SHARING, 3, 4, seed=0, dtype=torch.float64)
    p32 = p64.clone()
    p32.prior = {k: v.float() for k, v in p64.prior.items()}
    for bucket in make_buckets(small_db, max_cells=2000):
        a = e_step_bucket(bucket, p64, guide, max_iter=5, tol=0)
        b = e_step_bucket(bucket, p32, guide, max_iter=5, tol=0)
        assert b.elbo.dtype == torch.float32
        np.testing.assert_allclose(b.elbo.double().numpy(), a.elbo.numpy(), rtol=1e-4)


@pytest.mark.parametrize("guide", ["pf", "ff"])
def test_float32_fit_runs_and_stays_finite(small_db, guide):
    from ldhmm.models import LDHMM

    model = LDHMM(3, guide=guide, dtype="float32", max_iter=5).fit(small_db)
    assert np.all(np.isfinite(model.elbo_history_))
    assert np.all(np.diff(model.elbo_history_) >= -1e-6 * np.abs(model.elbo_history_[1:]))
    assert np.all(np.isfinite(model.score_samples(small_db[:5])))


@pytest.mark.parametrize("sharing", list(SHARINGS.values()), ids=list(SHARINGS))
def test_compiled_e_step_equals_step_by_step_path(small_db, sharing):
    params = init_parameters(sharing, 3, 4, seed=5, n_tokens=500.0)
    for bucket in make_buckets(small_db, max_cells=800):
        for warm in (None, "warm"):
            state = None
            if warm:
                state = e_step_bucket(bucket, params, PFGuide(compiled=False), max_iter=2, tol=0)
            fused = e_step_bucket(bucket, params, PFGuide(), state, max_iter=7, tol=1e-9)
            steps = e_step_bucket(bucket, params, PFGuide(compiled=False), state, max_iter=7, tol=1e-9)
            np.testing.assert_allclose(fused.elbo.numpy(), steps.elbo.numpy(), rtol=1e-11)
            np.testing.assert_allclose(fused.entropy.numpy(), steps.entropy.numpy(), rtol=1e-9, atol=1e-9)
            for g in ("pi", "A", "B"):
                np.testing.assert_allclose(fused.counts[g].numpy(), steps.counts[g].numpy(), atol=1e-10)
            assert fused.n_sweeps == steps.n_sweeps


def test_compiled_cold_start_detection_needs_every_count_zero(small_db):
    """A warm state whose pi counts happen to be zero is not a cold start."""
    params = init_parameters(LDHMM_SHARING, 3, 4, seed=5, n_tokens=500.0)
    (bucket,) = make_buckets(small_db, max_cells=10**6, max_padding_ratio=100)
    warm = e_step_bucket(bucket, params, PFGuide(compiled=False), max_iter=2, tol=0)
    warm.counts["pi"].zero_()
    fused = e_step_bucket(bucket, params, PFGuide(), warm, max_iter=1, tol=0)
    steps = e_step_bucket(bucket, params, PFGuide(compiled=False), warm, max_iter=1, tol=0)
    np.testing.assert_allclose(fused.elbo.numpy(), steps.elbo.numpy(), rtol=1e-11)


def _sum(state, group, params):
    """A bucket's ``sum_m E log theta_m`` as a tensor (B's is kept in parts until the E-step adds
    the buckets up: EmissionLogSums)."""
    value = state.sum_expected_log[group]
    return value.total(params.prior["B"]) if isinstance(value, EmissionLogSums) else value


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("sharing", list(SHARINGS.values()), ids=list(SHARINGS))
def test_compiled_e_step_statistics_equal_step_by_step(small_db, sharing, sparse):
    # The compiled route takes the database-level groups' potentials exponentiated once per
    # E-step (by symbol: looked up through the slots in the sparse layout); the torch route
    # exponentiates each sequence's own E log theta.
    params = init_parameters(sharing, 3, 4, seed=6, n_tokens=500.0)
    (bucket,) = make_buckets(small_db, max_cells=10**6, max_padding_ratio=100, sparse=sparse, n_symbols=4)
    fused = e_step_bucket(bucket, params, PFGuide(), max_iter=5, tol=1e-9)
    steps = e_step_bucket(bucket, params, PFGuide(compiled=False), max_iter=5, tol=1e-9)
    np.testing.assert_allclose(fused.local_elbo.numpy(), steps.local_elbo.numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(fused.elbo.numpy(), steps.elbo.numpy(), rtol=1e-11, atol=1e-12)
    for g in ("pi", "A", "B"):
        np.testing.assert_allclose(fused.counts[g].numpy(), steps.counts[g].numpy(), rtol=1e-11, atol=1e-12)
    assert set(fused.sum_expected_log) == set(steps.sum_expected_log)
    for g in fused.sum_expected_log:
        np.testing.assert_allclose(
            _sum(fused, g, params).numpy(), _sum(steps, g, params).numpy(), rtol=1e-11, atol=1e-9
        )


@pytest.mark.parametrize(
    "sharing", [LDHMM_SHARING, HMMV_SHARING, VBHMM_SHARING], ids=["ldhmm", "hmmv", "vbhmm"]
)
def test_compiled_ff_e_step_equals_step_by_step_path(small_db, sharing):
    params = init_parameters(sharing, 3, 4, seed=7, n_tokens=500.0)
    for bucket in make_buckets(small_db, max_cells=800):
        warm = e_step_bucket(bucket, params, FFGuide(compiled=False), max_iter=2, tol=0)
        for state in (None, warm):
            fused = e_step_bucket(bucket, params, FFGuide(), state, max_iter=9, tol=1e-9)
            steps = e_step_bucket(bucket, params, FFGuide(compiled=False), state, max_iter=9, tol=1e-9)
            np.testing.assert_allclose(fused.elbo.numpy(), steps.elbo.numpy(), rtol=1e-10)
            np.testing.assert_allclose(fused.guide_state.numpy(), steps.guide_state.numpy(), atol=1e-9)
            for g in ("pi", "A", "B"):
                np.testing.assert_allclose(fused.counts[g].numpy(), steps.counts[g].numpy(), atol=1e-9)
            for g in fused.sum_expected_log:
                np.testing.assert_allclose(
                    _sum(fused, g, params).numpy(),
                    _sum(steps, g, params).numpy(),
                    rtol=1e-10,
                    atol=1e-9,
                )


@pytest.mark.parametrize(
    "guide",
    [PFGuide(), FFGuide(), FFGuide(compiled=False), FFGuide(extra_sweeps=1)],
    ids=["pf", "ff", "ff-steps", "ff-extra"],
)
@pytest.mark.parametrize(
    "sharing",
    [
        ParameterSharing("point", "point", "point", False, 5.0),
        ParameterSharing("point", "sequence", "point", False, 0.0),
    ],
    ids=["hmm-map", "hmmv-ml"],
)
def test_point_estimates_with_zeros_and_map_stay_finite_and_monotone(guide, sharing):
    # Symbol 0 (also the padding token) never occurs, and one transition is exactly impossible:
    # point estimates hold exact zeros, log 0 = -inf must not turn into NaN anywhere.
    rng = np.random.default_rng(8)
    seqs = [rng.integers(1, 4, size=n) for n in rng.integers(1, 15, 60)]
    params = init_parameters(sharing, 3, 4, seed=0, n_tokens=500.0)
    if sharing.pseudocount == 0:  # (under a MAP prior such a start would itself score -inf)
        params.log_point["pi"][1] = -math.inf
    for g in params.log_point:
        params.log_point[g] = torch.log_softmax(params.log_point[g], -1)
    result = VariationalEM(guide, max_iter=12, tol=0.0).fit(make_buckets(seqs, max_cells=200), params)
    values = np.array([v for _, v in result.trace])
    assert np.all(np.isfinite(values))
    assert np.all(np.diff(values) >= -1e-8 * np.abs(values[1:])), np.diff(values).min()
