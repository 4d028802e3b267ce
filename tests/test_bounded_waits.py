"""Bounded waits and sizes (issue 49): a Dask scheduler that never answers, or a server that is
not one, is one line naming the address within ``--scheduler-timeout``; an S3 end point that never
answers is one line naming the URL within ``LDHMM_NETWORK_TIMEOUT`` per call; ``--workers`` beyond
what the machine holds is refused before a process starts; credentials in a URL are never
echoed; distributed's log lines are silent under ``--quiet``. The silent servers are sockets that
listen and never answer."""

from __future__ import annotations

import logging
import socket

import numpy as np
import pytest

from ldhmm.cli import main
from ldhmm.data.terminal_text import without_credentials

dask_backend = pytest.importorskip("ldhmm.inference.distributed.dask_backend")


@pytest.fixture
def silent_server():
    """The address of a TCP server that accepts connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


@pytest.fixture
def log(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "log.txt"
    path.write_text("\n".join(" ".join(f"s{t}" for t in rng.integers(0, 4, 6)) for _ in range(20)) + "\n")
    return path


def _dask_fit(log, out) -> list:
    """``ldhmm fit LOG --states 2 --quiet --out OUT --backend dask``: the cluster options follow."""
    return ["fit", str(log), "--states", "2", "--quiet", "--out", str(out), "--backend", "dask"]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_a_scheduler_that_never_answers_is_one_line_naming_it(log, silent_server, tmp_path, capsys):
    argv = _dask_fit(log, tmp_path / "m.json")
    assert main([*argv, "--scheduler", f"tcp://{silent_server}", "--scheduler-timeout", "0.3"]) == 1
    err = _one_line(capsys)
    assert f"--scheduler tcp://{silent_server}: no Dask scheduler answered within 0.3 s" in err
    assert "--scheduler-timeout SECONDS" in err and not (tmp_path / "m.json").exists()


def test_credentials_in_a_scheduler_address_are_never_echoed(log, tmp_path, capsys):
    argv = _dask_fit(log, tmp_path / "m.json")
    assert main([*argv, "--scheduler", "tcp://admin:hunter2@127.0.0.1:1", "--scheduler-timeout", "0.3"]) == 1
    err = _one_line(capsys)
    assert "hunter2" not in err and "admin" not in err and "tcp://***@" in err, err
    assert (
        without_credentials("s3://AKIA:se/cret@bucket/x and tcp://h:1") == "s3://***@bucket/x and tcp://h:1"
    )


def test_scheduler_timeout_needs_dask_and_a_scheduler(log, capsys):
    assert main(["fit", str(log), "--states", "2", "--scheduler-timeout", "1"]) == 1
    assert "need --backend dask" in _one_line(capsys)
    assert main(["fit", str(log), "--states", "2", "--backend", "dask", "--scheduler-timeout", "1"]) == 1
    assert "--scheduler-timeout bounds the wait for --scheduler ADDRESS" in _one_line(capsys)
    assert main(["fit", str(log), "--states", "2", "--backend", "dask", "--scheduler-timeout", "0"]) == 2
    assert "must be a number > 0" in _one_line(capsys)


def test_more_workers_than_the_machine_holds_are_refused_before_any_starts(log, tmp_path, capsys):
    cores = dask_backend.cpu_cores()
    argv = _dask_fit(log, tmp_path / "m.json")
    assert main([*argv, "--workers", str(cores + 1000)]) == 1
    err = _one_line(capsys)
    assert f"--workers {cores + 1000}: this machine has {cores} cores" in err and "use --workers" in err
    with pytest.raises(ValueError, match="room for at most 2 worker processes"):  # memory: 2 x 256 MiB
        dask_backend.check_local_workers(3, cores=64, memory=600 << 20)
    dask_backend.check_local_workers(2, cores=2, memory=1 << 30)


def test_quiet_silences_distributed_s_log_lines(silent_server):
    logger = logging.getLogger("distributed")
    level = logger.level
    try:
        with pytest.raises(ValueError, match="no Dask scheduler answered"):
            dask_backend.connect(f"tcp://{silent_server}", timeout=0.2, quiet=True)
        assert logger.getEffectiveLevel() > logging.CRITICAL
    finally:
        logger.setLevel(level)


def test_an_s3_end_point_that_never_answers_is_one_line_naming_the_url(silent_server, monkeypatch, capsys):
    pytest.importorskip("s3fs")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{silent_server}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("LDHMM_NETWORK_TIMEOUT", "0.25")
    assert main(["data", "info", "s3://silent-bucket/parts"]) == 1
    err = _one_line(capsys)
    assert "s3://silent-bucket/parts" in err and "did not answer within 0.25 s" in err, err
    assert main(["data", "info", "s3://KEY:TOPSECRET@silent-bucket/parts"]) == 1
    err = _one_line(capsys)
    assert "TOPSECRET" not in err and "s3://***@silent-bucket" in err, err
    monkeypatch.setenv("LDHMM_NETWORK_TIMEOUT", "soon")
    assert main(["data", "info", "s3://silent-bucket/parts"]) == 1
    assert "LDHMM_NETWORK_TIMEOUT: 'soon' is not a number of seconds" in _one_line(capsys)
