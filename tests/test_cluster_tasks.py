"""The harness's (model, fold) tasks on a Dask cluster (issue 46): the same records as a local run,
written by the driver into the same task store; a worker killed mid-task costs only its task; a
lost cluster is one line; the task messages stay small. A LocalCluster of 2 worker processes."""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

distributed = pytest.importorskip("distributed")
cloudpickle = pytest.importorskip("cloudpickle")

from ldhmm.baselines.hmm import HMM  # noqa: E402
from ldhmm.cli import main  # noqa: E402
from ldhmm.experiments import cluster_tasks  # noqa: E402
from ldhmm.experiments.compare import compare  # noqa: E402
from ldhmm.experiments.datasets import synthetic_database  # noqa: E402
from ldhmm.experiments.tasks import cluster_client  # noqa: E402

_HELPERS = importlib.util.spec_from_file_location("run_helpers", Path(__file__).with_name("run_helpers.py"))
run_helpers = importlib.util.module_from_spec(_HELPERS)
_HELPERS.loader.exec_module(run_helpers)

# the plug-in below runs on the workers, which cannot import this file: send it by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class _KillsItsWorkerOnce(HMM):
    """An HMM whose first fit anywhere ends the process that runs it (a worker lost mid-task):
    the first fit writes the file ``mark`` and exits; a fit that finds it fits."""

    mark = None

    def fit(self, sequences, *args, **kwargs):
        if not Path(self.mark).exists():
            Path(self.mark).write_text("killed once")
            os._exit(1)
        return super().fit(sequences, *args, **kwargs)


def killer(n_states, n_symbols, seed, mark):
    model = _KillsItsWorkerOnce(n_states, n_symbols=n_symbols, seed=seed, max_iter=10, n_init=1)
    model.mark = mark
    return model


@pytest.fixture(scope="module")
def client(two_worker_client):
    return two_worker_client


def test_compare_on_a_cluster_equals_the_local_run_and_a_lost_worker_costs_its_task(client, tmp_path):
    mark = tmp_path / "killed"
    db = synthetic_database(24, seed=3)
    options = dict(
        models={"HMM": "HMM", "MARKOV1": "MARKOV1", "KILLER": functools.partial(killer, mark=str(mark))},
        data=db,
        states=[2],
        folds=2,
        max_iter=5,
        restarts=1,
        is_samples=0,
        quiet=True,
    )
    mark.write_text("the local run is not killed")
    local = compare(out=tmp_path / "local", **options)
    mark.unlink()
    on_cluster = compare(out=tmp_path / "cluster", backend="dask", client=client, **options)
    assert mark.exists()  # one task's worker died, and the task ran again elsewhere
    assert not on_cluster.errors and not local.errors
    pd.testing.assert_frame_equal(
        run_helpers.without_seconds(local.folds), run_helpers.without_seconds(on_cluster.folds)
    )
    # the driver wrote every part into the run's task store: a rerun resumes all of them
    again = compare(out=tmp_path / "cluster", backend="dask", client=client, **options)
    assert again.config["resumed_tasks"] == len(again.folds)


def test_a_lost_cluster_is_one_line_and_a_backend_needs_its_client():
    class GoneClient:
        def scatter(self, *args, **kwargs):
            raise OSError("Timed out trying to connect to tcp://10.0.0.1:8786")

    with pytest.raises(cluster_tasks.ClusterLostError, match=r"^the Dask cluster was lost during the run \("):
        cluster_tasks.run_on_cluster([{"key": "g", "todo": ["p"]}], print, {}, GoneClient(), print)
    with pytest.raises(ValueError, match="backend='dask' needs client="):
        cluster_client("dask", None)
    with pytest.raises(ValueError, match="give backend='dask' with it"):
        cluster_client("local", object())
    with pytest.raises(ValueError, match="backend must be one of"):
        cluster_client("ray", None)


def test_a_task_message_is_small():
    group = {"key": "LDHMM-PF/fold0", "plan": "LDHMM-PF", "fold": 0, "states": [2, 3, 4, 5, 6]}
    group["parts"] = [
        {"key": f"LDHMM-PF-K{k}-fold0", "model": "LDHMM-PF", "K": k, "fold": 0} for k in range(2, 7)
    ]
    assert cluster_tasks.message_bytes(group, np.add) < 4096  # the database goes once per worker


def test_the_cluster_options_need_backend_dask(tmp_path, capsys):
    code = main(["compare", "--dataset", "synthetic", "--workers", "2", "--out", str(tmp_path), "--quiet"])
    assert code != 0
    assert "need --backend dask" in capsys.readouterr().err
