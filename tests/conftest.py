import os
from pathlib import Path

import numba
import numpy as np
import pytest
import torch

torch.set_default_dtype(torch.float64)

# The suite runs on pytest-xdist's workers, one per core (pyproject.toml's addopts). Each worker
# computes on one thread: two workers whose numba and torch thread pools each took every core
# spin-waited on each other (the whole suite ran slower on 2 workers than on 1). The tests of
# thread counts set their threads themselves (the fixture ``numba_threads`` below).
if os.environ.get("PYTEST_XDIST_WORKER"):
    numba.set_num_threads(1)
    torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def data_dir():
    """The directory of the real UCI files (LDHMM_DATA or ../shared/data); skip if absent."""
    path = Path(os.environ.get("LDHMM_DATA", REPO.parent / "shared" / "data"))
    if not path.is_dir():
        pytest.skip(f"real data not found at {path}")
    return path


@pytest.fixture(scope="session")
def true_model():
    from ldhmm.models import LDHMM

    return LDHMM.from_hyperparameters(
        [1.0, 2.0, 0.5],
        [[6.0, 1.0, 1.0], [1.0, 6.0, 1.0], [1.0, 1.0, 6.0]],
        [[4.0, 1.0, 0.5, 0.5], [0.5, 4.0, 1.0, 0.5], [0.5, 0.5, 1.0, 4.0]],
    )


@pytest.fixture(scope="session")
def small_db(true_model):
    rng = np.random.default_rng(0)
    return true_model.sample(120, lengths=rng.integers(1, 25, 120), seed=1)


@pytest.fixture(scope="session")
def data_dir_or_none():
    """The directory of the real UCI files, or None when absent (tests then use synthetic data only)."""
    path = Path(os.environ.get("LDHMM_DATA", REPO.parent / "shared" / "data"))
    return path if path.is_dir() else None


@pytest.fixture
def numba_threads():
    """``numba_threads(n)`` runs numba's kernels on ``n`` threads (at most what numba started)
    until the test ends; returns the number set."""
    before = numba.get_num_threads()

    def set_threads(n):
        n = min(n, numba.config.NUMBA_NUM_THREADS)
        numba.set_num_threads(n)
        return n

    yield set_threads
    numba.set_num_threads(before)


@pytest.fixture(scope="session")
def local_cluster():
    """``local_cluster(n_workers=2, silence_logs=40)``: a Dask LocalCluster of single-thread worker
    processes whose numba kernels run on one thread, as the suite's own processes do (a second
    thread only spin-waits on 2 cores; fits are bitwise the same at any thread count,
    tests/test_kernels.py). Skipped where Dask's ``distributed`` is not installed."""
    distributed = pytest.importorskip("distributed")

    def make(n_workers: int = 2, silence_logs: int = 40):
        return distributed.LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=silence_logs,
            env={"NUMBA_NUM_THREADS": "1"},
        )

    return make


@pytest.fixture(scope="module")
def two_worker_client(local_cluster):
    """A Dask client of a LocalCluster of two single-thread worker processes, one per test module
    (skipped where Dask's ``distributed`` is not installed)."""
    distributed = pytest.importorskip("distributed")
    cluster = local_cluster(silence_logs=50)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()
