"""The one convergence monitor: its rules on hand-made histories, the same stops as the loops it
replaced (variational EM's inlined test, the SVI route's smoothed patience, hmmlearn's monitor),
and the same report from EM, SVI and the HMM baseline."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hmmlearn.base import ConvergenceMonitor as HmmlearnMonitor

from ldhmm import LDHMM
from ldhmm.baselines.hmm import HMM
from ldhmm.cli.outputs import stopping_report
from ldhmm.experiments.datasets import synthetic_database
from ldhmm.inference.monitor import (
    STOP_REASONS,
    AbsoluteGain,
    ConvergenceMonitor,
    ConvergenceReport,
    RelativeChange,
    SmoothedPatience,
)
from ldhmm.inference.svi.dirichlet_guide import DirichletMeanField
from ldhmm.inference.svi.svi_fit import fit_svi
from ldhmm.models.pyro_model import ldhmm_pf_offsets, ldhmm_sequence_model


def run(monitor: ConvergenceMonitor, values) -> int:
    """Record ``values`` until the monitor stops; how many it read."""
    for i, v in enumerate(values, 1):
        if monitor.record(v):
            return i
    return len(values)


# ------------------------------------------------------------ the loops the monitor replaced
def em_loop_before(history, tol, refresh_max, max_iter):
    """``VariationalEM.fit_backend``'s inlined test before the monitor, on a given ELBO history:
    (iterations run, converged, the iterations after which a refresh was asked for)."""
    h, refreshes, before_refresh, asked, n_iter = [], 0, None, [], 0
    for n_iter in range(1, max_iter + 1):
        h.append(history[n_iter - 1])
        if before_refresh is not None:
            if h[-1] - before_refresh <= tol * abs(h[-1]):
                return n_iter, True, asked
            before_refresh = None
        elif len(h) > 1 and abs(h[-1] - h[-2]) <= tol * abs(h[-1]):
            if refreshes >= refresh_max:
                return n_iter, True, asked
            refreshes += 1
            before_refresh = h[-1]
            asked.append(n_iter)
    return n_iter, False, asked


def svi_rule_before(values, tol, patience, smoothing, max_epochs):
    """The SVI route's ``ConvergenceState`` before the monitor: (epochs, converged, smoothed)."""
    smoothed, best, stale = [], -math.inf, 0
    for y in values:
        s = y if not smoothed else smoothing * smoothed[-1] + (1 - smoothing) * y
        smoothed.append(s)
        if s > best + tol * abs(best) or not math.isfinite(best):
            best, stale = s, 0
        else:
            stale += 1
        if stale >= patience or len(smoothed) >= max_epochs:
            break
    return len(smoothed), stale >= patience, smoothed


def random_history(rng, n=60):
    """A rising curve whose steps are now large, now tiny, now slightly negative."""
    steps = rng.choice([5.0, 0.5, 1e-3, 1e-5, -1e-5, -2.0], size=n, p=[0.3, 0.2, 0.2, 0.15, 0.1, 0.05])
    return list(-1000.0 + np.cumsum(steps))


# ------------------------------------------------------------------------ the rules
def test_relative_change_stops_exactly_when_the_change_first_reaches_tol():
    # |dL| = 7 > 0.5 * 3; |dL| = 1 <= 0.5 * 2 (equality counts)
    monitor = ConvergenceMonitor(RelativeChange(tol=0.5), max_iter=10)
    assert run(monitor, [-10.0, -3.0, -2.0, -1.99, -1.98]) == 3
    assert monitor.reason == "converged" and monitor.converged and monitor.history == [-10.0, -3.0, -2.0]
    monitor = ConvergenceMonitor(RelativeChange(tol=0.01), max_iter=10)
    assert run(monitor, [-100.0, -60.0, -50.0, -49.8, -49.7]) == 4
    assert monitor.verdicts == ["continue", "continue", "continue", "converged"]


