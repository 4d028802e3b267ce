"""The importance-sampled log p(x) says how far it can be trusted: per-sequence standard error
and effective sample size (``ldhmm.inference.ops.importance``), the same estimates either way."""

from __future__ import annotations

import numpy as np
import pytest

from ldhmm import LDHMM
from ldhmm.inference.ops.importance import (
    ImportanceEstimate,
    importance_diagnostics,
    pool_estimates,
    std_error_of,
)
from ldhmm.models.base import importance_estimate


def test_diagnostics_match_the_direct_formulas():
    rng = np.random.default_rng(0)
    log_w = rng.normal(-3.0, 1.5, size=(50, 4))
    w = np.exp(log_w)  # small enough to take directly
    std_error, ess = importance_diagnostics(log_w)
    np.testing.assert_allclose(std_error, w.std(0, ddof=1) / np.sqrt(50) / w.mean(0), rtol=1e-12)
    np.testing.assert_allclose(ess, w.sum(0) ** 2 / (w**2).sum(0), rtol=1e-12)
    # a constant shift (huge log weights) changes neither; equal weights: ESS = S, no error
    shifted = importance_diagnostics(log_w + 800.0)
    np.testing.assert_allclose(shifted[0], std_error, rtol=1e-9)
    np.testing.assert_allclose(shifted[1], ess, rtol=1e-9)
    se, ess = importance_diagnostics(np.zeros((7, 2)))
    np.testing.assert_array_equal(ess, [7.0, 7.0]) and np.testing.assert_array_equal(se, [0.0, 0.0])
    # one draw carrying all the weight: ESS 1
    assert importance_diagnostics(np.array([[0.0], [-1e4], [-1e4]]))[1][0] == pytest.approx(1.0)


@pytest.fixture(scope="module")
def fitted():
    truth = LDHMM.from_hyperparameters([1, 2], [[5, 1], [1, 5]], [[4, 1, 1], [1, 1, 4]])
    data = truth.sample(40, lengths=np.random.default_rng(0).integers(5, 25, 40), seed=1)
    return LDHMM(2, n_symbols=3, seed=0, max_iter=10, n_init=1).fit(data[:30]), data[30:]


def test_the_estimates_are_the_same_numbers_with_diagnostics(fitted):
    model, test = fitted
    plain = model.log_marginal_is(test, n_samples=20, seed=3)
    found = model.log_marginal_is(test, n_samples=20, seed=3, diagnostics=True)
    assert isinstance(found, ImportanceEstimate)
    np.testing.assert_array_equal(found.log_marginal, plain)
    assert np.all((found.ess >= 1.0 - 1e-12) & (found.ess <= 20.0 + 1e-12)) and np.all(found.std_error > 0)
    assert np.all(found.n_samples == 20)


def test_the_standard_error_against_the_spread_over_seeds(fitted):
    """An independent route: the standard deviation of the estimate over 40 seeds. The mean-field
    proposal is narrower than the posterior, so the weights are heavy-tailed and one run's
    standard error understates the spread (measured here: 0.43-0.73 of it at 30 draws); it is
    never above it by much, and it is of the right order."""
    model, test = fitted
    runs = [model.log_marginal_is(test[:4], n_samples=30, seed=s, diagnostics=True) for s in range(40)]
    spread = np.std([r.log_marginal for r in runs], axis=0, ddof=1)
    predicted = np.mean([r.std_error for r in runs], axis=0)
    ratio = predicted / spread
    assert np.all(ratio > 0.25) and np.all(ratio < 1.5), (predicted, spread)


def test_a_plugin_without_diagnostics_gets_nan():
    class Plain:
        def log_marginal_is(self, sequences, n_samples=100, seed=0):
            return np.full(len(sequences), -1.5)

    found = importance_estimate(Plain(), [np.array([0, 1])] * 3, 5, 0)
    np.testing.assert_array_equal(found.log_marginal, [-1.5] * 3)
    assert np.isnan(found.std_error).all() and np.isnan(found.ess).all()


def _direct(log_w):
    """logmeanexp and the diagnostics of log weights (S, M), by the module's own formulas."""
    S = log_w.shape[0]
    se, ess = importance_diagnostics(log_w)
    return ImportanceEstimate(
        np.logaddexp.reduce(log_w, axis=0) - np.log(S), se, ess, np.full(log_w.shape[1], S)
    )


def test_pooling_two_runs_is_one_run_of_all_their_draws():
    log_w = np.random.default_rng(1).normal(-50.0, 2.0, size=(70, 5))
    pooled = pool_estimates(_direct(log_w[:30]), _direct(log_w[30:]))
    whole = _direct(log_w)
    for got, want in zip(pooled, whole):
        np.testing.assert_allclose(got, want, rtol=1e-10)
    np.testing.assert_allclose(std_error_of(whole.ess, 70), whole.std_error, rtol=1e-10)


class HeavyTailed:
    """A plug-in whose log weights are heavy-tailed draws, seeded: sequence m's spread grows with m."""

    def log_marginal_is(self, sequences, n_samples=100, seed=0, diagnostics=False):
        rng = np.random.default_rng(seed)
        scale = np.array([float(s[0]) for s in sequences])
        log_w = rng.normal(0.0, 1.0, size=(n_samples, len(sequences))) * scale
        found = _direct(log_w)
        return found if diagnostics else found.log_marginal


def test_more_draws_where_the_effective_sample_size_is_low():
    seqs = [np.array([s]) for s in (0, 1, 2, 3, 4)]  # spread 0 (ESS = S) .. 4 (ESS near 1)
    first = importance_estimate(HeavyTailed(), seqs, 20, 7)
    again = importance_estimate(HeavyTailed(), seqs, 20, 7, min_ess=15.0, max_samples=160)
    repeat = importance_estimate(HeavyTailed(), seqs, 20, 7, min_ess=15.0, max_samples=160)
    assert all(np.array_equal(a, b) for a, b in zip(again, repeat))  # seeded: same inputs, same numbers
    ok = first.ess >= 15.0
    assert ok[0] and not ok[-1]
    np.testing.assert_array_equal(again.log_marginal[ok], first.log_marginal[ok])  # untouched
    assert np.all(again.n_samples[ok] == 20)
    low = ~ok
    assert np.all(again.n_samples[low] > 20) and np.all(again.n_samples <= 160)
    assert np.all((again.ess[low] >= 15.0) | (again.n_samples[low] == 160))
    # off by default: the first run's numbers
    for a, b in zip(importance_estimate(HeavyTailed(), seqs, 20, 7, min_ess=0.0), first):
        np.testing.assert_array_equal(a, b)
