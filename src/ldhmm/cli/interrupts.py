"""Ctrl-C stops a command within seconds, even inside compiled code.

Python turns Ctrl-C (SIGINT) into ``KeyboardInterrupt`` only between two bytecodes of the main
thread: a run whose main thread sits in a long compiled call (a numba kernel over a large
bucket, which releases the GIL) would finish that call before it noticed. :func:`stop_watchdog`
makes the signal wake a watchdog thread at once (``signal.set_wakeup_fd``): when the command has
not ended :data:`GRACE_SECONDS` after a Ctrl-C, the watchdog prints the one line of an
interrupted run (what is saved, the whole invocation that resumes) and ends the process with
exit code 130. That is safe for every task-running command: each result file is written
atomically and the output-directory lock is released by the kernel, so the rerun resumes to
exactly the results of an uninterrupted run (as after a SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable

__all__ = ["GRACE_SECONDS", "stop_watchdog"]

#: Seconds a command gets after Ctrl-C to stop by itself (``KeyboardInterrupt``, workers stopped).
GRACE_SECONDS = 10.0


@contextlib.contextmanager
def stop_watchdog(line: Callable[[], str], grace: float = GRACE_SECONDS):
    """Inside the block, a Ctrl-C that the main thread has not acted on within ``grace``
    seconds prints ``line()`` on stderr and ends the process (exit code 130).

    A no-op outside the main thread or where another wakeup file descriptor is installed (an
    event loop's): the block then runs as it would without it.
    """
    try:
        read_fd, write_fd = os.pipe()
    except OSError:
        yield
        return
    os.set_blocking(write_fd, False)
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # not the main thread
        os.close(read_fd), os.close(write_fd)
        yield
        return
    if previous != -1:  # somebody else listens: leave it to them
        signal.set_wakeup_fd(previous)
        os.close(read_fd), os.close(write_fd)
        yield
        return
    done = threading.Event()

    def watch():
        while not done.is_set():
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            if not data:  # the block ended: the pipe is closed
                return
            if signal.SIGINT in data and not done.wait(grace):
                print(line(), file=sys.stderr, flush=True)
                os._exit(130)

    thread = threading.Thread(target=watch, name="ldhmm-ctrl-c-watchdog", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        signal.set_wakeup_fd(-1)
        os.close(write_fd)  # the watchdog's read returns b"" and it ends
        thread.join(1.0)
        os.close(read_fd)
