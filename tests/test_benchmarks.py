"""The maintainers' benchmarks (``benchmarks/``, not installed): each one's ``--help`` runs as
``python benchmarks/NAME.py --help`` runs it, and the helpers of some of them, with no timing
asserted: the E-step benchmark's timing protocol, the Dask benchmarks' round overhead, line fit,
timed partition worker and command lines, the start-up floor's table."""

from __future__ import annotations

import argparse
import csv
import functools
import importlib.util
import itertools
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ldhmm.inference import PFGuide, VariationalEM
from ldhmm.inference.batch import make_buckets
from ldhmm.inference.cavi.expectation import e_step_bucket
from ldhmm.inference.distributed.workers import LocalBackend, PartitionWorker
from ldhmm.models import LDHMM

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

#: Every benchmark script; those that need Dask's ``distributed`` to load.
SCRIPTS = (
    "annealed_start",
    "baseline_cost",
    "context_smoothing",
    "contextual_emissions",
    "dask_cli",
    "dask_iteration",
    "dask_scale",
    "effort_grid",
    "effort_held_out",
    "estep_vs_hmmlearn",
    "fit_cost",
    "fold_projection",
    "kernel_profile",
    "memory_estimates",
    "room_sizes",
    "rotating_start",
    "splice_starts",
    "squarem",
    "startup",
    "vocabulary_size",
)
NEED_DASK = ("dask_iteration", "dask_scale")


@functools.cache
def benchmark(name: str):
    """The module of ``benchmarks/NAME.py``, loaded with its folder first on ``sys.path`` (as
    ``python benchmarks/NAME.py`` has it, for the benchmarks it imports)."""
    if name in NEED_DASK:
        pytest.importorskip("distributed")
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass looks its module up there
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def test_the_folder_holds_the_listed_benchmarks_only():
    """Every script is listed (and so run by the tests below); ``_common.py`` is their shared
    helpers, not a benchmark."""
    assert sorted(p.stem for p in BENCHMARKS.glob("*.py") if not p.stem.startswith("_")) == sorted(SCRIPTS)
    assert (BENCHMARKS / "_common.py").is_file()


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_benchmark_prints_its_help(name, monkeypatch, capsys):
    """Run as a script (``__main__``, its folder on ``sys.path``, ``--help`` in ``sys.argv``):
    its options are printed and nothing else runs."""
    if name in NEED_DASK:
        pytest.importorskip("distributed")
    path = BENCHMARKS / f"{name}.py"
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(str(path), run_name="__main__")
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {path.name} ") and "--help" in out


# ------------------------------------------------------------------ estep_vs_hmmlearn.py


def test_timed_runs_are_interleaved_round_by_round():
    bench = benchmark("estep_vs_hmmlearn")
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
    bench = benchmark("estep_vs_hmmlearn")
    calls = []
    slow = bench.Row("slow", "", "", 2)
    slow.warmup_s = 10.0  # already past the budget
    fast = bench.Row("fast", "", "", 2)
    fast.warmup_s = 0.0
    configs = [(slow, lambda: calls.append("slow")), (fast, lambda: calls.append("fast"))]
    bench.time_interleaved(configs, repeats=4, budget=5.0)
    assert calls.count("slow") == 1 and calls.count("fast") == 4


def test_the_estep_benchmark_writes_cold_and_warm_rows_for_both_guides(tmp_path):
    out = tmp_path / "bench"
    argv = ["--synthetic", "--n-sequences", "120", "--states", "2", "--guides", "pf", "ff"]
    argv += ["--dtypes", "float64", "--repeats", "2", "--memory", "off", "--warm", "--quiet"]
    assert benchmark("estep_vs_hmmlearn").main(argv + ["--out", str(out)]) == 0
    rows = list(csv.DictReader(open(out / "bench.csv")))
    kinds = {(r["implementation"], r["guide"]) for r in rows}
    for guide in ("pf", "ff"):
        assert ("ldhmm/e-step", guide) in kinds
        assert ("ldhmm/e-step-warm", guide) in kinds
    for r in rows:
        if r["implementation"].startswith("ldhmm/e-step"):
            assert int(r["runs"]) == 2
            assert float(r["seconds_median"]) > 0


