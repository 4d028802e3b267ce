"""Data where the workers are (issue 46 item 4) and the driver killed (item 3).

A run whose data came from a path (a text file, a CSV log, a partitioned directory, a data set
of the data directory) sends the workers a reference instead of the database: each worker
process reads it once, checks its fingerprint against the driver's and computes the numbers of
a ``--jobs 1`` run; a worker that reads other data ends the run with one line naming the path
and both hashes. Data given in Python is scattered as before. A ``compare --backend dask
--workers 2`` whose driver is SIGKILLed after its first saved record resumes, with the same
command, to the records of an uninterrupted ``--jobs 1`` run.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

distributed = pytest.importorskip("distributed")

from ldhmm.data import DataOptions, kfold_indices, load_path, write_partitioned  # noqa: E402
from ldhmm.experiments import cluster_tasks  # noqa: E402
from ldhmm.experiments.classify import classify  # noqa: E402
from ldhmm.experiments.cluster_tasks import (  # noqa: E402
    DataReference,
    WorkerDataError,
    data_reference,
    read_on_workers,
    run_on_cluster,
    transfer_bytes,
)
from ldhmm.experiments.compare import compare, compare_group  # noqa: E402
from ldhmm.experiments.datasets import (  # noqa: E402
    data_fingerprint,
    labelled_synthetic_database,
    resolve_data,
    synthetic_database,
)
from ldhmm.experiments.tasks import _ClusterGroupCall  # noqa: E402

_HELPERS = importlib.util.spec_from_file_location("run_helpers", Path(__file__).with_name("run_helpers.py"))
run_helpers = importlib.util.module_from_spec(_HELPERS)
_HELPERS.loader.exec_module(run_helpers)


@pytest.fixture(scope="module")
def client(two_worker_client):
    return two_worker_client


def _write_tokens(db, path: Path) -> None:
    """``db`` as a plain token file (one sequence of symbol names per line: ``load_text``, which
    records the file in the database's ``meta``)."""
    names = db.vocabulary
    path.write_text("".join(" ".join(names[v] for v in seq) + "\n" for seq in db.sequences))


def _worker_reads(client) -> dict:
    """{worker address: {DataReference: reads in that worker process}}."""
    return client.run(lambda: dict(cluster_tasks.READS))


def test_workers_read_a_data_file_once_and_compute_the_local_numbers(client, tmp_path):
    path = tmp_path / "sequences.txt"
    synthetic_database(30, seed=3).to_text(path)
    options = dict(
        models=["HMM", "MARKOV1"], states=[2], folds=3, max_iter=5, restarts=1, is_samples=0, quiet=True
    )
    local = compare(data=str(path), out=tmp_path / "local", **options)
    on_cluster = compare(data=str(path), out=tmp_path / "cluster", backend="dask", client=client, **options)
    assert not local.errors and not on_cluster.errors
    pd.testing.assert_frame_equal(
        run_helpers.without_seconds(local.folds), run_helpers.without_seconds(on_cluster.folds)
    )
    pd.testing.assert_frame_equal(local.ttests, on_cluster.ttests)
    # the workers read the file themselves, each at most once for the run's 6 tasks
    reads = [
        n
        for per_worker in _worker_reads(client).values()
        for ref, n in per_worker.items()
        if ref.source == str(path)
    ]
    assert reads and all(n == 1 for n in reads)


def test_classify_reads_a_labelled_file_on_the_workers_with_the_stratified_folds(client, tmp_path):
    path = tmp_path / "labelled.txt"
    labelled_synthetic_database(15, seed=2).to_text(path)
    options = dict(models=["HMM"], states=[2], folds=2, max_iter=4, restarts=1, lr=False, quiet=True)
    local = classify(data=str(path), out=tmp_path / "local", **options)
    on_cluster = classify(data=str(path), out=tmp_path / "cluster", backend="dask", client=client, **options)
    assert not local.errors and not on_cluster.errors
    cols = [c for c in local.folds.columns if "seconds" not in c]
    pd.testing.assert_frame_equal(local.folds[cols], on_cluster.folds[cols])
    reads = [n for per in _worker_reads(client).values() for ref, n in per.items() if ref.source == str(path)]
    assert reads and all(n == 1 for n in reads)


def test_a_worker_that_reads_other_data_ends_the_run_with_one_line(client, tmp_path):
    path = tmp_path / "sequences.txt"
    db = synthetic_database(20, seed=1)
    db.to_text(path)
    read = load_path(path)
    reference = data_reference(str(path), read)
    payload = {"db": read, "folds": kfold_indices(len(read), 2, seed=0), "settings": {}, "entries": {}}
    shipped = read_on_workers(payload, reference, 2, 0)
    synthetic_database(20, seed=2).to_text(path)  # the file the workers see is not the driver's
    other = data_fingerprint(load_path(path))
    group = {"key": "g", "parts": [{"key": "p"}], "todo": ["p"]}
    call = _ClusterGroupCall(compare_group, tmp_path / "out", "digest")
    with pytest.raises(WorkerDataError) as err:
        run_on_cluster([group], call, shipped, client, lambda g, a: None)
    line = str(err.value)
    assert "\n" not in line and str(path) in line
    assert reference.fingerprint in line and other in line
    # a file a worker cannot read at all: one line too
    gone = DataReference("file", str(tmp_path / "absent.txt"), (), reference.fingerprint)
    with pytest.raises(WorkerDataError, match=r"absent\.txt: a worker could not read the run's data \("):
        gone.load()


def test_which_data_the_workers_read(tmp_path, data_dir):
    db = synthetic_database(40, seed=4)
    text = tmp_path / "s.txt"
    _write_tokens(db, text)
    # given in Python: scattered as before
    assert data_reference(db.sequences, resolve_data(db.sequences)[0]) is None
    assert data_reference(db, db) is None  # built in memory: no source
    assert data_reference("synthetic", resolve_data("synthetic")[0]) is None
    # a path: the file, with a seeded sample's options
    read, _ = resolve_data(str(text), n_sequences=25, seed=7)
    ref = data_reference(str(text), read, n_sequences=25, seed=7)
    assert (
        ref.kind == "file" and ref.source == str(text) and dict(ref.options) == {"n_sequences": 25, "seed": 7}
    )
    assert data_fingerprint(ref.load()) == data_fingerprint(read) == ref.fingerprint
    # a database read from the file (``ldhmm compare --file``): the same reference, checked here
    whole = load_path(text)
    assert data_reference(whole, whole) == DataReference("file", str(text), (), data_fingerprint(whole))
    # ... one read with data options (``--min-length``, ``--events``, ``--event-map``): the file
    # with those options, which the workers read to the same database
    options = DataOptions(min_length=20, events=("a", "s2", "s3"), event_map={"s0": "a", "s1": "a"})
    selected = options.read(text)
    assert len(selected) < len(whole) and selected.vocabulary == ["a", "s2", "s3"]
    ref = data_reference(selected, selected)
    assert ref.kind == "file" and ref.source == str(text)
    assert dict(ref.options)["min_length"] == 20 and dict(ref.options)["events"] == ("a", "s2", "s3")
    assert pickle.loads(pickle.dumps(ref)) == ref and hash(ref) == hash(pickle.loads(pickle.dumps(ref)))
    again = ref.load()  # the fingerprint checked: the same sequences, symbols and names
    assert again.vocabulary == selected.vocabulary and np.array_equal(again.tokens, selected.tokens)
    # the ldhmm-sequences text format, read by the CLI's data options: the file too
    native = tmp_path / "s.ldhmm.txt"
    db.to_text(native)
    read = DataOptions(max_length=30).read(native)
    ref = data_reference(read, read)
    assert ref.source == str(native) and dict(ref.options) == {"max_length": 30}
    assert data_fingerprint(ref.load()) == data_fingerprint(read)
    # ... but one whose sequences were selected after the read is not the file's: scattered
    after = whole.filter_length(20)
    assert len(after) < len(whole) and data_reference(after, after) is None
    # an event log, with its columns
    log = tmp_path / "log.csv"
    rows = [(f"u{i}", f"e{int(v)}", t) for i, s in enumerate(db.sequences) for t, v in enumerate(s)]
    pd.DataFrame(rows, columns=["user", "event", "t"]).to_csv(log, index=False)
    columns = {"sequence_col": "user", "event_col": "event", "time_col": "t"}
    read, _ = resolve_data(str(log), **columns)
    ref = data_reference(str(log), read, columns=columns)
    assert dict(ref.options) == columns and ref.load().n_tokens == db.n_tokens
    assert data_reference(read, read) == ref  # the columns are in the database's meta
    # a partitioned directory (ldhmm data export)
    parts = write_partitioned(db, tmp_path / "parts", n_files=3)
    read, _ = resolve_data(str(parts))
    ref = data_reference(str(parts), read)
    assert ref.kind == "file" and data_fingerprint(ref.load()) == data_fingerprint(db)
    # a data set of the data directory: its name, the absolute directory, the sample
    read, _ = resolve_data("splice", data_dir, n_sequences=60, seed=1, labelled=True)
    ref = data_reference("splice", read, data_dir, n_sequences=60, seed=1, labelled=True)
    assert ref.kind == "dataset" and dict(ref.options)["data_dir"] == str(Path(data_dir).resolve())
    assert data_fingerprint(ref.load()) == ref.fingerprint


def test_the_reference_is_small_and_the_task_messages_too(tmp_path):
    db = synthetic_database(2000, seed=5)
    path = tmp_path / "s.txt"
    db.to_text(path)
    read = load_path(path)
    folds = kfold_indices(len(read), 10, seed=0)
    payload = {"db": read, "folds": folds, "settings": {"seed": 0}, "entries": {}}
    shipped = read_on_workers(payload, data_reference(str(path), read), 10, 0)
    assert isinstance(shipped["db"], DataReference) and shipped["folds"].sha256
    groups = [  # Figure 5's costliest tasks: LDHMM-PF on each fold, along K = 2..6
        {
            "key": f"LDHMM-PF/fold{f}",
            "plan": "LDHMM-PF",
            "fold": f,
            "states": [2, 3, 4, 5, 6],
            "parts": [
                {"key": f"LDHMM-PF-K{k}-fold{f}", "model": "LDHMM-PF", "K": k, "fold": f} for k in range(2, 7)
            ],
        }
        for f in range(10)
    ]
    sizes = transfer_bytes(payload, shipped, groups, _ClusterGroupCall(compare_group, tmp_path, "0" * 16))
    print(f"\n2,000 sequences, 10 folds: {sizes}")
    assert sizes["payload"] < 2048 < 50 * sizes["payload"] < sizes["database_payload"]
    assert sizes["message"] < 4096
    assert len(pickle.dumps(shipped["db"])) < 1024


# ------------------------------------------------------------------------ the driver killed
WRAPPER = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('ldhmm.cli', run_name='__main__', alter_sys=True)"
)


