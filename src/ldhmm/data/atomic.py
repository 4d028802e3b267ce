"""Files written whole or not at all: a temporary file beside the target, renamed into place.

A reader, or a run killed at any moment (SIGKILL included), sees the old file or the new one,
never part of one: ``os.replace`` within one directory is atomic. The temporary file is
``.NAME.XXXXXXXX.tmp`` in the target's directory (``tempfile.mkstemp``: 8 random characters,
:data:`TEMPORARY_NAME`), so a reader listing the directory for results never takes it for
one; it is removed on any exception. The finished file gets the permissions ``open()`` would
have given it (``mkstemp`` creates its files readable by their owner only).

Every file the package writes atomically goes through :func:`write_atomically`; a writer that
builds its file in steps of its own (:func:`ldhmm.data.fetch`: download, unpack, verify)
publishes the finished temporary file with :func:`replace_into_place`.

A writer killed before its rename (SIGKILL) cannot remove its temporary file. Each writer holds
an ``flock`` on its temporary file while it writes (the kernel releases it when the writer
dies), so :func:`remove_stale_temporaries`, called by a later save of the same file, removes
exactly the temporary files no live writer holds.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "TEMPORARY_NAME",
    "replace_into_place",
    "write_atomically",
    "remove_stale_temporaries",
    "atomic_write_text",
    "atomic_write_csv",
    "atomic_write_parquet",
]

#: The names of :func:`write_atomically`'s temporary files (``tempfile.mkstemp``'s 8 random
#: characters between the target's name and ``.tmp``).
TEMPORARY_NAME = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")


def _read_umask() -> int:
    # os.umask only reads by setting: read it once, at import, before any thread could create
    # a file under the temporary mask
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def replace_into_place(tmp, path) -> None:
    """Rename the finished temporary file ``tmp`` to ``path`` (atomic; an existing ``path`` is
    replaced), with the permissions ``open()`` would have given a new file.

    Parameters
    ----------
    tmp : str or os.PathLike
        A file in ``path``'s directory (a rename across file systems is not atomic).
    path : str or os.PathLike
    """
    os.chmod(tmp, 0o666 & ~_UMASK)
    os.replace(tmp, path)


def write_atomically(path, write: Callable, binary: bool = False, parents: bool = False) -> None:
    """``write(f)`` into a temporary file beside ``path``, then rename it to ``path``.

    Parameters
    ----------
    path : str or os.PathLike
    write : callable
        Called with the open temporary file (text, UTF-8, unless ``binary``).
    binary : bool
        Open the temporary file in binary mode.
    parents : bool
        Create ``path``'s missing directories; otherwise a missing directory is an error.

    Raises
    ------
    FileNotFoundError
        ``path``'s directory does not exist (and not ``parents``).
    Exception
        Whatever ``write`` raises. On any exception, ``KeyboardInterrupt`` included, the
        temporary file is removed and an existing ``path`` is left as it was.
    """
    path = Path(path)
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    elif not path.parent.is_dir():
        raise FileNotFoundError(f"{path}: the directory {str(path.parent)!r} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    fcntl.flock(fd, fcntl.LOCK_EX)  # "a live writer's": see remove_stale_temporaries
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as f:
            write(f)
        replace_into_place(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


#: A temporary file younger than this is left alone even when unlocked: its writer may be
#: between ``mkstemp`` and ``flock``.
_STALE_AFTER_S = 5.0


def remove_stale_temporaries(path) -> list[str]:
    """Remove the temporary files of :func:`write_atomically` for ``path`` (and for files
    named after it, such as a model's side file) that a killed writer left beside it: those no
    live writer holds (each holds an ``flock`` on its own until it renames or removes it).

    Parameters
    ----------
    path : str or os.PathLike
        The target a writer is about to write.

    Returns
    -------
    list of str
        The names removed.
    """
    path = Path(path)
    prefix = f".{path.name}."
    try:
        names = [n for n in os.listdir(path.parent) if n.startswith(prefix) and TEMPORARY_NAME.match(n)]
    except OSError:
        return []
    removed = []
    for name in names:
        candidate = path.parent / name
        try:
            fd = os.open(candidate, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if time.time() - os.fstat(fd).st_mtime < _STALE_AFTER_S:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    continue  # a live writer's
                raise
            os.unlink(candidate)
            removed.append(name)
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


def atomic_write_text(path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and a rename."""
    write_atomically(path, lambda f: f.write(text), parents=True)


def atomic_write_csv(df, path, **kwargs) -> None:
    """``df.to_csv(path, index=False, **kwargs)``, written atomically (:func:`atomic_write_text`)."""
    kwargs.setdefault("index", False)
    atomic_write_text(path, df.to_csv(**kwargs))


def atomic_write_parquet(df, path, **kwargs) -> None:
    """``df.to_parquet(path, index=False, **kwargs)``, written atomically."""
    kwargs.setdefault("index", False)
    write_atomically(path, lambda f: df.to_parquet(f, **kwargs), binary=True, parents=True)
