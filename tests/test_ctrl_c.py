"""Ctrl-C ends a command within seconds even while its main thread is inside compiled code
(:mod:`ldhmm.cli.interrupts`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

# A command whose "run" is one long compiled call that releases the GIL: Python cannot raise
# KeyboardInterrupt until it returns (about a minute), the watchdog ends the process instead.
SCRIPT = textwrap.dedent(
    """
    import signal
    import sys
    # as a terminal starts a command: SIGINT neither ignored nor blocked, whatever the test
    # process that started this one had (both are inherited across exec, and either would make
    # the Ctrl-C below never arrive)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from numba import njit
    import importlib
    from ldhmm.cli import interrupts, next_event, running
    cli_main = importlib.import_module("ldhmm.cli.main")

    @njit(nogil=True, cache=False)
    def spin(n):
        s = 0.0
        for i in range(n):
            s += (i % 7) * 1e-9
        return s

    spin(10)  # compiled before the test's clock starts
    running.stop_watchdog = lambda line: interrupts.stop_watchdog(line, grace=1.0)

    def stuck(args):
        print("ready", flush=True)
        return int(spin(10**12) < 0)

    next_event.run_next_event = stuck
    sys.exit(cli_main.main(["next-event", "--dataset", "synthetic", "--out", sys.argv[1]]))
    """
)


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="POSIX signals")
def test_ctrl_c_inside_compiled_code_ends_the_command(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NUMBA_NUM_THREADS": "1"},
    )
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(60)  # the spin alone runs for minutes
        except subprocess.TimeoutExpired:
            proc.kill()
            # what to look at if it ever hangs again: the child's words and the parent's SIGINT
            blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
            pytest.fail(
                f"still running 60 s after SIGINT; stderr: {proc.communicate()[1]!r}; the test "
                f"process's SIGINT handler {signal.getsignal(signal.SIGINT)!r}, blocked {blocked}"
            )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read().strip().splitlines()
    assert code == 130
    assert len(err) == 1 and err[0].startswith("ldhmm next-event: interrupted (stopped inside compiled code)")
    assert "run the same command again to resume" in err[0]
