"""The lock of a directory a run writes into: ``DIR/.lock``, held while the run uses ``DIR``.

One lock for every directory ldhmm resumes from: an experiment's ``--out``
(:func:`ldhmm.experiments.tasks.prepare_out_dir`), a fit's ``--checkpoint DIR``
(:class:`ldhmm.inference.checkpoint.FitCheckpoint`) and a fit along K's ``--out DIR``
(:mod:`ldhmm.cli.fit_path`). Two runs on one directory would mix their files (the second
resuming the first one's half-written fit); the second is refused in one line naming the
directory, the holder and the way out, before it writes anything.

:func:`acquire` takes an exclusive ``fcntl.flock`` on ``DIR/.lock`` (an open file descriptor:
the kernel releases it when the process ends, however it ends, SIGKILL included, so a lock is
never stale) and writes the holder's pid and command line into the file; :func:`release` lets
it go (the file stays, emptied: its presence means nothing, only the ``flock`` does). Within a
process the lock is re-entrant (counted holds). The file is opened close-on-exec and never
through a symbolic link (``O_NOFOLLOW``: a link planted at ``DIR/.lock`` must not make the lock
truncate the file it points to). Where ``fcntl`` is missing (Windows), or the file system has no
``flock``, there is no lock.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import threading
import time

from .terminal_text import shown

try:
    import fcntl
except ImportError:  # not POSIX (Windows): no directory lock (module docstring)
    fcntl = None

__all__ = ["LOCK_NAME", "DirectoryLockedError", "acquire", "release", "locked_directory"]

#: the lock file of a directory (module docstring)
LOCK_NAME = ".lock"


class DirectoryLockedError(ValueError):
    """Another process is running with the same directory."""


_GUARD = threading.Lock()
_HELD: dict[str, list] = {}  # real path of DIR -> [file descriptor, holds]


def _this_command() -> str:
    """This process's command line, for the lock file (the program's base name, its arguments)."""
    argv = list(sys.argv) or [""]
    return " ".join([os.path.basename(argv[0]), *argv[1:]]).strip()


def _holder_of(fd: int) -> str:
    """``pid N: COMMAND`` from an open lock file (waits a moment for a holder that has just
    taken the lock and not yet written it)."""
    for _ in range(10):
        try:
            text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        except OSError:
            text = ""
        lines = text.splitlines()
        if len(lines) >= 2 and lines[0].strip().isdigit():
            return f"pid {lines[0].strip()}: {shown(' '.join(lines[1].split()))}"
        time.sleep(0.05)
    return "pid unknown"


def acquire(directory, way_out: str = "use another --out", command: str | None = None) -> tuple[str, bool]:
    """Take (or, held by this process already, re-enter) the lock of the existing ``directory``.

    Parameters
    ----------
    directory : str or Path
    way_out : str
        What the refusal tells the user to do besides waiting ("use another --out").
    command : str, optional
        The command line written into the lock file (default: this process's ``sys.argv``).

    Returns
    -------
    (key, fresh)
        ``key`` for :func:`release`; ``fresh`` when this call took the ``flock``.

    Raises
    ------
    DirectoryLockedError
        ``"{directory} is in use by another ldhmm run (pid N: COMMAND); wait for it or {way_out}"``.
    """
    key = os.path.realpath(directory)
    if fcntl is None:
        return key, False
    with _GUARD:
        held = _HELD.get(key)
        if held is not None:
            held[1] += 1
            return key, False
        lock_path = os.path.join(key, LOCK_NAME)
        try:
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
            fd = os.open(lock_path, flags, 0o644)
        except OSError as err:
            if err.errno != errno.ELOOP:
                raise
            raise DirectoryLockedError(
                f"{shown(lock_path)} is a symbolic link; remove it (the run's lock file is never followed)"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                holder = _holder_of(fd)
                os.close(fd)
                raise DirectoryLockedError(
                    f"{shown(directory)} is in use by another ldhmm run ({holder}); wait for it or {way_out}"
                ) from None
            os.close(fd)  # a file system without flock: run unlocked
            return key, False
        try:
            os.ftruncate(fd, 0)
            line = " ".join((command if command is not None else _this_command()).split())
            # a name in the command line may hold bytes that are not UTF-8: written back as they were
            os.pwrite(fd, f"{os.getpid()}\n{line}\n".encode(errors="surrogateescape"), 0)
        except OSError:
            pass
        _HELD[key] = [fd, 1]
        return key, True


def release(key: str) -> None:
    """Give up one hold of the lock :func:`acquire` returned ``key`` for (the ``flock`` goes with
    the last hold, and the lock file is emptied: no stale pid in it)."""
    with _GUARD:
        held = _HELD.get(key)
        if held is None:
            return
        held[1] -= 1
        if held[1] > 0:
            return
        del _HELD[key]
        fd = held[0]
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        os.close(fd)  # releases the flock


@contextlib.contextmanager
def locked_directory(directory, way_out: str = "use another --out", command: str | None = None):
    """Hold the lock of the existing ``directory`` inside the ``with`` block (:func:`acquire`)."""
    key, _ = acquire(directory, way_out, command)
    try:
        yield
    finally:
        release(key)