# ------------------------------------------------------------------ dask_scale.py, dask_cli.py

V = 6


def _sequences(n=60, seed=3):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, V, size=rng.integers(1, 12)) for _ in range(n)]


def test_round_overhead_is_the_driver_seconds_beyond_the_busiest_worker():
    # two rounds; partitions 0 and 2 on worker a (one after the other), 1 on worker b
    per_partition = [[1.0, 0.5], [1.5, 2.0], [0.25, 0.25]]
    got = benchmark("dask_scale").round_overhead([2.0, 2.5], per_partition, ["a", "b", "a"])
    # round 1: a busy 1.25 s, b 1.5 s -> 0.5 s beyond b; round 2: a 0.75 s, b 2.0 s -> 0.5 s
    np.testing.assert_allclose(got, [0.5, 0.5], rtol=0, atol=1e-15)


def test_line_fit_recovers_a_line():
    line_fit = benchmark("dask_scale").line_fit
    x = [1e4, 3e4, 1e5]
    a, b = line_fit(x, [0.2 + 3e-6 * v for v in x])
    np.testing.assert_allclose([a, b], [0.2, 3e-6], rtol=1e-9)
    assert line_fit([2.0], [5.0]) == (0.0, 2.5)
    assert line_fit([1.0, 2.0, 3.0], [0.3, 0.2, 0.25]) == (0.25, 0.0)  # falling: no slope


def test_the_timed_worker_changes_no_number_and_times_every_call():
    timed_worker = benchmark("dask_scale").TimedPartitionWorker
    seqs = _sequences()
    parts = [seqs[:30], seqs[30:]]
    model = LDHMM(2, seed=0, n_symbols=V)
    model.n_symbols_ = V
    params = model.initial_parameters(seqs)
    options = {"guide": PFGuide(), "n_symbols": V}

    def fit(worker_class):
        workers = [
            worker_class(p, index=np.arange(i * 30, i * 30 + 30), **options) for i, p in enumerate(parts)
        ]
        result = VariationalEM(PFGuide(), max_iter=4).fit_backend(LocalBackend(workers), params)
        return result, workers

    plain, _ = fit(PartitionWorker)
    timed, workers = fit(timed_worker)
    np.testing.assert_array_equal(timed.elbo_history, plain.elbo_history)
    for worker in workers:
        seconds = worker.timings()
        assert len(seconds["e_step"]) == timed.n_iter and len(seconds["count_sums"]) >= timed.n_iter
        assert all(s >= 0 for s in seconds["e_step"] + seconds["count_sums"])


def test_the_in_process_command_counts_its_rounds(tmp_path, monkeypatch, capsys):
    """COUNTING run here (as ``python -c`` runs it, without the interpreter's start): the rounds
    of an ``ldhmm fit`` of 3 EM iterations on 2 partitions, and the model written."""
    dask_cli = benchmark("dask_cli")
    data = tmp_path / "log.txt"
    data.write_text("\n".join(" ".join(f"e{t}" for t in s) for s in _sequences()) + "\n")
    argv = ["fit", str(data), "--states", "2", "--restarts", "1", "--max-iter", "3", "--tol", "0"]
    argv += ["--partitions", "2", "--quiet", "--out", str(tmp_path / "m.json")]
    monkeypatch.setattr(LocalBackend, "call", LocalBackend.call)  # put back after COUNTING wraps it
    monkeypatch.setattr(sys, "argv", ["-c", *argv])
    with pytest.raises(SystemExit) as stop:
        exec(compile(dask_cli.COUNTING, "COUNTING", "exec"), {"__name__": "__main__"})
    assert stop.value.code == 0
    rounds, seconds = dask_cli.rounds_counted(capsys.readouterr().out)
    # symbol counts, the guide, a reset, then per EM iteration one E-step round and M-step rounds
    assert rounds >= 3 + 3 * 2 and seconds > 0
    assert (tmp_path / "m.json").is_file()
    assert dask_cli.rounds_counted("fitted\n") is None


