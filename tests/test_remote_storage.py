"""Partitioned data sets at fsspec URLs: a real S3 API on the loopback interface (moto's server,
started here on a free port; ``s3fs`` talks to it as to AWS), ``ldhmm data export`` -> ``fit``
-> ``score`` through ``s3://`` on a Dask cluster whose workers read their own files, a local
``file://`` URL, and one line for a missing bucket, path or file."""

from __future__ import annotations

import os

import numpy as np
import pytest

moto_server = pytest.importorskip("moto.server")
fsspec = pytest.importorskip("fsspec")
pytest.importorskip("s3fs")
distributed = pytest.importorskip("distributed")

from ldhmm import LDHMM  # noqa: E402
from ldhmm.cli import main  # noqa: E402
from ldhmm.cli.outputs import read_table  # noqa: E402
from ldhmm.data import SequenceDatabase, load_partitioned, plan_partitions, write_partitioned  # noqa: E402

BUCKET = "ldhmm-test"
# what a worker's s3fs reads: the loopback server, with the dummy keys moto accepts
_S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server on a free loopback port, the environment pointing at it (restored
    afterwards), and an empty bucket."""
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {**_S3_ENV, "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    fsspec.filesystem("s3", skip_instance_cache=True).mkdir(BUCKET)
    try:
        yield f"s3://{BUCKET}"
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    """A small log of named events, one sequence per line."""
    root = tmp_path_factory.mktemp("remote")
    rng = np.random.default_rng(4)
    lines = [" ".join(f"e{v}" for v in rng.integers(0, 6, size=rng.integers(1, 18))) for _ in range(80)]
    (root / "log.txt").write_text("\n".join(lines) + "\n")
    return root


def test_export_fit_score_round_trip_through_s3(s3, log, local_cluster):
    """The workers of a LocalCluster (started after the environment points at the server) read
    their partitions from S3; the driver reads dataset.json only. The model is the one fitted
    on the same partitions of a local copy, bit for bit, and so are the scores."""
    url = f"{s3}/parts"
    assert main(["data", "export", str(log / "log.txt"), url, "--files", "3", "--quiet"]) == 0
    assert main(["data", "export", str(log / "log.txt"), str(log / "parts"), "--files", "3", "--quiet"]) == 0
    fit = ["fit", "--states", "2", "--restarts", "1", "--max-iter", "3", "--partitions", "3", "--quiet"]
    assert main([*fit[:1], str(log / "parts"), *fit[1:], "--out", str(log / "local.json")]) == 0
    with local_cluster() as cluster:
        on_cluster = ["--backend", "dask", "--scheduler", cluster.scheduler_address]
        assert main([*fit[:1], url, *fit[1:], *on_cluster, "--out", str(log / "s3.json")]) == 0
        score = [
            "score",
            str(log / "s3.json"),
            url,
            *on_cluster,
            "--partitions",
            "3",
            "--out",
            str(log / "s3.csv"),
        ]
        assert main(score) == 0
    local, remote = LDHMM.load(log / "local.json"), LDHMM.load(log / "s3.json")
    np.testing.assert_array_equal(remote.elbo_history_, local.elbo_history_)
    assert remote.vocabulary_ == local.vocabulary_
    # the local copy scored in this process on the same partitions (the same plan: the same
    # dataset.json): the same buckets and hashed starts, so the same scores bit for bit
    local_scores = ["score", str(log / "s3.json"), str(log / "parts"), "--partitions", "3", "--quiet"]
    assert main(local_scores + ["--out", str(log / "local.csv")]) == 0
    by_id = read_table(log / "s3.csv").set_index("sequence_id")["elbo"]
    in_process = read_table(log / "local.csv")
    assert len(by_id) == 80 and sorted(by_id.index) == sorted(in_process["sequence_id"])
    np.testing.assert_array_equal(
        by_id.loc[in_process["sequence_id"]].to_numpy(), in_process["elbo"].to_numpy()
    )
    assert np.isfinite(in_process["elbo"]).all()


def test_overwrite_on_s3_replaces_only_the_listed_objects(s3, log, capsys):
    """An object the data set's manifest does not list refuses the overwrite (nothing deleted);
    without it the old data set's objects are replaced."""
    url = f"{s3}/replace"
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    assert main(["data", "export", str(log / "log.txt"), url, "--files", "3", "--quiet"]) == 0
    fs.pipe_file(f"{BUCKET}/replace/my-notes.txt", b"keep me")
    fs.invalidate_cache()
    before = sorted(fs.ls(f"{BUCKET}/replace", detail=False))
    assert main(["data", "export", str(log / "log.txt"), url, "--files", "1", "--quiet", "--overwrite"]) == 1
    err = capsys.readouterr().err
    assert "holds 'my-notes.txt', which its data set's manifest does not list" in err and err.count("\n") == 1
    fs.invalidate_cache()
    assert sorted(fs.ls(f"{BUCKET}/replace", detail=False)) == before
    fs.rm_file(f"{BUCKET}/replace/my-notes.txt")
    assert main(["data", "export", str(log / "log.txt"), url, "--files", "1", "--quiet", "--overwrite"]) == 0
    fs.invalidate_cache()
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{BUCKET}/replace", detail=False))
    assert names == ["dataset.json", "part-00000.parquet"]


def test_a_file_url_is_the_local_directory(tmp_path):
    """``file://`` goes through fsspec as any URL: the same plan and the same database."""
    rng = np.random.default_rng(5)
    db = SequenceDatabase.from_sequences(
        [rng.integers(0, 4, size=n) for n in rng.integers(1, 12, 40)], list("abcd")
    )
    url = (tmp_path / "d").as_uri()
    assert write_partitioned(db, url, n_files=2) == url
    back = load_partitioned(url)
    assert back.offsets.tolist() == db.offsets.tolist() and back.tokens.tolist() == db.tokens.tolist()
    plan = plan_partitions(url, 2)
    assert [p.pieces for p in plan] == [p.pieces for p in plan_partitions(tmp_path / "d", 2)]
    a = LDHMM(2, seed=0, max_iter=3, n_init=1).fit(url, n_partitions=2)
    b = LDHMM(2, seed=0, max_iter=3, n_init=1).fit(str(tmp_path / "d"), n_partitions=2)
    np.testing.assert_array_equal(a.elbo_history_, b.elbo_history_)
    with pytest.raises(FileExistsError, match="exists and is not empty"):
        write_partitioned(db, url)


def test_missing_bucket_path_or_file_is_one_line(s3, log, capsys):
    fit = ["--states", "2", "--restarts", "1", "--max-iter", "2", "--partitions", "2", "--quiet"]
    for url in ("s3://no-such-ldhmm-bucket/parts", f"{s3}/no/such/prefix"):
        assert main(["fit", url, *fit, "--out", str(log / "x.json")]) == 1
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"{url}/dataset.json: nothing at this URL" in err, err
    url = f"{s3}/broken"
    assert main(["data", "export", str(log / "log.txt"), url, "--files", "2", "--quiet"]) == 0
    fsspec.filesystem("s3").rm(f"{BUCKET}/broken/part-00001.parquet")
    # the driver plans from dataset.json alone: it never lists or opens the Parquet files
    assert sum(p.n_sequences for p in plan_partitions(url, 2)) == 80
    assert main(["fit", url, *fit, "--out", str(log / "x.json")]) == 1  # read in this process (local backend)
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "part-00001.parquet: listed in dataset.json but missing" in err, err
    assert main(["data", "export", str(log / "log.txt"), url, "--quiet"]) == 1
    assert "exists and is not empty" in capsys.readouterr().err
