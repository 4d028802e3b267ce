"""Experiment helpers: the E-step benchmark's timing protocol (no timings asserted), ELBO against K."""

from __future__ import annotations

import csv

from ldhmm.experiments import bench, elbo_vs_k


def test_timed_runs_are_interleaved_round_by_round():
    calls = []
    configs = []
    for name in ("a", "b", "c"):
        row = bench.Row(name, "", "", 2)
        row.warmup_s = 0.0
        configs.append((row, lambda name=name: calls.append(name)))
    bench.time_interleaved(configs, repeats=3, budget=1e9)
    assert calls == ["a", "b", "c"] * 3
    assert all(len(row.times) == 3 for row, _ in configs)


def test_a_configuration_over_budget_leaves_the_rounds_after_one_run():
    calls = []
    slow = bench.Row("slow", "", "", 2)
    slow.warmup_s = 10.0  # already past the budget
    fast = bench.Row("fast", "", "", 2)
    fast.warmup_s = 0.0
    configs = [(slow, lambda: calls.append("slow")), (fast, lambda: calls.append("fast"))]
    bench.time_interleaved(configs, repeats=4, budget=5.0)
    assert calls.count("slow") == 1 and calls.count("fast") == 4


def test_bench_writes_cold_and_warm_rows_for_both_guides(tmp_path):
    out = tmp_path / "bench"
    rc = bench.main(
        [
            "--synthetic",
            "--n-sequences",
            "120",
            "--states",
            "2",
            "--guides",
            "pf",
            "ff",
            "--dtypes",
            "float64",
            "--repeats",
            "2",
            "--memory",
            "off",
            "--warm",
            "--quiet",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    rows = list(csv.DictReader(open(out / "bench.csv")))
    kinds = {(r["implementation"], r["guide"]) for r in rows}
    for guide in ("pf", "ff"):
        assert ("ldhmm/e-step", guide) in kinds
        assert ("ldhmm/e-step-warm", guide) in kinds
    for r in rows:
        if r["implementation"].startswith("ldhmm/e-step"):
            assert int(r["runs"]) == 2
            assert float(r["seconds_median"]) > 0


def test_falls_names_each_K_below_the_best_of_the_smaller_ones():
    rows = [
        {"K": 2, "guide": "pf", "elbo": -1.0},
        {"K": 3, "guide": "pf", "elbo": -1.2},
        {"K": 4, "guide": "pf", "elbo": -0.9},
        {"K": 5, "guide": "pf", "elbo": -0.95},
        {"K": 2, "guide": "ff", "elbo": -2.0},
    ]
    fell = elbo_vs_k.falls(rows, "pf")
    assert [K for K, _ in fell] == [3, 5]
    assert abs(fell[0][1] - 0.2) < 1e-12 and abs(fell[1][1] - 0.05) < 1e-12
    assert elbo_vs_k.falls(rows, "pf", slack=0.1) == [(3, fell[0][1])]
    assert elbo_vs_k.falls(rows, "ff") == []