def test_relative_change_refreshes():
    rule = RelativeChange(tol=0.01, refresh_max=1)
    # the test is met at -49.9: refresh; the refresh gains 9.9 > tol: go on; met again, no refresh left
    monitor = ConvergenceMonitor(rule, max_iter=10)
    assert run(monitor, [-100.0, -50.0, -49.9, -40.0, -39.99, -39.98]) == 5
    assert monitor.verdicts == ["continue", "continue", "refresh", "continue", "converged"]
    # after a refresh the test is one-sided: a refresh that loses ends the fit
    monitor = ConvergenceMonitor(rule, max_iter=10)
    assert run(monitor, [-100.0, -50.0, -49.9, -60.0, -59.0]) == 4 and monitor.converged
    # no refresh when refresh_max = 0
    monitor = ConvergenceMonitor(RelativeChange(tol=0.01), max_iter=10)
    assert run(monitor, [-100.0, -50.0, -49.9, -40.0]) == 3 and monitor.converged
    # while the refresh is pending, ``refresh`` tells the driver to run every start
    monitor = ConvergenceMonitor(rule, max_iter=10)
    run(monitor, [-100.0, -50.0, -49.9])
    assert monitor.refresh and not monitor.done


@pytest.mark.parametrize("seed", range(40))
def test_relative_change_stops_where_the_inlined_em_test_stopped(seed):
    rng = np.random.default_rng(seed)
    history = random_history(rng)
    tol = float(rng.choice([1e-4, 1e-6, 1e-8, 0.0]))
    refresh_max, max_iter = int(rng.integers(0, 4)), int(rng.integers(1, 60))
    n_iter, converged, asked = em_loop_before(history, tol, refresh_max, max_iter)
    monitor = ConvergenceMonitor(RelativeChange(tol, refresh_max), max_iter)
    assert run(monitor, history) == n_iter == monitor.n_iter
    assert monitor.converged == converged
    assert monitor.reason == ("converged" if converged else "max_iter")
    assert [i for i, v in enumerate(monitor.verdicts, 1) if v == "refresh"] == asked


def test_smoothed_patience_counts_epochs_without_improvement():
    # s = 0, 2, 1, 0.5: best 2 after the second epoch, then two stale epochs
    monitor = ConvergenceMonitor(SmoothedPatience(tol=0.0, patience=2, smoothing=0.5), max_iter=100)
    assert run(monitor, [0.0, 4.0, 0.0, 0.0, 0.0]) == 4 and monitor.converged
    # an improvement resets the count: s = 0, 2, 1, 4.5, 2.25, 1.125
    monitor = ConvergenceMonitor(SmoothedPatience(tol=0.0, patience=2, smoothing=0.5), max_iter=100)
    assert run(monitor, [0.0, 4.0, 0.0, 8.0, 0.0, 0.0, 0.0]) == 6
    assert monitor.rule.smoothed(monitor.history) == [0.0, 2.0, 1.0, 4.5, 2.25, 1.125]
    # gains below tol (relative) do not count as improvements
    monitor = ConvergenceMonitor(SmoothedPatience(tol=0.1, patience=2, smoothing=0.0), max_iter=100)
    assert run(monitor, [-10.0, -9.5, -9.2, -5.0]) == 3 and monitor.converged


@pytest.mark.parametrize("seed", range(30))
def test_smoothed_patience_stops_where_the_svi_rule_stopped(seed):
    rng = np.random.default_rng(100 + seed)
    values = list(np.asarray(random_history(rng, 80)) / 500 + rng.normal(0, 0.01, 80))
    tol, patience = float(rng.choice([1e-4, 1e-3, 0.0])), int(rng.integers(1, 8))
    smoothing, max_epochs = float(rng.choice([0.0, 0.5, 0.9])), int(rng.integers(1, 80))
    n, converged, smoothed = svi_rule_before(values, tol, patience, smoothing, max_epochs)
    rule = SmoothedPatience(tol, patience, smoothing)
    monitor = ConvergenceMonitor(rule, max_epochs)
    assert run(monitor, values) == n and monitor.converged == converged
    assert rule.smoothed(monitor.history) == smoothed  # bitwise: the same recursion


