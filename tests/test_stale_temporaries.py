"""A save killed before its rename leaves its temporary file; the next save of the same file
removes it, and never the temporary file of a writer still alive (``data/atomic.py``)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

import numpy as np

from ldhmm import LDHMM
from ldhmm.data.atomic import TEMPORARY_NAME, remove_stale_temporaries

_KILLED_WRITER = """
import os, signal, sys
from ldhmm.data.atomic import write_atomically
def write(f):
    f.write("{half a model")
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)  # the moment before the rename
write_atomically(sys.argv[1], write)
"""


def _temporaries(d):
    return sorted(n for n in os.listdir(d) if TEMPORARY_NAME.match(n))


def _age(path, seconds=3600):
    t = os.stat(path).st_mtime - seconds
    os.utime(path, (t, t))


def test_the_next_save_removes_what_a_killed_save_left(tmp_path):
    target = tmp_path / "model.json"
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(target)], env={**os.environ})
    assert proc.returncode == -9
    left = _temporaries(tmp_path)
    assert len(left) == 1 and left[0].startswith(".model.json.") and not target.exists()
    _age(tmp_path / left[0])
    # a live writer's temporary file (its flock held) and another file's stay
    live = tmp_path / ".model.json.live1234.tmp"
    other = tmp_path / ".other.json.abcd1234.tmp"
    for p in (live, other):
        p.write_text("{")
        _age(p)
    held = os.open(live, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        model = LDHMM(2, seed=0, max_iter=2).fit([np.array([0, 1, 2, 1]), np.array([2, 1, 0])])
        model.save(target)
        assert _temporaries(tmp_path) == sorted([live.name, other.name])
        assert LDHMM.load(target).n_states == 2
    finally:
        os.close(held)
    # once its writer is gone, the next save removes it too
    model.save(target)
    assert _temporaries(tmp_path) == [other.name]


def test_a_young_unlocked_temporary_file_is_left_alone(tmp_path):
    young = tmp_path / ".scores.csv.young123.tmp"
    young.write_text("x")  # its writer may be between mkstemp and flock
    assert remove_stale_temporaries(tmp_path / "scores.csv") == []
    _age(young)
    assert remove_stale_temporaries(tmp_path / "scores.csv") == [young.name]
