"""The ``ldhmm`` console script: :func:`ldhmm.cli.main` behind a guard that makes Ctrl-C one
line at every moment, the first seconds included.

``ldhmm.cli`` imports torch, pandas and every sub-command before :func:`ldhmm.cli.main` can
catch anything; a Ctrl-C then would print a long traceback. This module imports nothing
heavy at its own import (``ldhmm`` is lazy), so the console script's own ``import`` of it
cannot be interrupted halfway, and :func:`main` imports the command line inside the guard.
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["main"]


def main(argv=None) -> int:
    """Run the ``ldhmm`` command; a Ctrl-C while it loads prints ``ldhmm: interrupted`` and
    returns 130 (once loaded, :func:`ldhmm.cli.main` reports its own interruptions)."""
    try:
        # imported here, not at the top: the import is what a Ctrl-C may interrupt
        run = importlib.import_module("ldhmm.cli.main").main
    except KeyboardInterrupt:
        print("ldhmm: interrupted", file=sys.stderr, flush=True)
        return 130
    try:
        return run(argv)
    except KeyboardInterrupt:  # between the parse and the command's own guard
        print("ldhmm: interrupted", file=sys.stderr, flush=True)
        return 130
