"""How ``ldhmm`` runs a parsed command: the memory limit, data warnings as one line, and the one
line of a Ctrl-C (what is saved and the command that resumes).

Imported by :func:`ldhmm.cli.main.main` once a command is chosen (it needs the experiments'
run records, so ``ldhmm --help`` does not load it).
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings

from ..data import EventOrderWarning
from ..data.resume import RunInterrupted, invocation, write_resume_script
from ..data.terminal_text import shown, without_credentials
from ..models.memory import max_memory_limit
from .interrupts import stop_watchdog

__all__ = ["run_command", "interrupted_line", "one_line_warnings", "DATA_WARNINGS", "RESUMABLE"]

#: the commands whose runs resume from their output directory
RESUMABLE = ("compare", "classify", "timing", "hinton", "next-event")


def run_command(args, argv: list[str], explicit: bool) -> int:
    """Run the handler of the parsed ``args``; the exit code. Errors print one line
    ``ldhmm COMMAND: error: ...`` (1), a Ctrl-C one line with how to resume (130)."""
    command = f"ldhmm {args.command}" if getattr(args, "command", None) else "ldhmm"
    try:
        # every command checks its estimates against --max-memory (the limit before it comes
        # back after the command); a Ctrl-C the run does not act on within seconds (inside
        # compiled code) ends it anyway
        with (
            max_memory_limit(getattr(args, "max_memory", None)),
            one_line_warnings(command),
            stop_watchdog(lambda: interrupted_line(command, None, argv, explicit)),
        ):
            code = args.func(args)
    except KeyboardInterrupt as err:
        print(interrupted_line(command, err, argv, explicit), file=sys.stderr, flush=True)
        return 130
    except Exception as err:  # one line, no traceback
        if os.environ.get("LDHMM_DEBUG"):
            raise
        message = str(err) or type(err).__name__
        if isinstance(err, KeyError):
            message = f"missing {message}"
        # a user's string may hold terminal escapes, a URL credentials
        one_line = without_credentials(shown(" ".join(message.split())))
        print(f"{command}: error: {one_line}", file=sys.stderr)
        return 1
    return int(code or 0)


#: The warnings about a user's data that a command prints as one line ``COMMAND: warning: ...``.
DATA_WARNINGS = (EventOrderWarning,)


@contextlib.contextmanager
def one_line_warnings(command: str):
    """Inside the block, :data:`DATA_WARNINGS` print as one line on stderr; every other warning
    goes where it went before."""
    with warnings.catch_warnings():
        previous = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, DATA_WARNINGS):
                print(f"{command}: warning: {shown(' '.join(str(message).split()))}", file=sys.stderr)
            else:
                previous(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


def interrupted_line(command: str, err: KeyboardInterrupt | None, argv, explicit: bool = False) -> str:
    """The one line of a Ctrl-C: what is saved where, and the whole invocation that resumes
    (working directory and ``LDHMM_*`` variables included: :func:`invocation`), also written
    to ``OUT/command.sh`` when the run's folder is known. ``err`` None: the run was ended by
    the watchdog of :mod:`ldhmm.cli.interrupts` (inside compiled code)."""
    again = invocation(argv, program="ldhmm" if explicit else None)
    if "\n" in again or "\r" in again:  # an argument with a line break: not one line
        again = ""
    resume = "run the same command again to resume" + (f": {again}" if again else "")
    if isinstance(err, RunInterrupted):
        script = write_resume_script(err.out, again) if again else None
        if script is not None:
            resume = f"run the same command again to resume ({script}): {again}"
        saved = f"{err.saved} of {err.total} tasks are saved in {err.out}"
        return shown(f"{command}: interrupted; {saved}: {resume}")
    how = "interrupted" if err is not None else "interrupted (stopped inside compiled code)"
    if command.split(" ", 1)[-1] in RESUMABLE:
        return shown(f"{command}: {how}; finished tasks are saved: {resume}")
    return f"{command}: {how}"