@pytest.mark.parametrize("seed", range(30))
def test_absolute_gain_stops_where_hmmlearns_monitor_stops(seed):
    rng = np.random.default_rng(200 + seed)
    values = random_history(rng)
    tol, n_iter = float(rng.choice([1e-2, 1.0, 0.0])), int(rng.integers(1, 60))
    theirs = HmmlearnMonitor(tol, n_iter, verbose=False)
    for v in values:
        theirs.report(v)
        if theirs.converged:
            break
    monitor = ConvergenceMonitor(AbsoluteGain(tol), n_iter)
    assert run(monitor, values) == theirs.iter
    h = list(theirs.history)
    assert monitor.converged == (len(h) >= 2 and h[-1] - h[-2] < tol)


def test_max_iter_and_non_finite_reasons():
    monitor = ConvergenceMonitor(RelativeChange(tol=0.0), max_iter=3)
    assert [monitor.record(v) for v in (-3.0, -2.0, -1.0)] == [False, False, True]
    assert monitor.reason == "max_iter" and not monitor.converged and monitor.n_iter == 3
    # the rule's test wins over max_iter at the same iteration
    monitor = ConvergenceMonitor(RelativeChange(tol=0.0), max_iter=2)
    assert run(monitor, [-1.0, -1.0]) == 2 and monitor.reason == "converged"
    # max_iter = 0: stopped before the first value
    monitor = ConvergenceMonitor(SmoothedPatience(), max_iter=0)
    assert monitor.done and monitor.reason == "max_iter" and monitor.n_iter == 0
    with pytest.raises(RuntimeError, match="stopped"):
        monitor.record(1.0)
    for bad in (math.nan, math.inf, -math.inf):
        monitor = ConvergenceMonitor(RelativeChange(), max_iter=10)
        assert run(monitor, [-5.0, -4.0, bad, -3.0]) == 3
        assert monitor.reason == "non_finite" and monitor.history == [-5.0, -4.0] and monitor.n_iter == 3
        report = monitor.report()
        assert report.reason == "non_finite" and str(bad) in str(report) and report.last == -4.0
    # a value that must be finite without being monitored (EM's E-step ELBO)
    monitor = ConvergenceMonitor(RelativeChange(), max_iter=10)
    assert monitor.check_finite(-1.0) and not monitor.done
    assert not monitor.check_finite(math.nan) and monitor.reason == "non_finite"


def test_bad_settings_are_named():
    for make, message in [
        (lambda: RelativeChange(tol=-1.0), "tol"),
        (lambda: RelativeChange(tol=math.nan), "tol"),
        (lambda: RelativeChange(refresh_max=-1), "refresh_max"),
        (lambda: SmoothedPatience(patience=0), "patience"),
        (lambda: SmoothedPatience(smoothing=1.0), "smoothing"),
        (lambda: AbsoluteGain(tol=math.inf), "tol"),
        (lambda: ConvergenceMonitor(RelativeChange(), max_iter=-1), "max_iter"),
        (lambda: ConvergenceMonitor(RelativeChange(), max_iter=2.5), "max_iter"),
    ]:
        with pytest.raises(ValueError, match=message):
            make()

    class Bogus:
        tol = 0.0

        def verdict(self, history, verdicts):
            return "maybe"

        def describe(self):
            return "bogus"

    with pytest.raises(ValueError, match="maybe"):
        ConvergenceMonitor(Bogus(), max_iter=3).record(1.0)


def test_report_line():
    monitor = ConvergenceMonitor(RelativeChange(tol=0.5, refresh_max=2), max_iter=10, unit="EM iteration")
    run(monitor, [-10.0, -3.0, -2.5, -2.4])
    report = monitor.report()
    assert report == ConvergenceReport("converged", 4, 10, 0.5, monitor.rule.describe(), "EM iteration", -2.4)
    assert str(report) == (
        "converged: 4 EM iterations of at most 10, last value -2.4 "
        "(rule: relative change <= tol 0.5, 2 refreshes at most)"
    )
    one = ConvergenceMonitor(AbsoluteGain(1.0), max_iter=1, unit="Baum-Welch iteration")
    one.record(-3.0)
    assert str(one.report()).startswith("max_iter: 1 Baum-Welch iteration of at most 1,")


