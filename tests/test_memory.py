"""Sizes are checked before allocation: a one-line refusal with the estimate and the knob."""

from __future__ import annotations

import importlib
import os

import numpy as np
import pytest

from ldhmm import LDHMM
from ldhmm.cli import main
from ldhmm.experiments.datasets import synthetic_database
from ldhmm.experiments.tasks import run_tasks
from ldhmm.models import memory
from ldhmm.models.memory import MemoryEstimateError, fit_bytes, format_size, parse_size, set_max_memory


@pytest.fixture(autouse=True)
def _reset_limit(monkeypatch):
    monkeypatch.delenv(memory.MAX_MEMORY_ENV_VAR, raising=False)
    yield
    set_max_memory(None)


def test_parse_and_format_sizes():
    assert parse_size("64G") == 64 * 2**30 and parse_size("512m") == 512 * 2**20
    assert parse_size("1.5T") == int(1.5 * 2**40) and parse_size("2e9") == 2_000_000_000
    assert parse_size(1024) == 1024 and parse_size("10GiB") == 10 * 2**30
    for bad in ("", "x", "-1G", "0", "1 Q"):
        with pytest.raises(ValueError):
            parse_size(bad)
    assert format_size(61.2e9) == "61.2 GB" and format_size(12) == "12 bytes"


def test_estimate_counts_the_per_sequence_state():
    # K = 5000 on Entree's 422 sessions: the per-sequence A counts alone are 422 x 5000^2 x 8 bytes
    assert fit_bytes(5000, 7, 422, 10853, 59) > 2 * 422 * 5000**2 * 8
    assert fit_bytes(4, 7, 422, 10853, 59) < 20e6
    assert memory.machine_memory() > 2**28


def test_estimator_refuses_before_allocating():
    db = synthetic_database(40, seed=0)
    set_max_memory("2M")
    with pytest.raises(MemoryEstimateError) as info:
        LDHMM(60, seed=0, n_init=1).fit(db.sequences)
    msg = str(info.value)
    assert "K = 60" in msg and "needs about" in msg and "--max-memory" in msg and "\n" not in msg
    set_max_memory(None)
    model = LDHMM(2, seed=0, n_init=1, max_iter=3).fit(db.sequences)
    set_max_memory("200K")
    with pytest.raises(MemoryEstimateError, match="n_samples"):
        model.log_marginal_is(db.sequences, n_samples=10_000)


def test_cli_refuses_with_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "o"
    argv = ["compare", "--dataset", "synthetic", "--n-sequences", "30", "--states", "40", "--folds", "2"]
    code = main(argv + ["--jobs", "2", "--max-memory", "1M", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "--jobs" in err and "needs about" in err and not out.exists()
    code = main(
        ["hinton", "--dataset", "synthetic", "--states", "300", "--max-memory", "10M", "--out", str(out)]
    )
    err = capsys.readouterr().err
    assert code == 1 and "K = 300" in err and "--max-memory" in err
    code = main(["hinton", "--dataset", "synthetic", "--max-memory", "lots", "--out", str(out)])
    assert code == 2 and "memory size" in capsys.readouterr().err


def test_a_huge_symbol_id_is_named_not_allocated():
    with pytest.raises(ValueError, match="1099511627776") as info:
        LDHMM(4, seed=0).fit([np.array([0, 1, 2**40])])
    assert "densely" in str(info.value) and "n_symbols" in str(info.value)


@pytest.mark.parametrize(
    "ids, named",
    [
        (np.array([0, 1, 2**63], dtype=np.uint64), "9223372036854775808"),
        (np.array([0.0, 1.0, 1e20]), "100000000000000000000"),
    ],
)
def test_ids_beyond_int64_are_named_not_wrapped_to_negative(ids, named):
    """uint64 or float ids over 2**63 would wrap to negative int64 ids in the cast."""
    with pytest.raises(ValueError, match=named) as info:
        LDHMM(2, seed=0).fit([ids, np.array([0, 1])])
    assert "negative" not in str(info.value) and "densely" in str(info.value)


def test_the_largest_int64_id_as_uint64_is_not_called_over_2_63():
    """2**63 - 1 fits in int64 (as a float it would round up to 2**63): it reaches the
    vocabulary-size check, which names it, not the over-2**63 one."""
    with pytest.raises(ValueError, match="far beyond") as info:
        LDHMM(2, seed=0).fit([np.array([0, 2**63 - 1], dtype=np.uint64), np.array([0, 1])])
    assert "9223372036854775807" in str(info.value) and "over 2**63" not in str(info.value)


def test_set_max_memory_leaves_the_environment_alone(monkeypatch):
    before = dict(os.environ)
    set_max_memory("3G")
    assert memory.memory_limit() == 3 * 2**30 and memory.max_memory_override() == 3 * 2**30
    assert dict(os.environ) == before
    set_max_memory(None)
    assert memory.max_memory_override() is None and dict(os.environ) == before
    monkeypatch.setenv(memory.MAX_MEMORY_ENV_VAR, "5G")  # a user's setting still counts
    assert memory.memory_limit() == 5 * 2**30
    set_max_memory("1G")  # and the explicit override wins over it
    assert memory.memory_limit() == 2**30 and os.environ[memory.MAX_MEMORY_ENV_VAR] == "5G"
    monkeypatch.setenv(memory.MAX_MEMORY_ENV_VAR, "lots")
    set_max_memory(None)
    with pytest.raises(ValueError, match=memory.MAX_MEMORY_ENV_VAR):
        memory.memory_limit()
    with pytest.raises(ValueError, match="less than one byte"):
        parse_size("0.5")


_PROBE = """
import os

from ldhmm.models.memory import MAX_MEMORY_ENV_VAR, memory_limit


def probe(task, payload):
    return {"limit": memory_limit(), "env": os.environ.get(MAX_MEMORY_ENV_VAR), "pid": os.getpid()}
"""


def test_the_limit_reaches_worker_processes_as_an_argument(tmp_path, monkeypatch):
    # a task function the spawned workers can import: spawn passes this process's sys.path on
    (tmp_path / "memory_probe_module.py").write_text(_PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = importlib.import_module("memory_probe_module").probe
    set_max_memory("3G")
    before = dict(os.environ)
    tasks = [{"key": f"t{i}"} for i in range(2)]
    records, errors = run_tasks(tasks, probe, None, tmp_path / "out", "digest", jobs=2, quiet=True)
    assert not errors and len(records) == 2
    assert {r["pid"] for r in records}.isdisjoint({os.getpid()})  # ran in worker processes
    assert all(r["limit"] == 3 * 2**30 and r["env"] is None for r in records)
    assert dict(os.environ) == before
