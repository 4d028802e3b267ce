"""Files a user (or a file a user names) points ldhmm at, opened only when they are regular
files, and JSON read strictly.

A path on a command line may be a symbolic link to ``/dev/zero``, a FIFO, a socket or a
directory; read as a file, the first never ends and the second blocks for ever. :func:`open_regular`
opens without blocking, checks what it opened (``fstat``: the file read is the file checked)
and refuses anything but a regular file in one line naming the path and what it is; with
``follow=False`` (a side file a model file names) a symbolic link is refused too
(``O_NOFOLLOW``). :func:`read_json` parses such a file's JSON refusing duplicate keys and
nesting too deep for the parser, each naming the file. :func:`content_bytes` measures a file's
content (a gzip file's decompressed) without holding it, stopping at a bound: what a reader is
about to take in, before it does.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import stat
import zlib
from typing import BinaryIO

__all__ = ["file_kind", "open_regular", "read_json", "content_bytes"]

#: bytes decompressed at a time while counting a gzip file's content
_CHUNK = 1 << 20

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, in words ("a regular file", "a FIFO (named pipe)", ...)."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def open_regular(path, what: str = "file", follow: bool = True) -> BinaryIO:
    """``path`` opened for reading in binary mode, when it is a regular file.

    Parameters
    ----------
    path : str or Path
    what : str
        What the file is, for the messages ("model file", "side file", ...).
    follow : bool
        Follow a symbolic link at ``path`` (a file the user named) or refuse it (a file another
        file names: it must be a regular file where it is).

    Raises
    ------
    FileNotFoundError
        ``"{path}: no such {what}"``.
    ValueError
        ``"{path}: is a FIFO (named pipe), not a regular file: a {what} must be one"``, and the
        same for a directory, a device, a socket, or (``follow=False``) a symbolic link.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such {what}") from None
    except OSError as err:
        if err.errno == errno.ELOOP and not follow:
            kind = "a symbolic link"
        elif err.errno == errno.ENXIO:  # a socket: cannot be opened
            kind = "a socket"
        else:
            raise ValueError(f"{path}: cannot read the {what} ({err.strerror})") from None
        raise ValueError(f"{path}: is {kind}, not a regular file: a {what} must be one") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ValueError(f"{path}: is {file_kind(mode)}, not a regular file: a {what} must be one")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def read_json(path, what: str = "JSON file", follow: bool = True, expected: str = "a JSON file"):
    """The JSON document in the regular file ``path`` (:func:`open_regular`), parsed strictly.

    Raises
    ------
    FileNotFoundError, ValueError
        As :func:`open_regular`; and ``"{path}: not {expected} (...)"`` for text that is not UTF-8
        or not JSON, an object with a duplicate key (naming it), or nesting deeper than the
        parser recurses (``RecursionError``, caught here so that the message names the file).
    """
    with open_regular(path, what, follow) as f:
        raw = f.read()
    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise ValueError(f"{path}: not {expected} (JSON nested too deeply to parse)") from None
    except (UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"{path}: not {expected} ({err})") from None


def content_bytes(path, stop_after: int) -> int:
    """Bytes of the regular file ``path``'s content: its size, or a gzip file's decompressed
    size, counted in chunks and no further than past ``stop_after`` (a gzip bomb is never
    inflated whole; nothing is kept). Damaged gzip data ends the count: the reader names it.
    """
    with open_regular(path, "data file") as f:
        size = os.fstat(f.fileno()).st_size
        if f.read(2) != b"\x1f\x8b":
            return size
    total = 0
    try:
        with gzip.open(path, "rb") as z:
            while total <= stop_after:
                chunk = z.read(_CHUNK)
                if not chunk:
                    break
                total += len(chunk)
    except (OSError, EOFError, zlib.error):
        pass
    return total
