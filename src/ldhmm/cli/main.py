"""The ``ldhmm`` command: the parser tree and the entry point.

Sub-commands: ``data`` (``fetch``, ``info``, ``export``), ``compare``, ``classify``, ``timing``,
``hinton``, ``next-event``, and for a user's own logs ``fit``, ``score``, ``posterior``,
``predict``, ``decode`` (the table :data:`ldhmm.cli.commands.COMMANDS`); ``ldhmm COMMAND
--help`` describes each. Only the module of the command that runs is imported, so that
``ldhmm --help`` loads none of torch, Pyro, pandas or the experiments, and ``ldhmm score``
none of the experiments, matplotlib or Dask. Errors (bad arguments, a missing data
directory, a bad file, an output directory of another configuration) print one line
``ldhmm COMMAND: error: ...`` on stderr and return a non-zero exit code (2 for bad arguments,
1 otherwise), without a traceback; set ``LDHMM_DEBUG=1`` to get the traceback.

Ctrl-C (``KeyboardInterrupt``) prints one line and returns 130: for a command that runs tasks,
``ldhmm COMMAND: interrupted; N of M tasks are saved in OUT: run the same command again to
resume (OUT/command.sh): cd DIR && LDHMM_DATA=... COMMAND LINE``
(:class:`ldhmm.data.resume.RunInterrupted`; the worker processes of ``--jobs`` are
stopped first; the working directory and the ``LDHMM_*`` variables are part of the command).
A Ctrl-C that a run does not act on within seconds (its main thread inside compiled code) ends
it anyway, with the same kind of line (:mod:`ldhmm.cli.interrupts`; the run itself:
:mod:`ldhmm.cli.running`).
Two runs with the same ``--out`` are refused by the output-directory lock
(:class:`ldhmm.experiments.tasks.OutputLockedError`, one error line).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .commands import COMMANDS, command_help

__all__ = ["main", "build_parser", "add_command"]


class OneLineErrorParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr (exit code 2)."""

    def error(self, message):
        one_line = " ".join(str(message).split())
        self.exit(2, f"{self.prog}: error: {one_line} (see {self.prog} --help)\n")


def _cli_module(name: str):
    """The module ``ldhmm.cli.<name>``, imported now. The one place where the command line
    imports on demand (why: start-up time): a command's module, and :mod:`ldhmm.cli.running`,
    load torch, pandas or the experiments, which listing the commands does not need."""
    return importlib.import_module(f"{__package__}.{name}")


def add_command(subparsers, name: str, module) -> argparse.ArgumentParser:
    """The parser of the sub-command ``name`` of ``ldhmm``, built from its module of
    :mod:`ldhmm.cli`: the description ``module.DESCRIPTION``, the options and the handler that
    ``module.add_arguments(p)`` adds (``func``: ``run(args) -> int``); its one-line help is the
    command table's (:data:`ldhmm.cli.commands.COMMANDS`)."""
    p = subparsers.add_parser(name, help=command_help(name), description=module.DESCRIPTION)
    module.add_arguments(p)
    p.set_defaults(default_of=p.get_default)  # what options_given compares with
    return p


def build_parser(command: str | None = None, *, all_commands: bool = True) -> argparse.ArgumentParser:
    """The ``ldhmm`` parser: one sub-command per entry of :data:`ldhmm.cli.commands.COMMANDS`.

    Each command's parser is built from its module (:func:`add_command`); the module is imported
    for ``command`` and, with ``all_commands``, for every command. The others are listed with their
    one-line help only (what ``ldhmm --help`` shows), so that they import nothing.
    """
    parser = OneLineErrorParser(
        prog="ldhmm",
        description="Latent Dirichlet HMMs for databases of sequences: data, the paper's experiments, "
        "and fit/score/posterior/predict/decode on a user's own logs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    for name, (module, help_line) in COMMANDS.items():
        if all_commands or name == command:
            add_command(sub, name, _cli_module(module))
        else:
            sub.add_parser(name, help=help_line)
    return parser


def main(argv=None) -> int:
    """Entry point of the ``ldhmm`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv else None, all_commands=False)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    explicit = argv != sys.argv[1:]  # called as main([...]): show it as the ldhmm command
    return _cli_module("running").run_command(args, argv, explicit)
