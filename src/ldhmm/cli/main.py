"""The ``ldhmm`` command: the parser tree and the entry point.

Sub-commands: ``data`` (``fetch``, ``info``), ``compare``, ``classify``, ``timing``, ``hinton``,
and for a user's own logs ``fit``, ``score``, ``posterior``, ``predict``, ``decode``;
``ldhmm COMMAND --help`` describes each. Errors (bad arguments, a missing data directory, a
bad file, an output directory of another configuration) print one line
``ldhmm COMMAND: error: ...`` on stderr and return a non-zero exit code (2 for bad arguments,
1 otherwise), without a traceback; set ``LDHMM_DEBUG=1`` to get the traceback.

Ctrl-C (``KeyboardInterrupt``) prints one line and returns 130: for a command that runs tasks,
``ldhmm COMMAND: interrupted; N of M tasks are saved in OUT: run the same command again to
resume (OUT/command.sh): cd DIR && LDHMM_DATA=... COMMAND LINE``
(:class:`ldhmm.experiments.tasks.RunInterrupted`; the worker processes of ``--jobs`` are
stopped first; the working directory and the ``LDHMM_*`` variables are part of the command).
A Ctrl-C that a run does not act on within seconds (its main thread inside compiled code) ends
it anyway, with the same kind of line (:mod:`ldhmm.cli.interrupts`).
Two runs with the same ``--out`` are refused by the output-directory lock
(:class:`ldhmm.experiments.tasks.OutputLockedError`, one error line).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings

from ..data import EventOrderWarning
from ..experiments.tasks import RunInterrupted, invocation, write_resume_script
from ..models.memory import max_memory_limit
from . import (
    classify,
    compare,
    data,
    decode,
    fit,
    hinton,
    next_event,
    posterior,
    predict,
    report,
    score,
    timing,
)
from .interrupts import stop_watchdog

__all__ = ["main", "build_parser", "interrupted_line"]

#: the commands whose runs resume from their output directory
RESUMABLE = ("compare", "classify", "timing", "hinton", "next-event")


class OneLineErrorParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr (exit code 2)."""

    def error(self, message):
        one_line = " ".join(str(message).split())
        self.exit(2, f"{self.prog}: error: {one_line} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``ldhmm`` parser: one sub-command per module of :mod:`ldhmm.cli`."""
    parser = OneLineErrorParser(
        prog="ldhmm",
        description="Latent Dirichlet HMMs for databases of sequences: data, the paper's experiments, "
        "and fit/score/posterior/predict/decode on a user's own logs.",
    )
    sub = parser.add_subparsers(
        dest="command",
        metavar="{data,compare,classify,timing,hinton,next-event,fit,score,posterior,predict,decode,report}",
    )
    data.register(sub)
    compare.register(sub)
    classify.register(sub)
    timing.register(sub)
    hinton.register(sub)
    next_event.register(sub)
    for command in (fit, score, posterior, predict, decode, report):
        command.register(sub)
    return parser


def main(argv=None) -> int:
    """Entry point of the ``ldhmm`` console script; returns the exit code."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    command = f"ldhmm {args.command}" if getattr(args, "command", None) else "ldhmm"
    explicit = argv != sys.argv[1:]  # called as main([...]): show it as the ldhmm command
    try:
        # every command checks its estimates against --max-memory (the limit before it comes
        # back after the command); a Ctrl-C the run does not act on within seconds (inside
        # compiled code) ends it anyway
        with (
            max_memory_limit(getattr(args, "max_memory", None)),
            one_line_warnings(command),
            stop_watchdog(lambda: interrupted_line(command, None, argv, explicit)),
        ):
            code = func(args)
    except KeyboardInterrupt as err:
        print(interrupted_line(command, err, argv, explicit), file=sys.stderr, flush=True)
        return 130
    except Exception as err:  # one line, no traceback
        if os.environ.get("LDHMM_DEBUG"):
            raise
        message = str(err) or type(err).__name__
        if isinstance(err, KeyError):
            message = f"missing {message}"
        one_line = " ".join(message.split())
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
                print(f"{command}: warning: {' '.join(str(message).split())}", file=sys.stderr)
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
        return f"{command}: interrupted; {err.saved} of {err.total} tasks are saved in {err.out}: {resume}"
    how = "interrupted" if err is not None else "interrupted (stopped inside compiled code)"
    if command.split(" ", 1)[-1] in RESUMABLE:
        return f"{command}: {how}; finished tasks are saved: {resume}"
    return f"{command}: {how}"
