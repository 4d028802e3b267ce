"""Load a data file of any format ldhmm reads, telling the format from the file itself.

:func:`load_path` is what ``ldhmm data info FILE`` and the experiment commands' ``--file``
use: a user names a file, not its format. A directory holding a ``dataset.json`` is a
partitioned data set (:mod:`ldhmm.data.partitions`), read whole.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from .database import TEXT_MAGIC, SequenceDatabase
from .partitions import load_partitioned
from .regular_files import open_regular
from .storage import is_url
from .uci import read_msnbc, read_splice
from .userdata import TSV_SUFFIXES, load_event_log, load_text

__all__ = ["load_path"]


#: File-name suffixes of an event log (the last or the one before a compression suffix).
EVENT_LOG_SUFFIXES = (".csv", ".parquet", ".pq") + TSV_SUFFIXES


def load_path(
    path, sequence_col=None, event_col=None, time_col=None, sep=None, label_col=None
) -> SequenceDatabase:
    """Load a data file, guessing its format.

    A directory or an fsspec URL (``s3://...``): a partitioned data set
    (:func:`~ldhmm.data.load_partitioned`, read whole into this process);
    ``.csv``/``.tsv``/``.parquet`` (or a ``sep``) with ``sequence_col`` and ``event_col``: an
    event log; a file that
    starts with the ``ldhmm-sequences`` header: the text format; an MSNBC ``.seq`` (plain or
    gzip, header ``% ...``): MSNBC; a file named ``splice.data`` or whose first line has the
    splice layout: splice; otherwise a plain token file (:func:`load_text`).

    Parameters
    ----------
    path : str or Path
        A file, or the directory of a partitioned data set.
    sequence_col, event_col, time_col : str, optional
        Columns of an event log (:func:`load_event_log`); the first two are needed for one.
    sep : str, optional
        The field separator of a CSV event log (default: a tab for ``.tsv``/``.tab``, else a
        comma); giving one says that the file is an event log.
    label_col : str, optional
        The column of each sequence's class in an event log (:func:`load_event_log`).

    Returns
    -------
    SequenceDatabase

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        An event log without its columns; :class:`DataFormatError` (a ``ValueError``) for an
        error in the file, naming file and line (for a directory: one without ``dataset.json``,
        or any error :func:`~ldhmm.data.load_partitioned` reports).
    """
    columns = {
        "--sequence-col": sequence_col,
        "--event-col": event_col,
        "--time-col": time_col,
        "--label-col": label_col,
        "--sep": sep,
    }
    columns_given = [flag for flag, value in columns.items() if value is not None]
    if is_url(path) or Path(path).is_dir():
        if columns_given:  # its sequences are coded already: the columns would be dropped
            raise ValueError(
                f"{path}: a partitioned data set holds coded sequences; {', '.join(columns_given)} "
                f"read an event log file"
            )
        return load_partitioned(path)
    path = Path(path)
    with open_regular(path, "data file"):  # no such file, or a FIFO, a device: one line, never a hang
        pass
    suffixes = [s.lower() for s in path.suffixes]
    if columns_given or any(s in EVENT_LOG_SUFFIXES for s in suffixes[-2:]):
        if not (sequence_col and event_col):
            raise ValueError(f"{path}: an event log needs --sequence-col and --event-col")
        return load_event_log(path, sequence_col, event_col, time_col, sep=sep, label_col=label_col)
    with open(path, "rb") as f:
        magic = f.read(2)
    try:
        opener = gzip.open if magic == b"\x1f\x8b" else open
        with opener(path, "rb") as f:
            first = f.readline(4096)
    except (OSError, EOFError, zlib.error):  # the loader reads it again and names the line
        first = b""
    text = first.decode("utf-8", "replace").strip()
    if text == TEXT_MAGIC:
        return SequenceDatabase.from_text(path)
    if text.startswith("%"):
        return read_msnbc(path)
    fields = [x.strip() for x in text.split(",")]
    if path.name == "splice.data" or (len(fields) == 3 and fields[0] in ("EI", "IE", "N")):
        return read_splice(path)
    return load_text(path)
