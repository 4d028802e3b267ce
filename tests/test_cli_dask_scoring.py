"""``ldhmm score/posterior/predict/decode --backend dask``: the per-sequence outputs of a saved
model computed on a Dask cluster (a LocalCluster of 2 worker processes), value for value the
in-process tables."""

from __future__ import annotations

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from ldhmm.cli import main  # noqa: E402
from ldhmm.cli.outputs import read_table  # noqa: E402


@pytest.fixture(scope="module")
def scheduler(local_cluster):
    with local_cluster() as cluster:
        yield cluster.scheduler_address


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A small log (one sequence of named events per line) and a model fitted on it."""
    root = tmp_path_factory.mktemp("dask-scoring")
    rng = np.random.default_rng(0)
    lines = [" ".join(f"page{v}" for v in rng.integers(0, 7, size=rng.integers(1, 20))) for _ in range(90)]
    (root / "log.txt").write_text("\n".join(lines) + "\n")
    fit = ["fit", str(root / "log.txt"), "--states", "3", "--restarts", "1", "--max-iter", "4", "--quiet"]
    assert main(fit + ["--out", str(root / "model.json")]) == 0
    return root


@pytest.mark.parametrize(
    "command, extra",
    [("score", ["--is-samples", "3"]), ("posterior", []), ("predict", ["--top-k", "2"]), ("decode", [])],
)
def test_a_command_on_the_cluster_writes_the_in_process_table(saved, scheduler, command, extra):
    """On the same partitions, the same table value for value, whatever process runs them (the
    in-process route with --partitions is the workers' code in this process)."""
    common = [
        command,
        str(saved / "model.json"),
        str(saved / "log.txt"),
        *extra,
        "--partitions",
        "3",
        "--quiet",
    ]
    local, remote = saved / f"{command}-local.parquet", saved / f"{command}-dask.parquet"
    assert main(common + ["--out", str(local)]) == 0
    assert main(common + ["--backend", "dask", "--scheduler", scheduler, "--out", str(remote)]) == 0
    a, b = read_table(local), read_table(remote)
    assert list(a.columns) == list(b.columns) and len(a) == 90
    for column in a.columns:
        for x, y in zip(a[column], b[column], strict=True):
            np.testing.assert_array_equal(np.asarray(y), np.asarray(x), err_msg=column)


def test_cluster_options_are_refused_without_the_dask_backend(saved, capsys):
    args = ["score", str(saved / "model.json"), str(saved / "log.txt"), "--out", str(saved / "x.csv")]
    assert main(args + ["--workers", "2"]) == 1
    assert "--scheduler, --workers and --worker-threads need --backend dask" in capsys.readouterr().err
    assert main(args + ["--backend", "dask", "--scheduler", "tcp://h:1", "--workers", "2"]) == 1
    assert "not with --scheduler" in capsys.readouterr().err