def test_the_per_round_overhead_line():
    per_round_overhead = benchmark("dask_cli").per_round_overhead
    seconds = {"in process": [10.0, 12.0, 11.0], "dask": [15.0, 14.0, 16.0]}
    rounds = {"in process": [(100, 8.0)] * 3, "dask": [(100, 9.0), (100, 10.0), (100, 11.0)]}
    line = per_round_overhead(seconds, rounds, same=True)
    # (10 - 8) s over 100 rounds; the rest: (15 - 11) - 2 = 2 s
    assert "rounds of the fit (synchronous calls over the partitions): 100;" in line
    assert "per-round overhead: 20.0 ms;" in line and "partitions' start): 2.0 s" in line
    assert "not computed" in per_round_overhead(seconds, rounds, same=False)
    rounds["dask"][0] = None
    assert "not computed" in per_round_overhead(seconds, rounds, same=True)


def test_the_cli_benchmark_runs_two_commands_that_differ_only_in_the_backend(tmp_path):
    """benchmarks/dask_cli.py times two ``ldhmm fit`` command lines: both parse, on the same
    partitions, and differ only in where the partitions live (and the model file)."""
    from ldhmm.cli.main import build_parser

    args = argparse.Namespace(states=8, max_iter=100, partitions=4, workers=2)
    commands = benchmark("dask_cli").command_lines(tmp_path / "log.txt", tmp_path, args)
    local, remote = commands.values()
    parser = build_parser()
    a, b = (parser.parse_args(c[3:]) for c in (local, remote))
    assert (a.backend, b.backend, b.workers, a.partitions, b.partitions) == ("local", "dask", 2, 4, 4)
    assert {k: v for k, v in vars(a).items() if k not in ("backend", "workers", "out")} == {
        k: v for k, v in vars(b).items() if k not in ("backend", "workers", "out")
    }


# ------------------------------------------------------------------ startup.py


def test_the_start_up_floor_table_names_its_rows_and_loads_the_kernel_from_the_cache(
    tmp_path, monkeypatch, capsys
):
    """``startup.py --floor``: its kernel row calls a kernel that numba loads from its cache (the
    floor of a command that runs compiled code, not a compilation), and the table has a row each."""
    startup = benchmark("startup")
    rows = {label: startup.FLOOR[label] for label in ("an empty interpreter", "import numpy")}
    rows["numpy, numba, one cached kernel called"] = (
        "import floor_kernel; assert floor_kernel.twice(1.5) == 3.0; "
        "s = floor_kernel.twice.stats; assert sum(s.cache_hits.values()) == 1 and not s.cache_misses"
    )
    monkeypatch.setattr(startup, "FLOOR", rows)
    startup.print_floor(tmp_path, repeats=1)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[0].lstrip("| ") for line in lines[2:5]] == list(rows)
    assert all(float(line.split(" | ")[1]) > 0 for line in lines[2:5])


def test_the_effort_table_takes_medians_and_judges_against_the_reference():
    grid = benchmark("effort_grid")
    assert grid.parse_dataset("msnbc:3000") == ("msnbc", 3000) and grid.parse_dataset("entree") == (
        "entree",
        None,
    )
    fits = [
        {"effort": "thorough", "elbo": e, "cpu": 10.0 + i, "iters": 30, "sweeps": 900.0}
        for i, e in enumerate([-1.0, -1.1, -0.9])
    ] + [
        {"effort": "standard", "elbo": e, "cpu": 2.0, "iters": 20, "sweeps": 300.0}
        for e in [-1.0015, -1.2, -0.95]
    ]  # fmt: skip
    rows = {r["effort"]: r for r in grid.cell_rows(fits, "thorough", 0.002, hmmlearn_cpu=1.0)}
    assert rows["thorough"]["median"] == -1.0 and rows["thorough"]["cpu"] == 11.0
    assert rows["standard"]["diff"] == pytest.approx(-0.0015) and rows["standard"]["holds"]
    assert rows["standard"]["ratio"] == 2.0 and rows["standard"]["low"] == -1.2
    rows = {r["effort"]: r for r in grid.cell_rows(fits, "thorough", 0.001, hmmlearn_cpu=None)}
    assert not rows["standard"]["holds"] and rows["standard"]["ratio"] is None


