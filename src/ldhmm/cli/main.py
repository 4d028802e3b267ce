"""The ``ldhmm`` command: the parser tree and the entry point.

Sub-commands: ``data`` (``fetch``, ``info``), ``compare``, ``classify``, ``timing``, ``hinton``,
and for a user's own logs ``fit``, ``score``, ``posterior``, ``predict``, ``decode``;
``ldhmm COMMAND --help`` describes each. Errors (bad arguments, a missing data directory, a
bad file, an output directory of another configuration) print one line
``ldhmm COMMAND: error: ...`` on stderr and return a non-zero exit code (2 for bad arguments,
1 otherwise), without a traceback; set ``LDHMM_DEBUG=1`` to get the traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import classify, compare, data, decode, fit, hinton, next_event, posterior, predict, score, timing

__all__ = ["main", "build_parser"]


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
        metavar="{data,compare,classify,timing,hinton,next-event,fit,score,posterior,predict,decode}",
    )
    data.register(sub)
    compare.register(sub)
    classify.register(sub)
    timing.register(sub)
    hinton.register(sub)
    next_event.register(sub)
    for command in (fit, score, posterior, predict, decode):
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
    try:
        code = func(args)
    except KeyboardInterrupt:
        print(
            f"{command}: interrupted; finished tasks are saved, run the same command again to resume",
            file=sys.stderr,
        )
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
