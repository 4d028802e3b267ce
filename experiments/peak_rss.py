"""Peak resident memory of a region of code, measured in this process (Linux).

Used by the benchmarks (``benchmarks/estep_vs_hmmlearn.py``, ``benchmarks/memory_estimates.py``),
the test that the memory estimates of :mod:`ldhmm.models.memory` bound what a command needs
(``tests/test_memory_bound.py``, through ``benchmarks/memory_estimates.py``) and the command-line
fuzzer (``tests/fuzz_cli.py``).
"""

from __future__ import annotations

import ctypes
import gc
import math
import os
import sys
import threading

__all__ = ["PeakRSS", "ChildrenPeak"]


class PeakRSS:
    """Peak resident memory of a code region, in-process.

    Linux only: ``/proc/self/clear_refs`` (write ``5``) resets the kernel's high-water mark
    ``VmHWM``; before that, freed heap memory is handed back to the OS (``gc.collect`` +
    glibc ``malloc_trim``) so that the region's allocations need fresh pages. The value is
    ``VmHWM after - VmRSS before``: the extra resident memory the region needed at its peak,
    excluding whatever was resident before (interpreter, libraries, the input data).
    """

    def __init__(self):
        self.supported = sys.platform.startswith("linux") and self._can_reset()
        try:
            self._libc = ctypes.CDLL("libc.so.6")
        except OSError:
            self._libc = None
        self.baseline_kib = 0

    @staticmethod
    def _status_kib(key: str) -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        raise KeyError(key)

    @staticmethod
    def _can_reset() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def release(self):
        gc.collect()
        if self._libc is not None:
            try:
                self._libc.malloc_trim(0)
            except AttributeError:
                pass

    def start(self):
        if not self.supported:
            return
        self.release()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        self.baseline_kib = self._status_kib("VmRSS")

    def stop_mib(self) -> float:
        if not self.supported:
            return math.nan
        return max(self._status_kib("VmHWM") - self.baseline_kib, 0) / 1024.0


def _descendants(pid: int) -> list[int]:
    """The process ids below ``pid`` (children, theirs, ...), from ``/proc``."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    children = [int(c) for c in f.read().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def _peak_kib(pid: int) -> int | None:
    """``VmHWM`` of process ``pid`` (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class ChildrenPeak:
    """The peak resident memory of the processes a region starts (``--jobs`` workers), each
    whole: a thread reads every live descendant's ``VmHWM`` every ``interval`` seconds; the
    largest sum over the live ones at one reading bounds their memory together from above (each
    counted at its own peak so far). A process that starts and ends between two readings, or
    grows after the last reading before it exits, is missed: the interval is short, and the
    workers of a process pool live to the end of the region."""

    def __init__(self, interval: float = 0.02):
        self.interval = interval
        self.peaks: dict[int, int] = {}  # KiB, per process seen
        self._most = 0
        self._stop = threading.Event()
        self._thread = None

    def _poll(self):
        me = os.getpid()
        while not self._stop.is_set():
            live = 0
            for pid in _descendants(me):
                kib = _peak_kib(pid)
                if kib is not None:
                    self.peaks[pid] = max(kib, self.peaks.get(pid, 0))
                    live += kib
            self._most = max(self._most, live)
            self._stop.wait(self.interval)

    def start(self):
        self.peaks, self._most = {}, 0
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def stop_mib(self) -> float:
        """The largest sum of the live children's peaks at one reading, MiB (0: none started)."""
        self._stop.set()
        self._thread.join()
        return self._most / 1024.0