def test_the_held_out_rule_compares_fold_by_fold_with_the_standard_error():
    held = benchmark("effort_held_out")
    per_fold = {
        "thorough": [(-1.0, -0.9), (-1.1, -1.0), (-1.2, -1.1)],
        "standard": [(-1.001, -0.9), (-1.1, -1.01), (-1.3, -1.1)],
    }
    rows = {r["effort"]: r for r in held.fold_verdicts(per_fold, "thorough")}
    assert rows["thorough"]["diff"] == 0.0 and rows["thorough"]["logp_holds"]
    diffs = np.array([0.0, -0.01, 0.0])
    assert rows["standard"]["diff"] == pytest.approx(diffs.mean())
    assert rows["standard"]["se"] == pytest.approx(diffs.std(ddof=1) / np.sqrt(3))
    assert rows["standard"]["logp_holds"]  # -0.0033 >= -0.0033: within one standard error
    assert rows["standard"]["bound_holds"]  # median -1.1 against -1.1
    per_fold["standard"] = [(-1.1, -0.95), (-1.2, -1.05), (-1.3, -1.15)]
    rows = {r["effort"]: r for r in held.fold_verdicts(per_fold, "thorough")}
    assert not rows["standard"]["logp_holds"] and not rows["standard"]["bound_holds"]


def test_the_baseline_benchmark_reads_candidates_and_times_an_iteration_of_each_peer():
    bench = benchmark("baseline_cost")
    assert bench.parse_candidate('screen={"screen_tol": 1e-4}') == ("screen", {"screen_tol": 1e-4})
    assert bench.parse_candidate("v5=") == ("v5", {})
    with pytest.raises(Exception, match="LABEL=JSON"):
        bench.parse_candidate("no-equals-sign")
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 4, size=int(n)) for n in rng.integers(5, 12, size=20)]
    row = bench.per_iteration_row(seqs, 2, 4, iterations=3)
    assert {"HMM", "hmmlearn", "VBHMM", "hmmlearn VB"} <= set(row) and all(
        row[k] > 0 for k in ("HMM", "hmmlearn", "VBHMM", "hmmlearn VB")
    )
    model = bench.HMM(2, n_symbols=4, max_iter=5).fit(seqs)
    assert bench.final_objective(model) == model.objective_history_[-1]
    score, logp = bench.held_out_scores(model, seqs[:5], is_samples=2)
    assert score == logp == pytest.approx(model.score_samples(seqs[:5]).sum() / sum(map(len, seqs[:5])))
    copies = [seqs[i % 4] for i in range(12)]
    row = bench.copies_row(copies, 2, 4, iterations=4)
    assert row["each"] > 0 and row["once"] > 0
    np.testing.assert_allclose(row["once history"], row["each history"], rtol=1e-12)
    assert bench.hmm_module.training_buckets is not bench.every_copy_buckets  # put back
    assert sum(b.n_sequences for b in bench.every_copy_buckets(copies).buckets) == 12


# ------------------------------------------------------------------ context_smoothing.py
def test_the_smoothing_sweep_predicts_the_last_event_of_held_out_fold_zero():
    bench = benchmark("context_smoothing")
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 5, size=int(n)) for n in rng.integers(1, 9, size=200)]
    train, prefixes, targets = bench.next_event_split(seqs, 100, n_test=20)
    assert len(train) == 100 and len(prefixes) == len(targets) <= 20
    assert all(len(p) >= 1 for p in prefixes)
    assert bench.parse_smoothing("chain") == "chain" and bench.parse_smoothing("0.5") == 0.5