# ------------------------------------------------------------- the three routes report alike
@pytest.fixture(scope="module")
def db():
    return synthetic_database(30, seed=1)


def check_report(model):
    """The attributes every iteratively fitted model sets, consistent with each other."""
    report = model.convergence_
    assert report.reason in STOP_REASONS
    assert model.n_iter_ == report.n_iter and model.converged_ == (report.reason == "converged")
    assert stopping_report(model) == f"stopped: {report}"
    assert stopping_report(model).startswith(f"stopped: {report.reason}: {report.n_iter} ")
    return report


def test_em_reports_max_iter_and_converged(db):
    capped = LDHMM(2, seed=0, n_init=1, max_iter=2).fit(db.sequences)
    report = check_report(capped)
    assert report.reason == "max_iter" and capped.n_iter_ == 2 == len(capped.elbo_history_)
    assert report.last == capped.elbo_history_[-1] and report.unit == "EM iteration"

    model = LDHMM(2, seed=0, n_init=1, max_iter=100).fit(db.sequences)
    report = check_report(model)
    assert report.reason == "converged" and model.n_iter_ == len(model.elbo_history_) < 100
    # the stop is where the inlined test of the driver stopped on the same curve
    history = list(model.elbo_history_)
    assert em_loop_before(history, model.tol, 10, 100)[:2] == (model.n_iter_, True)


def test_svi_reports_through_the_same_monitor(db):
    seqs = db.sequences[:12]
    model = LDHMM(2, seed=0, optimizer="svi", svi_steps=2).fit(seqs)
    report = check_report(model)
    assert report.reason == "max_iter" and model.n_iter_ == 2 == len(model.elbo_history_)
    assert report.unit == "SVI epoch"
    # a rule no epoch can satisfy after the first (a gain of 1e9 relative): converged at epoch 2
    prior = {"pi": model.alpha_pi_, "A": model.alpha_A_, "B": model.beta_}
    result = fit_svi(
        ldhmm_sequence_model,
        DirichletMeanField(ldhmm_sequence_model, init_offsets=ldhmm_pf_offsets),
        seqs,
        2,
        db.n_symbols,
        init={"alpha_pi": prior["pi"], "alpha_A": prior["A"], "beta": prior["B"]},
        batch_size=4,
        rule=SmoothedPatience(tol=1e9, patience=1),
        max_epochs=50,
    )
    assert result.convergence.reason == "converged" and result.n_epochs == 2 and result.converged
    n_tokens = sum(len(s) for s in seqs)
    assert result.per_token_history == [v / n_tokens for v in result.elbo_history]
    assert result.smoothed_history == SmoothedPatience(1e9, 1).smoothed(result.per_token_history)


def test_hmm_reports_hmmlearns_stop_through_the_same_monitor(db):
    model = HMM(2, seed=0, n_init=2, max_iter=500, tol=1e-4).fit(db.sequences)
    report = check_report(model)
    assert report.reason == "converged" and report.unit == "Baum-Welch iteration"
    # hmmlearn's own monitor, fed the same objective, stops at the same iteration
    n_tokens = sum(len(s) for s in db.sequences)
    assert report.tol == 1e-4 * n_tokens
    theirs = HmmlearnMonitor(report.tol, 500, verbose=False)
    for i, v in enumerate(model.objective_history_, 1):
        theirs.report(v)
        assert theirs.converged == (i == model.n_iter_)
    assert list(model.monitor_.history) == model.objective_history_ == model.monitor_.convergence.history
    capped = HMM(2, seed=0, n_init=1, max_iter=3, tol=0.0).fit(db.sequences)
    assert check_report(capped).reason == "max_iter" and capped.n_iter_ == 3
