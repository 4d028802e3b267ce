"""The fit on a Dask cluster (a LocalCluster of 2 worker processes on this machine): the same
numbers as the in-process backend on the same partitions, partitioned Parquet input read by the
workers themselves (a lost worker: tests/test_dask_recovery.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

distributed = pytest.importorskip("distributed")

from ldhmm import LDHMM  # noqa: E402
from ldhmm.baselines.vbhmm import VBHMM  # noqa: E402
from ldhmm.cli import main  # noqa: E402
from ldhmm.data import SequenceDatabase, write_partitioned  # noqa: E402
from ldhmm.inference.cavi.posterior import read_posterior  # noqa: E402


@pytest.fixture(scope="module")
def client(local_cluster):
    """Two worker processes, one numba thread each (tests/conftest.py::local_cluster): fits are
    bitwise the same at any numba thread count, so every == below compares the same numbers."""
    with local_cluster() as cluster, distributed.Client(cluster) as c:
        yield c


def _data(seed=0, n=240, V=9):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, V, size=rng.integers(1, 25)) for _ in range(n)]


def _same_fit(a, b):
    np.testing.assert_array_equal(a.elbo_history_, b.elbo_history_)
    np.testing.assert_array_equal(a.e_step_elbo_history_, b.e_step_elbo_history_)
    for d in ("prior", "posterior", "log_point"):
        da, db = getattr(a.params_, d), getattr(b.params_, d)
        assert da.keys() == db.keys()
        for g in da:
            assert np.array_equal(da[g].numpy(), db[g].numpy()), (d, g)


@pytest.mark.parametrize(
    "make",
    [
        lambda: LDHMM(3, seed=1, max_iter=6, n_init=2),
        lambda: LDHMM(3, guide="ff", seed=1, max_iter=4, n_init=1),  # seeded by a PF fit
        lambda: LDHMM(3, seed=1, max_iter=4, n_init=1, m_step="paper"),
        lambda: VBHMM(3, seed=1, max_iter=5),
    ],
    ids=["pf", "ff-from-pf", "paper-m-step", "vbhmm"],
)
def test_dask_fit_is_the_local_backend_fit(client, make):
    """Same partitions, same numbers (==), whatever runs them: 2 worker processes here, one
    process there."""
    seqs = _data()
    local = make().fit(seqs, n_partitions=4)
    remote = make().fit(seqs, backend="dask", client=client, n_partitions=4)
    _same_fit(remote, local)
    assert remote.recoveries_ == [] and remote.n_partitions_ == 4
    np.testing.assert_array_equal(remote.score_samples(seqs[:20]), local.score_samples(seqs[:20]))


def test_one_partition_is_the_in_process_fit():
    seqs = _data(1)
    _same_fit(LDHMM(3, seed=0, max_iter=5).fit(seqs, n_partitions=1), LDHMM(3, seed=0, max_iter=5).fit(seqs))


def test_partitioning_changes_only_rounding():
    """Another cut of the database adds the same terms in another order (the E-step of a
    sequence does not depend on its partition: random starts are hashed from its position)."""
    seqs = _data(2)
    one = LDHMM(3, seed=0, max_iter=3, n_init=1).fit(seqs)
    four = LDHMM(3, seed=0, max_iter=3, n_init=1).fit(seqs, n_partitions=4)
    np.testing.assert_allclose(four.e_step_elbo_history_[:1], one.e_step_elbo_history_[:1], rtol=1e-12)
    np.testing.assert_allclose(four.elbo_history_, one.elbo_history_, rtol=1e-6)


@pytest.mark.parametrize("layout", ["sequences", "events"])
def test_workers_read_their_own_partitioned_files(client, tmp_path, layout):
    seqs = _data(3, n=150)
    db = SequenceDatabase.from_sequences(seqs, [f"page{v}" for v in range(9)])
    write_partitioned(db, tmp_path / "d", layout=layout, n_files=5)
    local = LDHMM(3, seed=0, max_iter=4, n_init=1).fit(str(tmp_path / "d"), n_partitions=3)
    remote = LDHMM(3, seed=0, max_iter=4, n_init=1).fit(
        str(tmp_path / "d"), backend="dask", client=client, n_partitions=3
    )
    _same_fit(remote, local)
    assert remote.vocabulary_ == db.vocabulary
    # the same database in memory gives the same fit up to the order of additions
    memory = LDHMM(3, seed=0, max_iter=4, n_init=1).fit(seqs)
    np.testing.assert_allclose(remote.elbo_history_, memory.elbo_history_, rtol=1e-6)


def test_cli_fit_on_a_partitioned_directory(tmp_path):
    """``ldhmm fit DIR --backend dask --workers 2`` (in its own process, as a user runs it)
    writes the model of the local backend on the same partitions."""
    seqs = _data(5, n=120)
    db = SequenceDatabase.from_sequences(seqs, [f"p{v}" for v in range(9)])
    write_partitioned(db, tmp_path / "d", layout="sequences", n_files=4)
    common = ["fit", str(tmp_path / "d"), "--states", "2", "--restarts", "1", "--max-iter", "3", "--quiet"]
    assert main(common + ["--partitions", "3", "--out", str(tmp_path / "local.json")]) == 0
    dask_args = [
        "--partitions",
        "3",
        "--backend",
        "dask",
        "--workers",
        "2",
        "--out",
        str(tmp_path / "dask.json"),
    ]
    run = subprocess.run(
        [sys.executable, "-m", "ldhmm.cli", *common, *dask_args], capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-2000:]
    local, remote = LDHMM.load(tmp_path / "local.json"), LDHMM.load(tmp_path / "dask.json")
    np.testing.assert_array_equal(remote.elbo_history_, local.elbo_history_)
    assert remote.vocabulary_ == db.vocabulary


def test_scoring_runs_where_the_partitions_live(client, tmp_path):
    seqs = _data(6, n=150)
    model = LDHMM(3, seed=0, max_iter=4, n_init=1).fit(seqs)
    expected = model.score_samples(seqs)
    np.testing.assert_array_equal(model.score_samples(seqs, n_partitions=3), expected)
    np.testing.assert_array_equal(
        model.score_samples(seqs, backend="dask", client=client, n_partitions=3), expected
    )
    paths = model.score_samples(seqs, backend="dask", client=client, n_partitions=3, out=str(tmp_path / "s"))
    table = pd.concat([pd.read_parquet(p) for p in paths])
    assert len(paths) == 3 and sorted(table["sequence"]) == list(range(len(seqs)))
    np.testing.assert_array_equal(table.sort_values("sequence")["elbo"].to_numpy(), expected)
    db = SequenceDatabase.from_sequences(seqs, [f"p{v}" for v in range(9)])
    write_partitioned(db, tmp_path / "d", layout="events", n_files=3)
    by_id = model.score_samples(str(tmp_path / "d"), backend="dask", client=client)
    np.testing.assert_array_equal(by_id.loc[[str(i) for i in range(len(seqs))]].to_numpy(), expected)


def test_a_second_client_is_used_not_the_current_one(client, local_cluster):
    """With another client current (the fixture's), the fit talks to the cluster it was given."""
    seqs = _data(7, n=100)
    with local_cluster(n_workers=1) as other:
        second = distributed.Client(other, set_as_default=False)
        try:
            remote = LDHMM(2, seed=0, max_iter=3, n_init=1).fit(
                seqs, backend="dask", client=second, n_partitions=2
            )
        finally:
            second.close()
    local = LDHMM(2, seed=0, max_iter=3, n_init=1).fit(seqs, n_partitions=2)
    _same_fit(remote, local)


def _same_posterior(got, expected):
    np.testing.assert_array_equal(got["elbo"], expected["elbo"])
    for name in ("g_pi", "g_A", "g_B"):
        assert (name in got) == (name in expected), name
        if name in expected:
            np.testing.assert_array_equal(got[name], expected[name])
    for name in ("B_symbols", "B_counts", "state_marginals"):
        assert (name in got) == (name in expected), name
        for a, b in zip(got.get(name, []), expected.get(name, []), strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("layout", ["dense", "sparse"])
def test_posterior_runs_where_the_partitions_live(client, tmp_path, layout):
    """posterior(...) over partitions, in process or on the workers, and written to Parquet by
    the workers and read back: the in-process posterior, value for value."""
    seqs = _data(8, n=120)
    model = LDHMM(3, seed=0, max_iter=4, n_init=1, emission_layout=layout).fit(seqs)
    expected = model.posterior(seqs)
    assert ("B_symbols" in expected) == (layout == "sparse")
    _same_posterior(model.posterior(seqs, n_partitions=3), expected)
    _same_posterior(model.posterior(seqs, backend="dask", client=client, n_partitions=3), expected)
    paths = model.posterior(seqs, backend="dask", client=client, n_partitions=3, out=str(tmp_path / "post"))
    assert len(paths) == 3 and all(os.path.exists(p) for p in paths)
    back = read_posterior(tmp_path / "post")
    order = np.argsort(np.asarray(back["sequence"]))
    assert sorted(back["sequence"]) == list(range(len(seqs)))  # every sequence, once
    reordered = {
        k: (v[order] if isinstance(v, np.ndarray) else [v[i] for i in order])
        for k, v in back.items()
        if k != "sequence"
    }
    _same_posterior(reordered, expected)
    # a directory input: the workers read their files; entries come with the sequence ids
    db = SequenceDatabase.from_sequences(seqs, [f"p{v}" for v in range(9)])
    write_partitioned(db, tmp_path / "d", layout="sequences", n_files=2)
    by_id = model.posterior(str(tmp_path / "d"), n_partitions=2)
    position = {k: i for i, k in enumerate(by_id["sequence"])}
    order = [position[str(i)] for i in range(len(seqs))]
    np.testing.assert_array_equal(by_id["elbo"][order], expected["elbo"])


def test_importance_sampling_runs_where_the_partitions_live(client, tmp_path):
    """One partition is the in-process estimate (same seed, same draws); on the same partitions
    the Dask estimate is the local one (==), whatever the number of workers; out= writes it."""
    seqs = _data(9, n=90)
    model = LDHMM(2, seed=0, max_iter=3, n_init=1).fit(seqs)
    expected = model.log_marginal_is(seqs, n_samples=20, seed=3)
    np.testing.assert_array_equal(model.log_marginal_is(seqs, n_samples=20, seed=3, n_partitions=1), expected)
    local = model.log_marginal_is(seqs, n_samples=20, seed=3, n_partitions=3)
    remote = model.log_marginal_is(seqs, n_samples=20, seed=3, backend="dask", client=client, n_partitions=3)
    np.testing.assert_array_equal(remote, local)
    assert np.isfinite(local).all()
    # other draws, the same estimand: close to the in-process estimate, above the ELBO on average
    assert abs(local.mean() - expected.mean()) < 0.05 * abs(expected.mean())
    assert local.mean() >= model.score_samples(seqs).mean()
    paths = model.log_marginal_is(
        seqs, n_samples=20, seed=3, backend="dask", client=client, n_partitions=3, out=str(tmp_path / "is")
    )
    table = pd.concat([pd.read_parquet(p) for p in paths]).sort_values("sequence")
    np.testing.assert_array_equal(table["log_marginal"].to_numpy(), local)


def test_outputs_never_mix_with_an_earlier_run(tmp_path):
    """A directory that already holds part files is refused (one line), not mixed in."""
    seqs = _data(10, n=40)
    model = LDHMM(2, seed=0, max_iter=2, n_init=1).fit(seqs)
    model.score_samples(seqs, n_partitions=3, out=str(tmp_path / "o"))
    with pytest.raises(ValueError, match="already holds 3 part-"):
        model.posterior(seqs, n_partitions=2, out=str(tmp_path / "o"))
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        model.log_marginal_is(seqs, n_samples=5, seed=-1, n_partitions=2)
