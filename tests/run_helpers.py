"""Helpers of the tests that start, watch and kill real runs (``tests/test_interrupted_runs.py``,
``tests/test_cluster_data.py``) and compare their results (``tests/test_cluster_tasks.py``).

Loaded by file (``importlib``), as ``tests/reference_*.py`` are: not a test module.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pandas as pd

__all__ = ["task_files", "wait_until", "session_processes", "without_seconds"]


def task_files(out: Path) -> list[Path]:
    """The saved task records of a run's ``--out`` directory, sorted."""
    folder = out / "tasks"
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def wait_until(proc: subprocess.Popen, condition, timeout: float = 180.0) -> bool:
    """Poll ``condition()`` until true (True) or the process ended (False); an AssertionError
    after ``timeout`` seconds (a run that starts on a loaded machine: imports, workers)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if proc.poll() is not None:
            return condition()
        time.sleep(0.005)
    raise AssertionError(f"the run did not get there in {timeout:.0f} s")


def session_processes(sid: int) -> list[int]:
    """Live processes of session ``sid`` (Linux /proc; empty elsewhere)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 3 and fields[0] != "Z" and int(fields[3]) == sid:
            found.append(int(entry.name))
    return found


def without_seconds(frame: pd.DataFrame) -> pd.DataFrame:
    """A ``folds.csv`` frame without its timing columns, rows in (model, K, fold) order."""
    cols = [c for c in frame.columns if "seconds" not in c]
    return frame[cols].sort_values(["model", "K", "fold"]).reset_index(drop=True)
