"""NPZ archives that ldhmm wrote, read back without trusting them.

An NPZ file is a zip archive of ``.npy`` members. Read naively (``np.load``), a FIFO in its place
blocks for ever, a 2 MB archive may inflate a member to gigabytes before anything is checked, an
object member asks for pickles, and a damaged one fails with the zip module's words.
:func:`read_stored_npz` reads an archive that ldhmm writes with ``np.savez`` (members *stored*,
not compressed) in this order, refusing in one line naming the file (and the member):

1. the path is a regular file (:func:`ldhmm.data.regular_files.open_regular`: never a FIFO, a
   device or a directory; with ``follow=False`` never a symbolic link);
2. it is a zip archive whose members are all ``.npy`` files stored uncompressed, so that the
   bytes read are the file's own: no member inflates past the size on disk;
3. each member's ``.npy`` header (read alone, before any of its data) claims a numeric dtype
   that ``check_member`` accepts, and exactly the bytes the archive stores for it;
4. then the data, without pickles.

:func:`member_header` is step 3 on its own: the shape and dtype a member claims.
"""

from __future__ import annotations

import zipfile

import numpy as np

from .regular_files import open_regular
from .terminal_text import shown

__all__ = ["member_header", "read_stored_npz"]


def member_header(archive: zipfile.ZipFile, name: str) -> tuple[tuple, np.dtype, int]:
    """``(shape, dtype, header bytes)`` that the ``.npy`` member ``name`` of ``archive`` claims,
    read from its header alone (none of its data is decompressed or read)."""
    with archive.open(name) as member:
        version = np.lib.format.read_magic(member)
        read_header = (
            np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        )
        shape, _, dtype = read_header(member)
        return tuple(shape), dtype, member.tell()


def read_stored_npz(path, what: str, check_member=None, follow: bool = True, text: tuple = ()) -> dict:
    """Every array of the NPZ archive ``path``, each checked before its data is read (see the
    module docstring).

    Parameters
    ----------
    path : str or Path
    what : str
        What the file is, for the messages ("checkpoint", ...).
    check_member : callable, optional
        ``check_member(key, shape, dtype)`` for each member (``key`` without ``.npy``), called
        before its data is read; returns a message (the member is refused) or None.
    follow : bool
        Follow a symbolic link at ``path``.
    text : tuple of str
        Members that may hold fixed-width text (numpy's ``U`` dtype, no pickles: a format
        name, a hash); every other member must hold numbers.

    Raises
    ------
    FileNotFoundError
        ``"{path}: no such {what}"``.
    ValueError
        One line naming the file, and the member where one is at fault.
    """
    where = shown(path)
    with open_regular(path, what, follow) as handle:
        try:
            archive = zipfile.ZipFile(handle)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
            raise ValueError(f"{where}: not a {what} (not an NPZ archive: {shown(err)})") from None
        with archive:
            infos = archive.infolist()
            for info in infos:
                if not info.filename.endswith(".npy"):
                    raise ValueError(
                        f"{where}: not a {what} (member '{shown(info.filename)}' is not an array)"
                    )
                if info.compress_type != zipfile.ZIP_STORED:
                    raise ValueError(
                        f"{where}: member '{shown(info.filename)}' is compressed; a {what} stores its "
                        "arrays uncompressed (a compressed member may inflate past any bound)"
                    )
            headers = {}
            for info in infos:
                key = info.filename[: -len(".npy")]
                try:
                    shape, dtype, header_bytes = member_header(archive, info.filename)
                except Exception as err:  # noqa: BLE001 - a damaged member: one line
                    raise ValueError(f"{where}: array '{shown(key)}' is unreadable ({shown(err)})") from None
                if dtype.hasobject or dtype.kind not in ("biufU" if key in text else "biuf"):
                    raise ValueError(f"{where}: array '{shown(key)}' holds {dtype} values, not numbers")
                claimed = int(np.prod(shape, dtype=object)) * dtype.itemsize
                if claimed + header_bytes != info.file_size:
                    raise ValueError(
                        f"{where}: array '{shown(key)}' claims shape {shape} of {dtype} "
                        f"({claimed} bytes), and the archive holds {info.file_size - header_bytes}"
                    )
                problem = check_member(key, shape, dtype) if check_member is not None else None
                if problem:
                    raise ValueError(f"{where}: array '{shown(key)}': {problem}")
                headers[key] = info.filename
            arrays = {}
            for key, name in headers.items():
                try:
                    with archive.open(name) as member:
                        arrays[key] = np.lib.format.read_array(member, allow_pickle=False)
                except Exception as err:  # noqa: BLE001 - damaged data (a CRC error, ...): one line
                    raise ValueError(f"{where}: array '{shown(key)}' is unreadable ({shown(err)})") from None
    return arrays
