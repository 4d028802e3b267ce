"""The CLI's cluster right-sized (workers x numba threads <= cores by default), the workers'
ldhmm version checked at connect, and the memory check applied per partition on the
partitioned paths."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import numba
import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from ldhmm import LDHMM  # noqa: E402
from ldhmm.cli import main  # noqa: E402
from ldhmm.data import SequenceDatabase, write_partitioned  # noqa: E402
from ldhmm.inference import PFGuide  # noqa: E402
from ldhmm.inference.distributed import arithmetic, dask_backend  # noqa: E402
from ldhmm.inference.distributed.dask_backend import ClusterLostError, DaskBackend  # noqa: E402
from ldhmm.models.memory import MemoryEstimateError  # noqa: E402


def test_cluster_shape_shares_the_cores_out():
    assert dask_backend.cluster_shape(cores=2) == (2, 1)
    assert dask_backend.cluster_shape(cores=1) == (1, 1)
    assert dask_backend.cluster_shape(cores=16) == (2, 8)
    assert dask_backend.cluster_shape(4, cores=16) == (4, 4)
    assert dask_backend.cluster_shape(3, cores=2) == (3, 1)  # more workers than cores: 1 thread each
    assert dask_backend.cluster_shape(2, 3, cores=2) == (2, 3)  # both given: as given


class _Workers:
    """What ``Client.run(installed_version)`` answers, per worker."""

    def __init__(self, versions):
        self.versions = versions

    def run(self, function, on_error="raise"):
        assert function is dask_backend.installed_version and on_error == "return"
        return dict(self.versions)


def test_a_worker_with_another_version_is_refused_in_one_line():
    mine = dask_backend.installed_version()
    dask_backend.check_versions(_Workers({"tcp://a:1": mine, "tcp://b:2": mine}))
    with pytest.raises(
        RuntimeError, match=r"^Dask worker tcp://b:2 runs ldhmm 0\.0\.1, this driver .*1 of 2"
    ):
        dask_backend.check_versions(_Workers({"tcp://a:1": mine, "tcp://b:2": "0.0.1"}))
    # a worker lost while it is asked answers with an exception: left out, not a mismatch
    dask_backend.check_versions(_Workers({"tcp://a:1": mine, "tcp://b:2": OSError("connection closed")}))


def test_connect_sets_the_workers_numba_threads():
    client, cluster = dask_backend.connect(None, 2, numba_threads=1)
    try:
        # numba's own setting in the workers (the cluster's env= reaches it before numba loads;
        # it need not stay in os.environ, and the test's own environment must not decide)
        assert set(client.run(lambda: numba.config.NUMBA_NUM_THREADS).values()) == {1}
        assert len(dask_backend.scheduler_workers(client)) == 2
        # what the client's periodic refresh does: a cached identity without workers, which the
        # backend must not read as every worker gone
        client.sync(client._update_scheduler_info)
        assert not client._scheduler_identity.get("workers")
        assert len(dask_backend.scheduler_workers(client)) == 2
    finally:
        client.close()
        cluster.close()


def _data(n=300, V=6):
    rng = np.random.default_rng(0)
    return [rng.integers(0, V, size=rng.integers(5, 40)) for _ in range(n)]


def test_the_memory_check_applies_per_partition(monkeypatch):
    """Dask: each partition against the limit; local partitions: all of them together."""
    seqs = _data()
    model = LDHMM(3, seed=0, max_iter=2, n_init=1)
    monkeypatch.setenv("LDHMM_MAX_MEMORY", "100K")  # a partition needs about 0.45 MB, all 1.7 MB
    with pytest.raises(MemoryEstimateError, match=r"^fitting partition 0 of 4: K = 3 .* more partitions"):
        model.fit(seqs, backend="dask", client=object(), n_partitions=4)
    monkeypatch.setenv("LDHMM_MAX_MEMORY", "1M")
    with pytest.raises(MemoryEstimateError, match=r"^fitting K = 3 states, V = 6 symbols on 300 sequences"):
        model.fit(seqs, n_partitions=4)


def test_cli_refuses_a_partitioned_fit_over_the_limit(tmp_path, capsys):
    db = SequenceDatabase.from_sequences(_data(), [f"p{v}" for v in range(6)])
    write_partitioned(db, tmp_path / "d", layout="sequences", n_files=4)
    args = ["fit", str(tmp_path / "d"), "--states", "3", "--partitions", "4", "--max-memory", "1M", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "m.json")]) == 1
    assert "needs about" in capsys.readouterr().err and not (tmp_path / "m.json").exists()


def test_a_lost_scheduler_is_one_line():
    """Not a KeyError: the error says the scheduler was lost (a worker thread here: quick)."""
    seqs = _data(n=4)
    partitions, options = [([s], [i]) for i, s in enumerate(seqs)], {"guide": PFGuide(), "n_symbols": 6}
    cluster = distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None, silence_logs=50
    )
    client = distributed.Client(cluster)
    try:
        backend = DaskBackend(client, partitions, options)
        assert np.sum(backend.call("symbol_counts")) == sum(len(s) for s in seqs)
        cluster.sync(cluster.scheduler.close)  # the scheduler goes, the client stays
        with pytest.raises(ClusterLostError, match="^lost the Dask scheduler "):
            backend.call("symbol_counts")
    finally:
        with contextlib.suppress(Exception):  # closing what lost its scheduler may time out
            client.close(timeout=2)
            cluster.close(timeout=2)


class _Identities:
    """What ``Client.run(arithmetic_identity)`` answers, per worker."""

    def __init__(self, identities):
        self.identities = identities

    def run(self, function, workers=None, on_error="raise"):
        assert function is arithmetic.arithmetic_identity and on_error == "return"
        return {a: v for a, v in self.identities.items() if workers is None or a in workers}


def _other(value):
    """A kernel name unlike ``value`` (this machine's), whatever the CPU the test runs on."""
    return next(name for name in ("AVX512", "AVX2", "DEFAULT", "generic", "znver5") if name != value)


def test_workers_that_compute_other_bits_are_refused_in_one_line():
    mine = arithmetic.arithmetic_identity()
    # "another" worker's kernels, derived from this machine's own so that they differ on any CPU
    other_torch, other_numba = _other(mine["torch_kernels"]), _other(mine["numba_cpu"])
    other = dict(mine, torch_kernels=other_torch, numba_cpu=other_numba)
    same = {"tcp://a:1": mine, "tcp://b:2": mine}
    assert dask_backend.check_arithmetic(_Identities(same)) == same
    with pytest.raises(RuntimeError) as refused:
        dask_backend.check_arithmetic(_Identities({"tcp://a:1": mine, "tcp://b:2": other, "tcp://c:3": mine}))
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("Dask worker tcp://b:2 computes with other kernels than tcp://a:1: ")
    assert f"numba's target CPU ({other_numba}, not {mine['numba_cpu']})" in message
    assert f"torch's CPU kernels ({other_torch}, not {mine['torch_kernels']})" in message
    assert "(1 of 3 workers differ)" in message
    # a worker lost while it is asked answers with an exception: left out, not a difference
    lost = {"tcp://a:1": mine, "tcp://b:2": OSError("connection closed")}
    assert dask_backend.check_arithmetic(_Identities(lost)) == {"tcp://a:1": mine}
    assert dask_backend.check_arithmetic(_Identities({})) == {}


def test_a_driver_unlike_its_workers_is_said_in_one_line():
    """Workers that agree with each other but not with the driver are used (their numbers are
    reproducible), and the difference is said: the driver's M-steps make them differ from a fit on
    the driver alone. A real cluster whose one worker compiles numba for a generic CPU."""
    mine = arithmetic.arithmetic_identity()
    assert dask_backend.driver_differences(mine) == []
    assert dask_backend.driver_differences(None) == []  # no worker answered: nothing to compare
    other_torch = _other(mine["torch_kernels"])
    assert dask_backend.driver_differences(dict(mine, torch_kernels=other_torch)) == [
        f"torch's CPU kernels ({other_torch}, not {mine['torch_kernels']})"
    ]
    if mine["numba_cpu"] == "generic":  # pragma: no cover - a driver already held to generic
        pytest.skip("this driver compiles numba for a generic CPU itself")
    cluster = distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        silence_logs=50,
        env={"NUMBA_CPU_NAME": "generic", "NUMBA_NUM_THREADS": "1"},
    )
    client = distributed.Client(cluster)
    try:
        seqs, lines = _data(n=4), []
        partitions = [([s], [i]) for i, s in enumerate(seqs)]
        backend = DaskBackend(client, partitions, {"guide": PFGuide(), "n_symbols": 6}, notify=lines.append)
        assert len(lines) == 1 and "\n" not in lines[0]
        assert lines[0].startswith(
            "ldhmm: the Dask workers compute with other kernels than this driver (numba's target CPU "
            f"(generic, not {mine['numba_cpu']})"
        )
        assert lines[0].endswith(
            "the fit's numbers may differ in the last bits from a fit on this machine alone"
        )
        assert np.sum(backend.call("symbol_counts")) == sum(len(s) for s in seqs)  # and it is used
    finally:
        client.close()
        cluster.close()


