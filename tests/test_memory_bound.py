"""The memory estimates bound what the commands need: measured peak RSS growth <= estimate.

Each command runs through ``ldhmm.cli.main`` in one child interpreter (after a warm-up run of
the same command on a few sequences), which reports its peak RSS growth and the estimates the
command checked: the measuring of ``benchmarks/memory_estimates.py`` (not installed; loaded from
its file), large sizes there, small ones here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from ldhmm import LDHMM
from ldhmm.inference.batch import bucket_cells, make_buckets
from ldhmm.inference.cavi.sequence_starts import independent_pair_counts
from ldhmm.models.memory import MemoryEstimateError, max_memory_limit

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak RSS from /proc")

_SPEC = importlib.util.spec_from_file_location(
    "memory_estimates", Path(__file__).resolve().parents[1] / "benchmarks" / "memory_estimates.py"
)
memory_estimates = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(memory_estimates)
command_steps, measure_steps = memory_estimates.command_steps, memory_estimates.measure_steps
write_sequences = memory_estimates.write_sequences

#: (K, V, M, mean length): small, a larger K, a larger V.
CASES = [(2, 5, 60, 5), (16, 40, 300, 8)]


def test_measured_peak_is_within_the_estimate(tmp_path):
    steps = []
    for K, V, M, length in CASES:
        out = tmp_path / f"K{K}"
        out.mkdir()
        write_sequences(out / "log.txt", M, V, length, seed=K)
        (out / "warm.txt").write_text("".join((out / "log.txt").read_text().splitlines(True)[:10]))
        steps += command_steps(out / "log.txt", out / "warm.txt", K, 30, 3, out, max_iter=2)
    results = measure_steps(steps, tmp_path, timeout=600)
    assert [r["label"] for r in results] == [s["label"] for s in steps]
    for r in results:
        assert r["rc"] == 0, r
        assert r["estimate"] > 0 and r["measured"] <= r["estimate"], r


def test_bucket_cells_are_those_of_the_buckets():
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 4, size=n) for n in rng.integers(1, 40, size=300)]
    buckets = make_buckets(seqs, max_cells=500)
    cells = [b.tokens.shape[0] * b.tokens.shape[1] for b in buckets]
    most = max(b.tokens.shape[0] for b in buckets)
    assert bucket_cells([len(s) for s in seqs], 500) == (max(cells), sum(cells), most)
    assert bucket_cells([], 500) == (0, 0, 0)


@pytest.mark.parametrize("shape", [(50, 6, 8), (7, 30, 17), (300, 5, 40), (1, 4, 3), (5, 1, 6), (0, 3, 2)])
def test_pair_counts_in_chunks_are_the_whole_products(shape):
    torch = pytest.importorskip("torch")
    marginals = torch.from_numpy(np.random.default_rng(1).random(shape))
    whole = (marginals[:, :-1, :, None] * marginals[:, 1:, None, :]).sum(1)
    assert torch.equal(independent_pair_counts(marginals), whole)  # bit for bit


def test_every_scoring_path_is_checked_per_partition():
    """Dask partitions against the limit each on its own, importance sampling's too: refused
    before a worker is asked for anything (the client is never used)."""
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 5, size=n) for n in rng.integers(2, 30, size=80)]
    model = LDHMM(3, seed=0, n_init=1, max_iter=2).fit(seqs)
    with max_memory_limit("1M"):
        for call in (model.score_samples, model.posterior):
            with pytest.raises(MemoryEstimateError, match=r"^scoring with partition 0 of 4: K = 3"):
                call(seqs, backend="dask", client=object(), n_partitions=4)
    with max_memory_limit("64M"):
        with pytest.raises(MemoryEstimateError, match=r"^importance sampling \(1000000 samples\)"):
            model.log_marginal_is(seqs, n_samples=10**6, backend="dask", client=object(), n_partitions=2)
