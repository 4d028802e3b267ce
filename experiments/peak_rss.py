"""Peak resident memory of a region of code, measured in this process (Linux).

Used by the benchmarks (``experiments/bench.py``, ``experiments/bench_memory.py``) and the test
that the memory estimates of :mod:`ldhmm.models.memory` bound what a command needs.
"""

from __future__ import annotations

import ctypes
import gc
import math
import sys

__all__ = ["PeakRSS"]


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