def test_the_identity_is_the_same_whatever_else_a_worker_loaded():
    """No false refusal: another BLAS loaded by something else, or host features that change no
    instruction of arithmetic, do not change the identity."""
    before = arithmetic.arithmetic_identity()
    import sklearn.utils.extmath  # noqa: F401, PLC0415 - what a worker's earlier task may load

    assert arithmetic.arithmetic_identity() == before
    assert all(
        f[1:].startswith(("sse", "ssse", "avx", "fma", "f16c", "amx"))
        for f in before["numba_features"].split(",")
        if f
    )


def _backend(identities, known, notify):
    """A DaskBackend's recovery state alone: the fit's workers ``known``, a cluster answering
    ``identities``."""
    backend = object.__new__(DaskBackend)
    backend.client, backend.notify = _Identities(identities), notify
    backend._identities = dict(known)
    backend._identity, backend._excluded = next(iter(known.values())), set()
    backend._capacities = lambda: {a: 1.0 for a in identities}
    return backend


def test_a_worker_that_joins_with_other_kernels_is_not_used_to_rebuild():
    """Recovery places a lost worker's partitions only on workers with the fit's identity."""
    mine = arithmetic.arithmetic_identity()
    lines = []
    generic = dict(mine, numba_cpu="generic")
    cluster = {
        "tcp://a:1": mine,
        "tcp://new:9": generic,
        "tcp://odd:7": OSError("no such module"),
        "tcp://c:3": mine,
    }
    backend = _backend(cluster, {"tcp://a:1": mine, "tcp://gone:5": mine}, lines.append)
    assert backend._live_workers(gone=set()) == {"tcp://a:1": 1.0, "tcp://c:3": 1.0}
    assert backend._live_workers(gone=set()) == {"tcp://a:1": 1.0, "tcp://c:3": 1.0}  # asked once, said once
    assert lines == [
        "ldhmm: Dask worker tcp://new:9 not used for the fit's partitions: it computes with other kernels "
        f"(numba's target CPU (generic, not {mine['numba_cpu']}))",
        "ldhmm: Dask worker tcp://odd:7 not used for the fit's partitions: its identity could not be read "
        "(OSError: no such module)",
    ]
    assert "tcp://gone:5" not in backend._identities  # left the cluster: forgotten
    assert backend._live_workers(gone={"tcp://a:1", "tcp://c:3"}, wait=0.0) == {}
    # a worker restarted at the same address with the fit's kernels is asked again, and used
    backend.client.identities["tcp://new:9"] = mine
    backend._capacities = lambda: {"tcp://a:1": 1.0}
    assert backend._live_workers(gone=set()) == {"tcp://a:1": 1.0}
    backend._capacities = lambda: {"tcp://a:1": 1.0, "tcp://new:9": 1.0}
    assert backend._live_workers(gone=set()) == {"tcp://a:1": 1.0, "tcp://new:9": 1.0}


def test_a_cluster_of_mixed_kernels_is_refused_before_any_partition_starts(tmp_path):
    """A real cluster: one worker as started here, one compiling numba for a generic CPU (what
    an older or newer machine's worker is to this one)."""
    cluster = distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=50
    )
    client = distributed.Client(cluster)
    env = {**os.environ, "NUMBA_CPU_NAME": "generic"}
    command = [
        sys.executable,
        "-m",
        "distributed.cli.dask_worker",
        cluster.scheduler_address,
        "--nthreads",
        "1",
    ]
    other = subprocess.Popen(
        command + ["--no-nanny", "--local-directory", str(tmp_path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client.wait_for_workers(2, timeout=60)
        seqs = _data(n=8)
        partitions = [([s], [i]) for i, s in enumerate(seqs)]
        with pytest.raises(
            RuntimeError, match=r"^Dask worker .* computes with other kernels than .*numba's target CPU"
        ):
            DaskBackend(client, partitions, {"guide": PFGuide(), "n_symbols": 6})
        assert not client.has_what() or not any(client.has_what().values())  # nothing was started
    finally:
        other.terminate()
        other.wait(timeout=30)
        client.close()
        cluster.close()