def _env():
    env = dict(os.environ, NUMBA_NUM_THREADS="1", LDHMM_OFFLINE="1")
    env.pop("LDHMM_DEBUG", None)
    return env


def _start(args, out: Path, log: Path) -> subprocess.Popen:
    with open(log, "wb") as err, open(log.with_suffix(".out"), "wb") as stdout:
        return subprocess.Popen(
            [sys.executable, "-c", WRAPPER, *args, "--out", str(out)],
            stdout=stdout,
            stderr=err,
            env=_env(),
            start_new_session=True,  # the driver and its LocalCluster's workers: one session
        )


def _scores(out: Path, name: str = "folds.csv") -> pd.DataFrame:
    df = pd.read_csv(out / name)
    return df.drop(columns=[c for c in df if c.endswith("_seconds")])


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="the session's processes are read from /proc")
def test_a_killed_driver_resumes_with_the_same_command_to_the_local_numbers(tmp_path):
    data = tmp_path / "sequences.txt"  # a token file: --file's database names it (the reference's path)
    _write_tokens(synthetic_database(40, seed=0), data)
    run = ["--file", str(data), "--folds", "3", "--max-iter", "3", "--restarts", "1", "--quiet"]
    run += ["--states", "2", "3", "--models", "LDHMM-PF", "HMM", "--is-samples", "3"]
    n_parts = 2 * 2 * 3  # models x K x folds
    command = ["compare", *run, "--backend", "dask", "--workers", "2"]
    reference = _start(["compare", *run, "--jobs", "1"], tmp_path / "local", tmp_path / "local.err")
    out = tmp_path / "cluster"
    driver = _start(command, out, tmp_path / "killed.err")
    try:
        assert run_helpers.wait_until(driver, lambda: len(run_helpers.task_files(out)) >= 1), (
            tmp_path / "killed.err"
        ).read_text()
        driver.send_signal(signal.SIGKILL)
        assert driver.wait(60) == -signal.SIGKILL
        saved = len(run_helpers.task_files(out))
        assert 1 <= saved < n_parts  # killed mid-run
        # the LocalCluster's workers end with their driver
        deadline = time.monotonic() + 60
        while run_helpers.session_processes(driver.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not run_helpers.session_processes(driver.pid), "a killed driver left its workers running"
    finally:
        if run_helpers.session_processes(driver.pid):
            os.killpg(driver.pid, signal.SIGKILL)
    again = _start(command, out, tmp_path / "again.err")
    assert again.wait(300) == 0, (tmp_path / "again.err").read_text()
    printed = (tmp_path / "again.out").read_text()
    assert f"resumed: {saved} of {n_parts} tasks" in printed
    assert reference.wait(300) == 0, (tmp_path / "local.err").read_text()
    pd.testing.assert_frame_equal(_scores(tmp_path / "local"), _scores(out))
    pd.testing.assert_frame_equal(_scores(tmp_path / "local", "ttests.csv"), _scores(out, "ttests.csv"))
    assert np.isfinite(_scores(out)["heldout_elbo"]).all()
