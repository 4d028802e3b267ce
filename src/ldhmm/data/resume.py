"""What an interrupted run says and writes: the interruption that counts saved tasks, and the
command line that resumes it (``OUT/command.sh``).

Light (the standard library and :mod:`ldhmm.data.atomic`), below the models and the experiments,
so that every ``ldhmm`` command can report a Ctrl-C without importing the experiments;
:mod:`ldhmm.experiments.tasks` raises :class:`RunInterrupted` and re-exports these names.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from .atomic import atomic_write_text

__all__ = ["RunInterrupted", "command_line", "ENV_PREFIX", "invocation", "write_resume_script"]


class RunInterrupted(KeyboardInterrupt):
    """A ``KeyboardInterrupt`` during :func:`run_tasks`: ``saved`` of ``total`` tasks are in ``out``."""

    def __init__(self, out, saved: int, total: int):
        super().__init__(f"interrupted; {saved} of {total} tasks are saved in {out}")
        self.out, self.saved, self.total = Path(out), int(saved), int(total)


def command_line(args=None, program: str | None = None) -> str:
    """The command line of this process as a user would type it again (shell-quoted).

    ``args``: the arguments after the program (default ``sys.argv[1:]``); ``program``: what
    runs them (default: ``python -m PACKAGE`` for a module run, ``python`` being
    ``sys.executable`` unless that is the first ``python`` on the PATH; the script's name for
    a console script found on the PATH; else ``sys.argv[0]``).
    """
    args = [str(a) for a in (sys.argv[1:] if args is None else args)]
    if program is not None:
        return " ".join([program, shlex.join(args)]).strip()
    head = sys.argv[0] if sys.argv else ""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and getattr(spec, "name", None):
        python = sys.executable or "python"
        found = shutil.which("python")
        if found and os.path.abspath(found) == os.path.abspath(python):
            python = "python"
        return shlex.join([python, "-m", spec.name.removesuffix(".__main__"), *args])
    name = os.path.basename(head)
    found = shutil.which(name) if name else None
    if found and os.path.abspath(found) == os.path.abspath(head):
        head = name
    return shlex.join([head, *args]) if head else shlex.join(args)


#: The environment variables of ldhmm (data directory, memory limit, offline switch): a command
#: that resumes a run sets them as the run had them.
ENV_PREFIX = "LDHMM_"


def invocation(args=None, program: str | None = None, environ=None, cwd=None) -> str:
    """The whole invocation, to type again anywhere: ``cd CWD && VAR=VALUE ... COMMAND LINE``.

    :func:`command_line` (``args``, ``program``) after the working directory (relative paths
    in the arguments, the default ``results/`` folder) and every ``LDHMM_*`` variable set in
    ``environ`` (default ``os.environ``; ``LDHMM_DEBUG`` aside): the data directory
    ``LDHMM_DATA`` above all, without which a resumed run reads other data.
    """
    environ = os.environ if environ is None else environ
    cwd = os.getcwd() if cwd is None else str(cwd)
    env = [
        f"{k}={shlex.quote(str(v))}"
        for k, v in sorted(environ.items())
        if k.startswith(ENV_PREFIX) and k != "LDHMM_DEBUG"
    ]
    return " ".join([f"cd {shlex.quote(cwd)} &&", *env, command_line(args, program)])


def write_resume_script(out, line: str) -> Path | None:
    """``OUT/command.sh``: the invocation that resumes the run in ``out`` (``sh OUT/command.sh``);
    None when it cannot be written (the run's results are what matters)."""
    path = Path(out) / "command.sh"
    try:
        atomic_write_text(path, f"#!/bin/sh\n# resumes the interrupted run in this folder\n{line}\n")
    except OSError:
        return None
    return path
