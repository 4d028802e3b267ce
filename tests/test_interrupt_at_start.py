"""Ctrl-C while the ``ldhmm`` command is still loading (torch, pandas, every sub-command): one
line, exit 130, never a traceback (``ldhmm.console``, the console script's entry point)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]

# KeyboardInterrupt raised where the import of torch would run: a Ctrl-C at that moment, exactly
_AT_TORCH = """
import builtins, sys
real = builtins.__import__
def interrupted(name, *args, **kwargs):
    if name == "torch" or name.startswith("torch."):
        raise KeyboardInterrupt
    return real(name, *args, **kwargs)
builtins.__import__ = interrupted
from ldhmm.console import main
sys.exit(main(sys.argv[1:]))
"""


# the ldhmm command, after a line that says the interpreter has started
_STARTED = "import sys; print(flush=True); from ldhmm.console import main; sys.exit(main())"


def _env():
    return {**os.environ, "NUMBA_NUM_THREADS": "1", "LDHMM_DEBUG": ""}


def test_the_console_script_is_the_guarded_entry_point():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["ldhmm"] == "ldhmm.console:main"


def test_ctrl_c_during_the_imports_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _AT_TORCH, "fit", str(tmp_path / "x.txt"), "--states", "2"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "ldhmm: interrupted\n"


@pytest.mark.parametrize("after", [1.0, 3.0])
def test_a_real_sigint_at_some_moment_is_one_line(tmp_path, after):
    """Whatever it interrupts (the imports, the parse, the fit), at most one line, no
    traceback; the moment depends on the machine's speed, the outcome must not. (A Ctrl-C while
    the interpreter itself starts, before any ldhmm code runs, is Python's own.)"""
    data = tmp_path / "log.txt"
    data.write_text("a b c a b\nb c a\n" * 50)
    proc = subprocess.Popen(
        [sys.executable, "-c", _STARTED,
         "fit", str(data), "--states", "2", "--restarts", "50", "--out", str(tmp_path / "m.json"), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )  # fmt: skip
    proc.stdout.readline()  # the interpreter has started (a Ctrl-C before that is Python's own)
    time.sleep(after)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    if proc.returncode == 0:
        pytest.skip("the fit finished before the signal")
    assert proc.returncode == 130, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("ldhmm"), err