# ------------------------------------------------------------------ contextual_emissions.py
def test_the_shop_log_is_seeded_short_and_follows_its_funnel():
    bench = benchmark("contextual_emissions")
    db = bench.shop_log(300, seed=1)
    again = bench.shop_log(300, seed=1)
    assert all(np.array_equal(a, b) for a, b in zip(db.sequences, again.sequences))
    assert db.vocabulary == list(bench.SHOP_PAGES) and min(len(s) for s in db.sequences) >= 2
    pages = {p: i for i, p in enumerate(bench.SHOP_PAGES)}
    pairs = np.concatenate([s[:-1] * 100 + s[1:] for s in db.sequences])
    after_cart = pairs[pairs // 100 == pages["cart"]] % 100
    # "delivery" follows "cart" far more often than its share of all pages
    share = np.mean(np.concatenate(db.sequences) == pages["delivery"])
    assert np.mean(after_cart == pages["delivery"]) > 3 * share


# ------------------------------------------------------------------------ annealed_start.py


def test_the_annealed_start_cools_to_the_guides_own_update():
    """The schedule rises from t0 to 1 and stays there; at t0 = 1 the annealed E-step is the
    guide's own cold E-step number for number, and from a lower t0 it ends at a fixed point of
    the guide's update (one more sweep moves no bound); best-of-starts over runs is each
    sequence's maximum, and a set's work the sum of its runs'."""
    bench = benchmark("annealed_start")
    schedule = [bench.temperature(s, 0.05, 4) for s in range(1, 7)]
    assert schedule[0] == pytest.approx(0.05) and schedule[4:] == [1.0, 1.0]
    assert all(a < b for a, b in zip(schedule[:4], schedule[1:5]))
    truth = LDHMM.from_hyperparameters([2.0, 1.0], [[4, 1], [1, 4]], [[3, 3, 0.3, 0.3], [0.3, 0.3, 3, 3]])
    seqs = truth.sample(40, lengths=np.full(40, 12), seed=3)
    model = LDHMM(2, seed=0, n_init=1, max_iter=20).fit(seqs)
    (bucket,) = make_buckets(seqs, max_cells=1 << 30)
    guide = PFGuide(compiled=False)
    plain = e_step_bucket(bucket, model.params_, guide, None, max_iter=200, tol=1e-10)
    at_one = bench.AnnealedGuide(PFGuide(compiled=False), 1.0, 4)
    same = e_step_bucket(bucket, model.params_, at_one, None, max_iter=200, tol=1e-10)
    assert torch.equal(same.elbo, plain.elbo) and at_one.work >= 40
    annealed = bench.AnnealedGuide(PFGuide(compiled=False), 0.05, 4)
    run = e_step_bucket(bucket, model.params_, annealed, None, max_iter=200, tol=1e-10)
    assert annealed.work >= 5 * 40  # every sequence ran the 4 tempered sweeps and one at t = 1
    again = e_step_bucket(bucket, model.params_, guide, run, max_iter=1, tol=0.0)
    torch.testing.assert_close(again.elbo, run.elbo, rtol=1e-8, atol=0)
    bounds, work = bench.best_per_sequence({"a": (run.elbo, 10.0), "b": (plain.elbo, 5.0)}, ("a", "b"))
    assert work == 15.0 and torch.equal(bounds, torch.maximum(run.elbo, plain.elbo))
    sets = bench.start_sets(("prior", "mean", "random:0"), ["annealed:0.05"])
    assert sets["today: prior, mean, random:0"] == ("prior", "mean", "random:0")
    assert sets["prior, mean, annealed:0.05"] == ("prior", "mean", "annealed:0.05")


# ------------------------------------------------------------------------ rotating_start.py


def test_the_capped_rotating_start_keeps_the_ascent_and_today_is_the_uncapped_one(monkeypatch):
    """Uncapped, the stand-in fits what the package fits, number for number, and its screen
    (runs on copies, not counted) changes neither the fit nor its counted work; capped, the EM
    history still never decreases and the rotating E-steps do less work; the summary's shares
    are shares."""
    bench = benchmark("rotating_start")
    fit_cost = benchmark("fit_cost")
    # what instrument() and install() replace in place, put back after the test
    monkeypatch.setattr(fit_cost.expectation, "_e_step_compiled", fit_cost.expectation._e_step_compiled)
    monkeypatch.setattr(fit_cost.workers, "e_step", fit_cost.workers.e_step)
    monkeypatch.setattr(bench.e_step_totals, "best_of_starts", bench.e_step_totals.best_of_starts)
    truth = LDHMM.from_hyperparameters([2.0, 1.0], [[4, 1], [1, 4]], [[3, 3, 0.3, 0.3], [0.3, 0.3, 3, 3]])
    seqs = truth.sample(60, lengths=np.full(60, 15), seed=4)
    today = LDHMM(2, seed=0).fit(seqs)
    work = fit_cost.instrument()
    stand_in = bench.CappedStarts(work, screen=(2,))
    stand_in.install()
    screened = LDHMM(2, seed=0).fit(seqs)
    screened_work = dict(work)
    work.clear()
    stand_in.screen = ()
    plain = LDHMM(2, seed=0).fit(seqs)
    assert np.array_equal(screened.elbo_history_, today.elbo_history_)
    assert np.array_equal(plain.elbo_history_, today.elbo_history_)
    assert screened_work["sweeps"] == work["sweeps"] and stand_in.records
    work.clear()
    stand_in.cap = 1
    capped = LDHMM(2, seed=0).fit(seqs)
    history = capped.elbo_history_
    assert all(b >= a - 1e-9 * abs(a) for a, b in zip(history, history[1:]))
    per_call = work["one start"] / work["one start calls"]
    assert per_call < screened_work["one start"] / screened_work["one start calls"]
    summary = bench.screen_summary(stand_in.records, sum(map(len, seqs)), (2,))
    assert 0.0 <= summary["wins"] <= 1.0 and summary["gain"] >= 0.0
    assert 0.0 <= summary["behind after 2"] <= 1.0 and 0.0 <= summary["lost after 2"] <= 1.0


def test_the_effort_grid_fits_each_candidate_at_its_effort_with_its_settings(capsys, monkeypatch, tmp_path):
    """A candidate's row is the fit at ``--candidate-effort`` with its settings over
    ``--options``; the rows are judged against a candidate named as reference, and a reference
    that names no row leaves the differences empty (the grid's older use, efforts alone)."""
    grid = benchmark("effort_grid")
    made = []

    def short_fit(K, **settings):
        made.append(settings)
        return LDHMM(K, **{"max_iter": 3, **settings})

    monkeypatch.setattr(grid, "LDHMM", short_fit)
    common = ["--datasets", "synthetic:30", "--states", "2", "--guides", "pf", "--seeds", "0"]
    out = tmp_path / "fits.csv"
    grid.main(
        [*common, "--efforts", "standard", "--reference", "fast", "--options", '{"tol": 1e-3}',
         "--candidate-effort", "quick", "--candidates", 'fast={"start_every": 0, "tol": 1e-2}',
         "--csv", str(out)]
    )  # fmt: skip
    printed = capsys.readouterr()
    rows = [line.split("|")[4:7] for line in printed.out.splitlines()[2:]]
    assert [r[0].strip() for r in rows] == ["standard", "fast"] and rows[1][2].strip() == "+0.000000"
    assert [line.partition(": ")[0] for line in printed.err.splitlines()] == [
        "synthetic:30 K=2 pf seed 0 hmmlearn",
        "synthetic:30 K=2 pf seed 0 standard",
        "synthetic:30 K=2 pf seed 0 fast",
    ]  # a line per fit as it ends
    fitted = [m for m in made if m.get("guide") == "pf"]  # not the warm-up fit
    assert fitted[0]["effort"] == "standard" and fitted[0]["tol"] == 1e-3
    assert fitted[1] == {**fitted[0], "effort": "quick", "start_every": 0, "tol": 1e-2}
    written = list(csv.DictReader(out.open()))
    assert [r["effort"] for r in written] == ["hmmlearn", "standard", "fast"]
    assert int(written[0]["iters"]) >= 1 and float(written[0]["elbo"]) < 0  # its log-likelihood per token
    grid.main(
        [*common, "--efforts", "quick", "--quiet", "--no-hmmlearn"]
    )  # the default reference, thorough, is not fitted
    printed = capsys.readouterr()
    rows = [line.split("|")[4:7] for line in printed.out.splitlines()[2:]]
    assert [r[0].strip() for r in rows] == ["quick"] and rows[0][2].strip() == "" and printed.err == ""


def test_the_held_out_benchmark_fits_a_candidate_beside_the_efforts(capsys, monkeypatch):
    """A candidate's row is the fit at ``--candidate-effort`` with its settings besides, judged
    against a reference that may be a candidate; a reference that names no row is one line."""
    held = benchmark("effort_held_out")
    monkeypatch.setattr(held, "LDHMM", functools.partial(LDHMM, max_iter=3))  # a short fit will do
    common = ["--datasets", "synthetic:40", "--states", "2", "--folds", "2", "--is-samples", "4"]
    held.main(
        [*common, "--efforts", "quick", "--reference", "one", "--candidates", 'one={"random_starts": 1}']
    )
    rows = [line.split("|")[4].strip() for line in capsys.readouterr().out.splitlines()[2:]]
    assert rows == ["quick", "one"]
    with pytest.raises(SystemExit):
        held.main([*common, "--efforts", "quick", "--reference", "standard"])
    assert "--reference 'standard' is neither" in capsys.readouterr().err


# ------------------------------------------------------------------ splice_starts.py


def test_the_splice_tables_pair_each_candidate_with_the_reference_fold_by_fold():
    bench = benchmark("splice_starts")
    aucs = {("EI-IE", "standard"): [0.7, 0.8, 0.9], ("EI-IE", "restarts"): [0.8, 0.8, 1.0]}
    rows = {r["candidate"]: r for r in bench.auc_rows(aucs, "standard")}
    assert rows["standard"]["diff"] == 0.0 and rows["standard"]["auc"] == pytest.approx(0.8)
    assert rows["restarts"]["diff"] == pytest.approx(0.2 / 3)
    assert rows["restarts"]["diff_se"] == pytest.approx(np.std([0.1, 0.0, 0.1], ddof=1) / np.sqrt(3))

    def run(elbo, start):
        return {"elbo": elbo, "start": start, "held_out": -1.0, "cpu": 2.0}

    fits = {
        ("N", "standard"): [run(-1.37, "seeded"), run(-1.36, "hmm")],
        ("N", "restarts"): [run(-1.36, "restart"), run(-1.37, "restart")],
    }
    rows = {r["candidate"]: r for r in bench.class_rows(fits, "standard")}
    restarts = rows["restarts"]
    assert restarts["diff"] == pytest.approx(0.0) and restarts["diff_low"] == pytest.approx(-0.01)
    assert restarts["diff_high"] == pytest.approx(0.01) and restarts["starts"] == "restart 2"
    assert rows["standard"]["starts"] == "seeded 1, hmm 1"


def test_a_raced_candidate_keeps_its_best_fit_and_sums_their_seconds(monkeypatch):
    bench = benchmark("splice_starts")
    clock = itertools.count()  # each fit reads the clock twice: one second per fit
    monkeypatch.setattr(bench.time, "process_time", lambda: float(next(clock)))
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 3, size=12) for _ in range(20)]
    alone, cpu_alone = bench.fit_candidate({"effort": "quick"}, 2, 3, 0, seqs)
    restart = {"start_policy": "restarts", "n_init": 1, "seeded_start": "none", "effort": "quick"}
    other, _ = bench.fit_candidate(restart, 2, 3, 0, seqs)
    raced, cpu = bench.fit_candidate([{"effort": "quick"}, restart], 2, 3, 0, seqs)
    assert raced.elbo_history_[-1] == max(alone.elbo_history_[-1], other.elbo_history_[-1])
    assert cpu_alone == 1.0 and cpu == 2.0
