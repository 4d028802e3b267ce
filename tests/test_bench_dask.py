"""The Dask benchmarks' helpers (no timings asserted): a round's overhead beyond its busiest
worker, the line through the sizes, the timed partition worker (the same numbers as the plain
one, one timing per call), and the in-process command line that counts its rounds."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("distributed")

from ldhmm.experiments import bench_dask_cli  # noqa: E402
from ldhmm.experiments.bench_dask_scale import TimedPartitionWorker, line_fit, round_overhead  # noqa: E402
from ldhmm.inference import PFGuide, VariationalEM  # noqa: E402
from ldhmm.inference.distributed.workers import LocalBackend, PartitionWorker  # noqa: E402
from ldhmm.models import LDHMM  # noqa: E402

V = 6


def _sequences(n=60, seed=3):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, V, size=rng.integers(1, 12)) for _ in range(n)]


def test_round_overhead_is_the_driver_seconds_beyond_the_busiest_worker():
    # two rounds; partitions 0 and 2 on worker a (one after the other), 1 on worker b
    per_partition = [[1.0, 0.5], [1.5, 2.0], [0.25, 0.25]]
    got = round_overhead([2.0, 2.5], per_partition, ["a", "b", "a"])
    # round 1: a busy 1.25 s, b 1.5 s -> 0.5 s beyond b; round 2: a 0.75 s, b 2.0 s -> 0.5 s
    np.testing.assert_allclose(got, [0.5, 0.5], rtol=0, atol=1e-15)


def test_line_fit_recovers_a_line():
    x = [1e4, 3e4, 1e5]
    a, b = line_fit(x, [0.2 + 3e-6 * v for v in x])
    np.testing.assert_allclose([a, b], [0.2, 3e-6], rtol=1e-9)
    assert line_fit([2.0], [5.0]) == (0.0, 2.5)
    assert line_fit([1.0, 2.0, 3.0], [0.3, 0.2, 0.25]) == (0.25, 0.0)  # falling: no slope


def test_the_timed_worker_changes_no_number_and_times_every_call():
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
    timed, workers = fit(TimedPartitionWorker)
    np.testing.assert_array_equal(timed.elbo_history, plain.elbo_history)
    for worker in workers:
        seconds = worker.timings()
        assert len(seconds["e_step"]) == timed.n_iter and len(seconds["count_sums"]) >= timed.n_iter
        assert all(s >= 0 for s in seconds["e_step"] + seconds["count_sums"])


def test_the_in_process_command_counts_its_rounds(tmp_path, monkeypatch, capsys):
    """COUNTING run here (as ``python -c`` runs it, without the interpreter's start): the rounds
    of an ``ldhmm fit`` of 3 EM iterations on 2 partitions, and the model written."""
    data = tmp_path / "log.txt"
    data.write_text("\n".join(" ".join(f"e{t}" for t in s) for s in _sequences()) + "\n")
    argv = ["fit", str(data), "--states", "2", "--restarts", "1", "--max-iter", "3", "--tol", "0"]
    argv += ["--partitions", "2", "--quiet", "--out", str(tmp_path / "m.json")]
    monkeypatch.setattr(LocalBackend, "call", LocalBackend.call)  # put back after COUNTING wraps it
    monkeypatch.setattr(sys, "argv", ["-c", *argv])
    with pytest.raises(SystemExit) as stop:
        exec(compile(bench_dask_cli.COUNTING, "COUNTING", "exec"), {"__name__": "__main__"})
    assert stop.value.code == 0
    rounds, seconds = bench_dask_cli.rounds_counted(capsys.readouterr().out)
    # symbol counts, the guide, a reset, then per EM iteration one E-step round and M-step rounds
    assert rounds >= 3 + 3 * 2 and seconds > 0
    assert (tmp_path / "m.json").is_file()
    assert bench_dask_cli.rounds_counted("fitted\n") is None


def test_the_per_round_overhead_line():
    seconds = {"in process": [10.0, 12.0, 11.0], "dask": [15.0, 14.0, 16.0]}
    rounds = {"in process": [(100, 8.0)] * 3, "dask": [(100, 9.0), (100, 10.0), (100, 11.0)]}
    line = bench_dask_cli.per_round_overhead(seconds, rounds, same=True)
    # (10 - 8) s over 100 rounds; the rest: (15 - 11) - 2 = 2 s
    assert "rounds of the fit (synchronous calls over the partitions): 100;" in line
    assert "per-round overhead: 20.0 ms;" in line and "partitions' start): 2.0 s" in line
    assert "not computed" in bench_dask_cli.per_round_overhead(seconds, rounds, same=False)
    rounds["dask"][0] = None
    assert "not computed" in bench_dask_cli.per_round_overhead(seconds, rounds, same=True)
