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
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["TEMPORARY_NAME", "replace_into_place", "write_atomically"]

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
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as f:
            write(f)
        replace_into_place(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
