"""The early-stop simulation of ``experiments/bench_starts.py`` on hand-made traces, and the
recording on a small fit (the traces it records are the fit's own runs)."""

import numpy as np

from ldhmm.experiments import bench_starts
from ldhmm.inference.cavi import expectation
from ldhmm.models import LDHMM

nan = np.nan


def test_early_stop_stops_a_run_that_settles_below_the_best_and_counts_what_a_jump_loses():
    warm = np.array([[-10.0, -9.0, nan, nan, nan, nan], [-10.0, -9.0, nan, nan, nan, nan]])
    # sequence 0: settles geometrically at -9.5 (< -9.0): stopped at its third sweep, nothing lost;
    # sequence 1: crawls, then jumps to -8.0 (> -9.0) at its sixth sweep: stopped before, 1.0 lost
    start = np.array(
        [[-12.0, -10.0, -9.75, -9.6875, -9.671875, nan], [-12.0, -11.0, -10.9, -10.89, -10.889, -8.0]]
    )
    total, saved, kept = bench_starts._early_stop([warm, start], margin=1e-6, first=2)
    assert total == 2 + 2 + 5 + 6
    assert saved == (5 - 3) + (6 - 3)
    np.testing.assert_allclose(kept, [-9.0, -9.0])
    full = np.stack([bench_starts.final_values(t) for t in (warm, start)]).max(0)
    np.testing.assert_allclose(full - kept, [0.0, 1.0])


def test_recording_gives_one_trace_per_run_and_leaves_the_fit_unchanged(monkeypatch):
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 4, size=int(n)) for n in rng.integers(5, 30, size=40)]
    plain = LDHMM(2, n_symbols=4, seed=0, n_init=1, max_iter=8).fit(seqs)
    monkeypatch.setattr(expectation, "_e_step_compiled", expectation._e_step_compiled)
    monkeypatch.setattr(expectation, "best_of_starts", expectation.best_of_starts)
    calls = bench_starts.record_starts()
    traced = LDHMM(2, n_symbols=4, seed=0, n_init=1, max_iter=8).fit(seqs)
    np.testing.assert_array_equal(traced.elbo_history_, plain.elbo_history_)
    assert calls and calls[0][0] == ["prior", "mean", "random:0", "random:1", "random:2"]
    for labels, traces, _ in calls:
        assert len(traces) == len(labels)
        finals = np.stack([bench_starts.final_values(t) for t in traces])
        assert np.isfinite(finals).all()


def test_persistence_counts_a_start_that_wins_again_as_an_earlier_winner():
    one = np.array([[-5.0]])
    # first E-step: the second start wins (-5 over -10); refresh 1 (warm -4): it wins again (-3);
    # refresh 2 (warm -3): the first start wins (-2), never having won before
    calls = [
        (["prior", "mean"], [one * 2, one], 0),
        (["warm", "prior", "mean"], [one + 1.0, one * 2, one + 2.0], 0),
        (["warm", "prior", "mean"], [one + 2.0, one + 3.0, one * 2], 0),
    ]
    rows = bench_starts.persistence_table(calls)
    assert rows[2].split("|")[2:5] == [" 2 ", " 1 ", " 50.00% "]  # the earlier winner, at both refreshes
    assert rows[3].split("|")[2:5] == [" 2 ", " 1 ", " 50.00% "]  # the first start, at both refreshes
