"""Partitioned data sets: a directory of Parquet files that workers read without a driver.

A cluster fit must not funnel a large database through one driver process. This module
writes a :class:`~ldhmm.data.SequenceDatabase` as a directory of Parquet files plus a small
``dataset.json`` sidecar, plans balanced partitions from the sidecar alone (no token is
read), and reads one partition on a worker. It also plans balanced partitions of an in-memory
database from its lengths (:func:`balanced_partitions`). Only numpy and pyarrow are used.

On-disk format (``dataset.json`` format ``ldhmm-partitioned``, version 1)
--------------------------------------------------------------------------
Two layouts; in both, every sequence lives in exactly one file:

* ``"sequences"``: one row per sequence. Columns ``sequence_id`` (string), ``symbols``
  (``list<int32>``, codes ``0..n_symbols-1``, at least one) and, for labelled data,
  ``label`` (string, one of ``label_names``). Files are cut into row groups of about
  ``row_group_tokens`` tokens; a row group is the smallest piece a partition gets.
* ``"events"``: one row per event. Columns ``sequence_id`` (string), ``position`` (int64,
  orders a sequence's events; distinct within a sequence), ``symbol`` (int32) and optionally
  ``label`` (string, the same on every event of a sequence). A file is the smallest piece.
  Readers sort by (sequence, position) and assume no row order: a sequence's place in its
  file is the first appearance of its id.

``dataset.json`` holds ``format``, ``format_version``, ``layout``, ``name``,
``vocabulary`` (symbol names in code order, or null: then symbol k is named ``"k"``),
``n_symbols``, ``label_names`` (or null), ``labels`` (true: the files have the ``label``
column), ``ids`` (true: ``sequence_id`` holds the
database's ids; false: the database had none and ``sequence_id`` is the sequence's 0-based
position in it), ``n_sequences``, ``n_tokens``, and ``files``: one entry per file in order
with ``path`` (a file name inside the directory), ``n_sequences``, ``n_tokens`` and, for the
sequences layout, ``row_groups`` (``n_sequences`` and ``n_tokens`` of each row group;
optional for files written elsewhere, which then are whole pieces).

:func:`write_partitioned` cuts the database into contiguous runs of sequences of about equal
token counts (one run per file; so the files keep the database's order), writes them into
a temporary directory and renames it into place. :func:`load_partitioned` reads the whole
directory back into the database that was written.

Errors in a file raise :class:`~ldhmm.data.DataFormatError` (a ``ValueError``) whose one-line
message names the file and, where there is one, the 0-based row of the Parquet file.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import json
import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import storage
from .database import DataFormatError, SequenceDatabase, offsets_of

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "LAYOUTS",
    "MANIFEST",
    "PartitionSpec",
    "is_partitioned",
    "load_partitioned",
    "balanced_partitions",
    "plan_partitions",
    "read_manifest",
    "read_partition",
    "write_partitioned",
]

#: Name of the sidecar file of a partitioned data set.
MANIFEST = "dataset.json"
#: Value of ``format`` in ``dataset.json``.
FORMAT_NAME = "ldhmm-partitioned"
#: The ``format_version`` this module writes and reads.
FORMAT_VERSION = 1
#: The two on-disk layouts.
LAYOUTS = ("sequences", "events")
#: Default token count of a row group of the sequences layout (the planning granularity).
ROW_GROUP_TOKENS = 1 << 16
_COMPRESSION = "zstd"
_COLUMNS = {"sequences": ("sequence_id", "symbols"), "events": ("sequence_id", "position", "symbol")}
_INT32_MAX = np.iinfo(np.int32).max


@dataclass(frozen=True)
class PartitionSpec:
    """What one worker reads: whole files or whole row groups of a partitioned data set.

    Small and picklable: a planner makes them from ``dataset.json`` alone and ships them to
    workers, which call :func:`read_partition`.

    Attributes
    ----------
    directory : str
        The data set's directory, an absolute path or an fsspec URL (every worker must be able
        to open it: :mod:`ldhmm.data.storage`).
    layout : {"sequences", "events"}
    pieces : tuple of (str, tuple of int or None)
        ``(file name, row-group indices)`` in file order; ``None`` means the whole file.
    n_sequences, n_tokens : int
        Sequences and tokens in the partition (from ``dataset.json``).
    n_symbols : int
        Vocabulary size V of the data set.
    manifest_sha256 : str
        SHA-256 of the ``dataset.json`` the plan was made from; :func:`read_partition`
        refuses a directory whose ``dataset.json`` changed since (empty: not checked).
    """

    directory: str
    layout: str
    pieces: tuple[tuple[str, tuple[int, ...] | None], ...]
    n_sequences: int
    n_tokens: int
    n_symbols: int
    manifest_sha256: str = ""


# ============================================================================ writing
def write_partitioned(
    db: SequenceDatabase,
    directory,
    layout: str = "sequences",
    n_files: int = 8,
    overwrite: bool = False,
    row_group_tokens: int = ROW_GROUP_TOKENS,
) -> Path:
    """Write a database as a partitioned data set (Parquet files plus ``dataset.json``).

    The sequences are cut into ``min(n_files, M)`` contiguous runs of about equal token
    counts, one file per run, written one at a time into a temporary directory beside
    ``directory`` that is renamed into place at the end; apart from ``db`` at most one
    file's rows are held in memory.

    Parameters
    ----------
    db : SequenceDatabase
        M >= 1 sequences. With ids, they must be non-empty strings, and distinct for the
        events layout (which groups rows by id).
    directory : str or os.PathLike
        The data set's directory: absent or empty, or (with ``overwrite``) a partitioned
        data set that is replaced. An fsspec URL (``s3://bucket/parts``,
        :mod:`ldhmm.data.storage`): the data set is written to a local temporary directory
        and uploaded, ``dataset.json`` last.
    layout : {"sequences", "events"}
        One row per sequence, or one row per event (see the module docstring).
    n_files : int
        Number of Parquet files (at most M are written).
    overwrite : bool
        Replace an existing non-empty ``directory``: only a data set this module wrote (its
        ``dataset.json`` of this format) holding nothing but the files that manifest lists,
        and never the working, home or root directory, so that nothing else is ever deleted;
        only the listed files are removed.
    row_group_tokens : int
        Sequences layout: about this many tokens per row group.

    Returns
    -------
    Path or str
        ``directory``, as an absolute path (a URL: as given, without a trailing slash).

    Raises
    ------
    FileExistsError
        ``directory`` exists and is not empty, without ``overwrite``.
    ValueError
        Empty database, bad layout or counts, empty or (events layout) duplicate ids, or an
        ``overwrite`` target that is not a partitioned data set.
    """
    if not isinstance(db, SequenceDatabase):
        raise TypeError(f"db must be a SequenceDatabase, got {type(db).__name__}")
    _check_layout(layout)
    n_files = _positive_int(n_files, "n_files")
    row_group_tokens = _positive_int(row_group_tokens, "row_group_tokens")
    if len(db) == 0:
        raise ValueError("the database has no sequences; there is nothing to write")
    ids = db.ids
    if ids is not None:
        _check_ids_writable(ids, layout)
    if storage.is_url(directory):
        url = storage.location(directory)
        storage.check_remote_target(url, overwrite, MANIFEST, replaceable_files)  # before any work
        with tempfile.TemporaryDirectory() as tmp:
            local = write_partitioned(db, Path(tmp) / "data", layout, n_files, False, row_group_tokens)
            storage.upload_directory(local, url, MANIFEST, overwrite, replaceable_files)
        return url
    directory = Path(os.path.abspath(directory))
    _check_target(directory, overwrite)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = _make_temporary_directory(directory)
    try:
        bounds = _contiguous_cuts(db.lengths, n_files).tolist()
        files = []
        for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
            name = f"part-{k:05d}.parquet"
            if layout == "sequences":
                entry = _write_sequences_file(db, ids, a, b, tmp / name, row_group_tokens)
            else:
                entry = _write_events_file(db, ids, a, b, tmp / name)
            files.append({"path": name, **entry})
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "layout": layout,
            "name": db.name,
            "vocabulary": db.vocabulary,
            "n_symbols": db.n_symbols,
            "label_names": db.label_names,
            "labels": db.labels is not None,
            "ids": ids is not None,
            "n_sequences": len(db),
            "n_tokens": db.n_tokens,
            "files": files,
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        _check_target(directory, overwrite)  # again: another writer may have finished meanwhile
        _move_into_place(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


def _check_ids_writable(ids: list[str], layout: str) -> None:
    if any(i == "" for i in ids):
        raise ValueError(f"sequence {ids.index('')} has an empty id; ids must be non-empty strings")
    if layout == "events" and len(set(ids)) != len(ids):
        seen = set()
        for i in ids:
            if i in seen:
                raise ValueError(
                    f"id {i!r} names two sequences; the events layout groups rows by id, so ids must "
                    "be distinct (use layout='sequences')"
                )
            seen.add(i)


def _check_target(directory: Path, overwrite: bool) -> None:
    if not directory.exists():
        return
    if not directory.is_dir():
        raise FileExistsError(f"{directory}: exists and is not a directory")
    if not any(directory.iterdir()):
        return
    if not overwrite:
        raise FileExistsError(
            f"{directory}: exists and is not empty; pass overwrite=True (--overwrite) to replace it"
        )
    if directory in (Path.cwd(), Path(os.path.expanduser("~"))) or directory == directory.parent:
        raise ValueError(f"{directory}: the working, home or root directory; refusing to replace it")
    if not (directory / MANIFEST).is_file():
        raise ValueError(f"{directory}: not a partitioned data set (no {MANIFEST}); refusing to replace it")
    listed = replaceable_files((directory / MANIFEST).read_bytes(), directory)
    others = sorted(
        p.name for p in directory.iterdir() if p.name not in listed or p.is_symlink() or not p.is_file()
    )
    if others:
        raise ValueError(storage.unlisted_message(str(directory), others))


def replaceable_files(manifest_bytes: bytes, where: str) -> set[str]:
    """The names an ``overwrite`` may delete: those a data set's manifest lists, and itself.

    Raises ValueError where ``manifest_bytes`` is not the manifest of a data set this module
    wrote (its format name, a list of plain file names), naming ``where``."""
    try:
        manifest = json.loads(manifest_bytes)
        names = [entry["path"] for entry in manifest["files"]]
        ok = manifest.get("format") == FORMAT_NAME and all(
            isinstance(n, str) and n and "/" not in n and n not in (".", "..") for n in names
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        ok = False
    if not ok:
        raise ValueError(f"{where}: {MANIFEST} is not an ldhmm data set's manifest; refusing to replace it")
    return {*names, MANIFEST}


def _make_temporary_directory(directory: Path) -> Path:
    """A new empty directory beside ``directory`` (same file system), with umask permissions."""
    while True:
        tmp = directory.with_name(f".{directory.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            tmp.mkdir()  # not tempfile.mkdtemp: its mode 0700 would follow the rename
        except FileExistsError:
            continue
        return tmp


def _move_into_place(tmp: Path, directory: Path) -> None:
    """Rename the finished ``tmp`` to ``directory``, replacing an empty or checked old one."""
    if directory.exists():
        if not any(directory.iterdir()):
            directory.rmdir()
        else:
            old = tmp.with_name(tmp.name + ".old")
            os.rename(directory, old)
            try:
                os.rename(tmp, directory)
            except BaseException:
                os.rename(old, directory)
                raise
            # only what the old manifest listed (checked by _check_target): a file that
            # appeared since keeps the old directory, under its .old name, rather than go
            for name in replaceable_files((old / MANIFEST).read_bytes(), str(directory)):
                (old / name).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                old.rmdir()
            return
    os.rename(tmp, directory)


def _contiguous_cuts(lengths: np.ndarray, n_parts: int) -> np.ndarray:
    """Cut M items into ``n = min(n_parts, M)`` contiguous non-empty runs of about equal sum.

    Parameters
    ----------
    lengths : np.ndarray of int, shape (M,), M >= 1
    n_parts : int

    Returns
    -------
    np.ndarray of int64, shape (n + 1,)
        Run k is items ``cuts[k]:cuts[k + 1]``; ``cuts[0] == 0``, ``cuts[-1] == M``.
    """
    m = int(lengths.size)
    n = max(1, min(int(n_parts), m))
    cum = np.cumsum(lengths, dtype=np.int64)
    targets = cum[-1] * np.arange(1, n, dtype=np.float64) / n
    count = np.searchsorted(cum, targets, side="left")  # first `count` items sum below target
    below = np.where(count > 0, cum[np.maximum(count - 1, 0)], 0)
    above = cum[np.minimum(count, m - 1)]
    count = np.where(targets - below <= above - targets, count, count + 1)
    cuts = np.concatenate([[0], count, [m]]).astype(np.int64)
    for k in range(1, n):  # every run non-empty, room left for the runs after it
        cuts[k] = min(max(cuts[k], cuts[k - 1] + 1), m - (n - k))
    return cuts


def _id_array(ids: list[str] | None, a: int, b: int) -> pa.Array:
    """The ``sequence_id`` values of sequences ``a:b``: their ids, or their positions."""
    values = ids[a:b] if ids is not None else [str(i) for i in range(a, b)]
    return pa.array(values, type=pa.string())


def _label_array(db: SequenceDatabase, codes: np.ndarray) -> pa.Array:
    return pa.array(db.label_names, type=pa.string()).take(pa.array(codes))


def _write_sequences_file(
    db: SequenceDatabase, ids: list[str] | None, a: int, b: int, path: Path, row_group_tokens: int
) -> dict:
    """Write sequences ``a:b`` as one row each; returns the file's ``dataset.json`` entry."""
    offsets = db.offsets[a : b + 1]
    start, stop = int(offsets[0]), int(offsets[-1])
    local = offsets - start
    tokens = pa.array(db.tokens[start:stop].astype(np.int32))
    if stop - start <= _INT32_MAX:
        symbols = pa.ListArray.from_arrays(pa.array(local.astype(np.int32)), tokens)
    else:
        symbols = pa.LargeListArray.from_arrays(pa.array(local), tokens)
    columns = {"sequence_id": _id_array(ids, a, b), "symbols": symbols}
    if db.labels is not None:
        columns["label"] = _label_array(db, db.labels[a:b])
    table = pa.table(columns)
    lengths = db.lengths[a:b]
    cuts = _contiguous_cuts(lengths, max(1, round((stop - start) / row_group_tokens))).tolist()
    row_groups = []
    with pq.ParquetWriter(
        path,
        table.schema,
        compression=_COMPRESSION,
        # ids are distinct here: prefix-delta, not a dictionary (a third smaller on MSNBC)
        use_dictionary=["symbols.list.element", "label"],
        column_encoding={"sequence_id": "DELTA_BYTE_ARRAY"},
    ) as writer:
        for r0, r1 in zip(cuts[:-1], cuts[1:]):
            writer.write_table(table.slice(r0, r1 - r0), row_group_size=r1 - r0)
            row_groups.append({"n_sequences": r1 - r0, "n_tokens": int(local[r1] - local[r0])})
    return {"n_sequences": b - a, "n_tokens": stop - start, "row_groups": row_groups}


def _write_events_file(db: SequenceDatabase, ids: list[str] | None, a: int, b: int, path: Path) -> dict:
    """Write sequences ``a:b`` as one row per event; returns the file's ``dataset.json`` entry."""
    offsets = db.offsets[a : b + 1]
    start, stop = int(offsets[0]), int(offsets[-1])
    lengths = db.lengths[a:b]
    group = np.repeat(np.arange(b - a, dtype=np.int64), lengths)  # (T_file,)
    position = np.arange(stop - start, dtype=np.int64) - (offsets[:-1] - start)[group]
    columns = {
        "sequence_id": _id_array(ids, a, b).take(pa.array(group)),
        "position": pa.array(position),
        "symbol": pa.array(db.tokens[start:stop].astype(np.int32)),
    }
    if db.labels is not None:
        columns["label"] = _label_array(db, db.labels[a:b][group])
    pq.write_table(pa.table(columns), path, compression=_COMPRESSION)
    return {"n_sequences": b - a, "n_tokens": stop - start}


# ============================================================================ dataset.json
def read_manifest(directory) -> dict:
    """The checked contents of a data set's ``dataset.json``.

    Parameters
    ----------
    directory : str or os.PathLike
        A local directory or an fsspec URL (:mod:`ldhmm.data.storage`).

    Returns
    -------
    dict
        The keys described in the module docstring.

    Raises
    ------
    DataFormatError
        ``dataset.json`` missing, not JSON, of another format or a newer version, or with a
        missing or ill-typed field or inconsistent counts; the message names the file.
    """
    return _load_manifest(_place(directory))[0]


def is_partitioned(path) -> bool:
    """Whether ``path`` names a partitioned data set: a URL (only data sets are read from one;
    :func:`read_manifest` says what is wrong with it), or a directory with a ``dataset.json``."""
    return storage.is_url(path) or (Path(path).is_dir() and (Path(path) / MANIFEST).is_file())


def _place(directory):
    """A URL as a location (:func:`ldhmm.data.storage.location`), a local path as given."""
    return storage.location(directory) if storage.is_url(directory) else Path(directory)


def _load_manifest(directory) -> tuple[dict, str]:
    path = storage.join(directory, MANIFEST)
    try:
        raw = storage.read_bytes(path)
    except FileNotFoundError:
        what = "missing" if storage.is_dir(directory) else "no such directory"
        if storage.is_url(directory) and what != "missing":
            what = "nothing at this URL (no such bucket or directory)"
        raise DataFormatError(path, None, f"{what}; not a partitioned data set") from None
    except IsADirectoryError:
        raise DataFormatError(path, None, "is a directory, not the data set's JSON sidecar") from None
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataFormatError(path, None, f"not valid JSON ({err})") from None
    _check_manifest(path, manifest)
    return manifest, hashlib.sha256(raw).hexdigest()


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_names_field(path: Path, manifest: dict, key: str, allow_null: bool) -> None:
    names = manifest.get(key)
    if names is None and allow_null:
        return
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise DataFormatError(path, None, f"{key!r} must be a list of strings{' or null' * allow_null}")
    if len(set(names)) != len(names):
        raise DataFormatError(path, None, f"{key!r} has duplicate names")


def _check_manifest(path: Path, manifest) -> None:
    """Raise a DataFormatError naming ``path`` unless ``manifest`` is a valid version-1 sidecar."""
    if not isinstance(manifest, dict):
        raise DataFormatError(path, None, "must hold a JSON object")
    if manifest.get("format") != FORMAT_NAME:
        raise DataFormatError(path, None, f"format is {manifest.get('format')!r}, expected {FORMAT_NAME!r}")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        newer = " (written by a newer ldhmm?)" if _is_count(version) and version > FORMAT_VERSION else ""
        raise DataFormatError(
            path,
            None,
            f"format_version {version!r} is not supported; this ldhmm reads {FORMAT_VERSION}{newer}",
        )
    if manifest.get("layout") not in LAYOUTS:
        raise DataFormatError(
            path, None, f"layout is {manifest.get('layout')!r}, expected one of {', '.join(LAYOUTS)}"
        )
    for key in ("n_symbols", "n_sequences", "n_tokens"):
        if not _is_count(manifest.get(key)):
            raise DataFormatError(path, None, f"{key!r} must be a non-negative integer")
    if manifest["n_symbols"] < 1:
        raise DataFormatError(path, None, "'n_symbols' must be at least 1")
    _check_names_field(path, manifest, "vocabulary", allow_null=True)
    if manifest["vocabulary"] is not None and len(manifest["vocabulary"]) != manifest["n_symbols"]:
        raise DataFormatError(
            path,
            None,
            f"the vocabulary has {len(manifest['vocabulary'])} names, "
            f"but n_symbols is {manifest['n_symbols']}",
        )
    _check_names_field(path, manifest, "label_names", allow_null=True)
    for key in ("labels", "ids"):
        if not isinstance(manifest.get(key), bool):
            raise DataFormatError(path, None, f"{key!r} must be true or false")
    if manifest["labels"] and manifest["label_names"] is None:
        raise DataFormatError(path, None, "'labels' is true but 'label_names' is null")
    if not isinstance(manifest.get("name", ""), str):
        raise DataFormatError(path, None, "'name' must be a string")
    files = manifest.get("files")
    if not isinstance(files, list) or not files:
        raise DataFormatError(path, None, "'files' must be a non-empty list")
    names = set()
    for k, entry in enumerate(files):
        _check_file_entry(path, manifest["layout"], k, entry)
        if entry["path"] in names:
            raise DataFormatError(path, None, f"file {entry['path']!r} is listed twice")
        names.add(entry["path"])
    for key in ("n_sequences", "n_tokens"):
        total = sum(entry[key] for entry in files)
        if total != manifest[key]:
            raise DataFormatError(path, None, f"the files' {key} add up to {total}, not {manifest[key]}")


def _check_file_entry(path: Path, layout: str, k: int, entry) -> None:
    where = f"files[{k}]"
    if not isinstance(entry, dict):
        raise DataFormatError(path, None, f"{where} must be an object")
    name = entry.get("path")
    if not isinstance(name, str) or name in ("", ".", "..", MANIFEST) or name != os.path.basename(name):
        raise DataFormatError(path, None, f"{where}.path {name!r} must name a file inside the directory")
    for key in ("n_sequences", "n_tokens"):
        if not _is_count(entry.get(key)):
            raise DataFormatError(path, None, f"{where}.{key} must be a non-negative integer")
    if entry["n_tokens"] < entry["n_sequences"]:
        raise DataFormatError(path, None, f"{where} has fewer tokens than sequences")
    row_groups = entry.get("row_groups")
    if row_groups is None:
        return
    if layout != "sequences":
        raise DataFormatError(path, None, f"{where}.row_groups: only the sequences layout lists row groups")
    if not isinstance(row_groups, list) or not all(
        isinstance(g, dict) and _is_count(g.get("n_sequences")) and _is_count(g.get("n_tokens"))
        for g in row_groups
    ):
        raise DataFormatError(
            path, None, f"{where}.row_groups must be a list of {{n_sequences, n_tokens}} counts"
        )
    for key in ("n_sequences", "n_tokens"):
        if sum(g[key] for g in row_groups) != entry[key]:
            raise DataFormatError(path, None, f"{where}.row_groups' {key} do not add up to the file's")


# ============================================================================ planning
def plan_partitions(directory, n_partitions: int) -> list[PartitionSpec]:
    """Balanced partitions of a data set on disk, from ``dataset.json`` alone.

    The pieces (row groups of the sequences layout where ``dataset.json`` lists them, whole
    files otherwise) go largest first onto the partition with the fewest tokens so far
    (ties: the earlier piece, the lower partition), so the most tokens of a partition is at
    most the ideal share plus the largest piece. A sequence is never split; the plan is a
    function of ``dataset.json`` only.

    Parameters
    ----------
    directory : str or os.PathLike
    n_partitions : int
        At most this many partitions; fewer when there are fewer pieces (none is empty).

    Returns
    -------
    list of PartitionSpec
        In partition order; inside each, pieces in file order.

    Raises
    ------
    DataFormatError
        A bad ``dataset.json`` or a file it lists that is missing.
    """
    n_partitions = _positive_int(n_partitions, "n_partitions")
    directory = storage.location(directory)
    manifest, digest = _load_manifest(directory)
    pieces = []  # (file index, row group or None, n_sequences, n_tokens)
    for f, entry in enumerate(manifest["files"]):
        path = storage.join(directory, entry["path"])
        # A URL's files are found missing by the workers that read them: the driver reads
        # dataset.json alone (one request, not one per file).
        if not storage.is_url(directory) and not path.is_file():
            raise DataFormatError(path, None, f"listed in {MANIFEST} but missing")
        if manifest["layout"] == "sequences" and entry.get("row_groups") is not None:
            pieces.extend(
                (f, g, rg["n_sequences"], rg["n_tokens"]) for g, rg in enumerate(entry["row_groups"])
            )
        else:
            pieces.append((f, None, entry["n_sequences"], entry["n_tokens"]))
    weights = np.array([p[3] for p in pieces], dtype=np.int64)
    assign = _greedy_assign(weights, min(n_partitions, len(pieces)))
    specs = []
    for part in range(int(assign.max()) + 1):
        chosen = [pieces[k] for k in np.flatnonzero(assign == part)]
        by_file: dict[int, list[int] | None] = {}
        for f, g, _, _ in chosen:
            if g is None:
                by_file[f] = None
            else:
                by_file.setdefault(f, []).append(g)
        specs.append(
            PartitionSpec(
                directory=str(directory),
                layout=manifest["layout"],
                pieces=tuple(
                    (manifest["files"][f]["path"], None if gs is None else tuple(gs))
                    for f, gs in by_file.items()
                ),
                n_sequences=int(sum(p[2] for p in chosen)),
                n_tokens=int(sum(p[3] for p in chosen)),
                n_symbols=manifest["n_symbols"],
                manifest_sha256=digest,
            )
        )
    return specs


def _greedy_assign(weights: np.ndarray, n_bins: int) -> np.ndarray:
    """Largest first onto the lightest bin (ties: the earlier item, the lower bin).

    Parameters
    ----------
    weights : np.ndarray of int, shape (K,)
    n_bins : int, >= 1

    Returns
    -------
    np.ndarray of int64, shape (K,)
        The bin of each item; the heaviest bin weighs at most ``sum / n_bins + max``.
    """
    order = np.argsort(-weights, kind="stable").tolist()
    w = weights.tolist()
    heap = [(0, b) for b in range(n_bins)]
    assign = [0] * len(w)
    for i in order:
        load, b = heap[0]
        assign[i] = b
        heapq.heapreplace(heap, (load + w[i], b))
    return np.array(assign, dtype=np.int64)


def balanced_partitions(lengths, n_partitions: int) -> list[np.ndarray]:
    """Sequences cut into partitions balanced by token count: the indices of each partition.

    Sequences go longest first onto the partition with the fewest tokens so far (ties: the
    earlier sequence, the lower partition), as :func:`plan_partitions` places its pieces. The
    most tokens of a partition is at most ``T / n + max(lengths)``; the partitions are a
    function of ``lengths`` and ``n_partitions`` only.

    Parameters
    ----------
    lengths : array-like of int, shape (M,)
        Every sequence's token count (>= 1; a zero-length sequence weighs nothing).
    n_partitions : int, >= 1
        At most this many partitions; ``min(n_partitions, M)`` when every length is positive
        (none is empty: a partition that would get only zero-length sequences is not made).

    Returns
    -------
    list of np.ndarray of int64, shape (M_p,)
        The ascending indices of each partition's sequences; every index in exactly one.
        For M = 0: one empty partition.
    """
    n_partitions = _positive_int(n_partitions, "n_partitions")
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if lengths.size == 0:
        return [np.zeros(0, dtype=np.int64)]
    assign = _greedy_assign(lengths, min(n_partitions, lengths.size))
    order = np.argsort(assign, kind="stable")
    cuts = np.searchsorted(assign[order], np.arange(int(assign.max()) + 2))
    return [order[a:b] for a, b in zip(cuts[:-1], cuts[1:])]


# ============================================================================ reading
def read_partition(spec: PartitionSpec) -> SequenceDatabase:
    """Read one partition (on a worker): only the files and row groups the spec names.

    Parameters
    ----------
    spec : PartitionSpec

    Returns
    -------
    SequenceDatabase
        ``spec.n_sequences`` sequences, in the order of the pieces; ``ids`` are always the
        ``sequence_id`` values (for a data set written without ids, the sequences' positions
        in the written database, as strings).

    Raises
    ------
    DataFormatError
        A bad ``dataset.json`` or one changed since the plan; a missing file; a missing or
        ill-typed column; a null; a symbol outside ``0..n_symbols-1``; an empty sequence; a
        label not among ``label_names``; duplicate positions within a sequence; a sequence
        id in two files of the partition (events layout); counts that disagree with
        ``dataset.json``. Messages name the file and row.
    """
    directory = _place(spec.directory)
    manifest, digest = _load_manifest(directory)
    if spec.manifest_sha256 and digest != spec.manifest_sha256:
        raise DataFormatError(
            storage.join(directory, MANIFEST),
            None,
            "changed since the partitions were planned; plan them again",
        )
    if spec.layout != manifest["layout"]:
        raise DataFormatError(
            storage.join(directory, MANIFEST),
            None,
            f"layout is {manifest['layout']!r}, the plan says {spec.layout!r}",
        )
    tokens, lengths, labels, ids = _read_pieces(directory, manifest, spec.pieces)
    return _database(manifest, directory, tokens, lengths, labels, ids.to_pylist())


def load_partitioned(directory) -> SequenceDatabase:
    """Read a whole partitioned data set back into one database (on one machine).

    Checks everything :func:`read_partition` checks, across all files: in the events layout
    no sequence id may appear in two files.

    Parameters
    ----------
    directory : str or os.PathLike

    Returns
    -------
    SequenceDatabase
        The written database: same sequences in the same order (for the events layout with
        ids: file order, then first appearance of an id in its file), vocabulary, labels,
        ids (None when it was written without) and name.

    Raises
    ------
    DataFormatError
        As :func:`read_partition`; also ``ids: false`` with ``sequence_id`` values that are
        not the positions ``0..M-1``.
    """
    directory = _place(directory)
    manifest, _ = _load_manifest(directory)
    pieces = tuple((entry["path"], None) for entry in manifest["files"])
    tokens, lengths, labels, ids = _read_pieces(directory, manifest, pieces)
    if manifest["ids"]:
        return _database(manifest, directory, tokens, lengths, labels, ids.to_pylist())
    tokens, lengths, labels = _restore_positions(directory, tokens, lengths, labels, ids)
    return _database(manifest, directory, tokens, lengths, labels, None)


def _database(manifest: dict, directory, tokens, lengths, labels, ids) -> SequenceDatabase:
    offsets = offsets_of(lengths)
    vocabulary = manifest["vocabulary"] or [str(k) for k in range(manifest["n_symbols"])]
    return SequenceDatabase(
        tokens,
        offsets,
        vocabulary,
        labels=labels,
        label_names=manifest["label_names"],
        ids=ids,
        name=manifest.get("name", ""),
        meta={"source": str(directory), "layout": manifest["layout"]},
    )


def _restore_positions(directory, tokens, lengths, labels, ids: pa.Array):
    """Reorder sequences by their ``sequence_id`` positions, which must be ``0..M-1``."""
    try:
        position = pc.cast(ids, pa.int64()).to_numpy()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        bad = next((i for i in ids.to_pylist() if not i.isdecimal()), ids[0].as_py())
        raise DataFormatError(
            storage.join(directory, MANIFEST),
            None,
            f"says ids: false, but sequence_id {bad!r} is not a position",
        ) from None
    order = np.argsort(position, kind="stable")
    if not np.array_equal(position[order], np.arange(position.size)):
        raise DataFormatError(
            storage.join(directory, MANIFEST),
            None,
            f"says ids: false, but the sequence_id values are not the positions 0..{position.size - 1}",
        )
    if np.array_equal(order, np.arange(order.size)):
        return tokens, lengths, labels
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    new_lengths = lengths[order]
    new_starts = np.concatenate([[0], np.cumsum(new_lengths)[:-1]])
    take = np.repeat(starts[order] - new_starts, new_lengths) + np.arange(tokens.size)
    return tokens[take], new_lengths, None if labels is None else labels[order]


def _read_pieces(directory, manifest: dict, pieces):
    """Read pieces in order.

    Returns
    -------
    tokens : np.ndarray of int64, shape (T,)
    lengths : np.ndarray of int64, shape (M,)
    labels : np.ndarray of int64, shape (M,), or None
    ids : pa.Array of large_string, length M
        The ``sequence_id`` values (kept in arrow: a list of M Python strings is costly).
    """
    entries = {entry["path"]: entry for entry in manifest["files"]}
    parts = []
    for name, row_groups in pieces:
        path = storage.join(directory, name)
        if name not in entries:
            raise DataFormatError(path, None, f"not listed in {MANIFEST}")
        if manifest["layout"] == "sequences":
            parts.append(_read_sequences_file(path, manifest, entries[name], row_groups))
        else:
            parts.append(_read_events_file(path, manifest, entries[name]))
    tokens = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    lengths = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    labels = np.concatenate([p[2] for p in parts]) if manifest["labels"] and parts else None
    ids = pa.concat_arrays([p[3].cast(pa.large_string()) for p in parts]) if parts else pa.array([])
    if manifest["layout"] == "events" and len(parts) > 1:
        names = [storage.join(directory, name) for name, _ in pieces]
        _check_one_file_each(names, [len(p[1]) for p in parts], ids)
    return tokens, lengths, labels, ids


def _check_one_file_each(paths: list[Path], counts: list[int], ids: pa.Array) -> None:
    """Events layout: no sequence id of a file may appear in an earlier file.

    Parameters
    ----------
    paths : list of Path, length F
    counts : list of int, length F
        Number of sequences read from each file (its ids are distinct).
    ids : pa.Array of strings, length sum(counts)
        The files' ids, file after file.
    """
    codes = pc.dictionary_encode(ids).indices.to_numpy()  # (M,)
    if codes.size == 0 or int(codes.max()) + 1 == codes.size:
        return
    first = np.full(int(codes.max()) + 1, codes.size, dtype=np.int64)
    np.minimum.at(first, codes, np.arange(codes.size))
    again = int(np.flatnonzero(first[codes] != np.arange(codes.size))[0])
    file_of = np.repeat(np.arange(len(paths)), counts)
    raise DataFormatError(
        paths[file_of[again]],
        None,
        f"sequence id {ids[again].as_py()!r} also appears in {paths[file_of[first[codes[again]]]]}; "
        "the events layout keeps each sequence in one file",
    )


def _open_parquet(path: Path) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(**storage.parquet_source(path))
    except FileNotFoundError:
        raise DataFormatError(path, None, f"listed in {MANIFEST} but missing") from None
    except (pa.ArrowException, OSError) as err:
        raise DataFormatError(path, None, f"not a readable Parquet file ({err})") from None


def _read_columns(path: Path, pf: pq.ParquetFile, columns: list[str], row_groups=None) -> pa.Table:
    present = pf.schema_arrow.names
    missing = [c for c in columns if c not in present]
    if missing:
        raise DataFormatError(
            path,
            None,
            f"missing column {', '.join(map(repr, missing))}; the file has columns: "
            f"{', '.join(present) or '(none)'}",
        )
    try:
        if row_groups is None:
            return pf.read(columns=columns)
        return pf.read_row_groups(list(row_groups), columns=columns)
    except (pa.ArrowException, OSError) as err:
        raise DataFormatError(path, None, f"cannot read the Parquet file ({err})") from None


def _first(mask) -> int | None:
    """Index of the first True of a boolean numpy or arrow array, or None."""
    if isinstance(mask, (pa.Array, pa.ChunkedArray)):
        mask = mask.to_numpy(zero_copy_only=False)
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def _column(path: Path, table: pa.Table, name: str, row_of) -> pa.Array:
    """One column as a single array, refused with the file row of its first null."""
    column = table.column(name).combine_chunks()
    if column.null_count:
        row = _first(column.is_null())
        raise DataFormatError(path, None, f"row {row_of(row)}: null in column {name!r}")
    return column


def _string_column(path: Path, table: pa.Table, name: str, row_of) -> pa.Array:
    column = _column(path, table, name, row_of)
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise DataFormatError(path, None, f"column {name!r} has type {column.type}, expected string")
    empty = _first(pc.equal(pc.utf8_length(column), 0))
    if empty is not None:
        raise DataFormatError(path, None, f"row {row_of(empty)}: empty {name}")
    return column


def _int_column(path: Path, table: pa.Table, name: str, row_of) -> np.ndarray:
    column = _column(path, table, name, row_of)
    if not pa.types.is_integer(column.type):
        raise DataFormatError(path, None, f"column {name!r} has type {column.type}, expected an integer")
    return column.to_numpy().astype(np.int64, copy=False)


def _check_symbols(path: Path, symbols: np.ndarray, n_symbols: int, row_of_token) -> None:
    bad = _first((symbols < 0) | (symbols >= n_symbols))
    if bad is not None:
        raise DataFormatError(
            path,
            None,
            f"row {row_of_token(bad)}: symbol {int(symbols[bad])} is outside 0..{n_symbols - 1} "
            f"(n_symbols {n_symbols})",
        )


def _label_codes(path: Path, table: pa.Table, label_names: list[str], row_of) -> np.ndarray:
    labels = _string_column(path, table, "label", row_of)
    codes = pc.index_in(labels, value_set=pa.array(label_names, type=labels.type))
    unknown = _first(codes.is_null())
    if unknown is not None:
        raise DataFormatError(
            path,
            None,
            f"row {row_of(unknown)}: label {labels[unknown].as_py()!r} is not one of the label names "
            f"{label_names}",
        )
    return codes.to_numpy().astype(np.int64)


def _check_counts(path: Path, what: str, n_sequences: int, n_tokens: int, expected: tuple[int, int]) -> None:
    if (n_sequences, n_tokens) != expected:
        raise DataFormatError(
            path,
            None,
            f"{what} holds {n_sequences} sequences and {n_tokens} tokens, {MANIFEST} says "
            f"{expected[0]} and {expected[1]}",
        )


def _read_sequences_file(path: Path, manifest: dict, entry: dict, row_groups):
    """Rows of the chosen row groups (all for None): tokens, lengths, label codes, ids."""
    pf = _open_parquet(path)
    listed = entry.get("row_groups")
    if listed is not None and pf.num_row_groups != len(listed):
        raise DataFormatError(
            path, None, f"has {pf.num_row_groups} row groups, {MANIFEST} lists {len(listed)}"
        )
    chosen = list(range(pf.num_row_groups)) if row_groups is None else list(row_groups)
    if any(not 0 <= g < pf.num_row_groups for g in chosen):
        raise DataFormatError(path, None, f"has no row group {max(chosen)} (it has {pf.num_row_groups})")
    sizes = [pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)]
    file_start = np.concatenate([[0], np.cumsum(sizes)])[chosen]  # first file row of each read group
    read_start = np.concatenate([[0], np.cumsum([sizes[g] for g in chosen])])

    def row_of(i: int) -> int:
        k = int(np.searchsorted(read_start, i, side="right")) - 1
        return int(file_start[k] + i - read_start[k])

    names = list(_COLUMNS["sequences"]) + (["label"] if manifest["labels"] else [])
    table = _read_columns(path, pf, names, chosen)
    ids = _string_column(path, table, "sequence_id", row_of)
    symbols = _column(path, table, "symbols", row_of)
    kind = symbols.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_integer(
        kind.value_type
    ):
        raise DataFormatError(path, None, f"column 'symbols' has type {kind}, expected list<int32>")
    lengths = pc.list_value_length(symbols).to_numpy().astype(np.int64)
    empty = _first(lengths == 0)
    if empty is not None:
        raise DataFormatError(path, None, f"row {row_of(empty)}: sequence {ids[empty].as_py()!r} is empty")
    flat = pc.list_flatten(symbols)
    ends = np.cumsum(lengths)

    def row_of_token(t: int) -> int:
        return row_of(int(np.searchsorted(ends, t, side="right")))

    if flat.null_count:
        raise DataFormatError(
            path, None, f"row {row_of_token(_first(flat.is_null()))}: null symbol in column 'symbols'"
        )
    tokens = flat.to_numpy().astype(np.int64, copy=False)
    _check_symbols(path, tokens, manifest["n_symbols"], row_of_token)
    labels = None
    if manifest["labels"]:
        labels = _label_codes(path, table, manifest["label_names"], row_of)
    if listed is not None:
        expected = (sum(listed[g]["n_sequences"] for g in chosen), sum(listed[g]["n_tokens"] for g in chosen))
        what = "the file" if row_groups is None else f"row groups {chosen}"
        _check_counts(path, what, lengths.size, tokens.size, expected)
    elif row_groups is None:
        _check_counts(path, "the file", lengths.size, tokens.size, (entry["n_sequences"], entry["n_tokens"]))
    return tokens, lengths, labels, ids


def _read_events_file(path: Path, manifest: dict, entry: dict):
    """A whole events file grouped into sequences: tokens, lengths, label codes, ids."""
    pf = _open_parquet(path)
    names = list(_COLUMNS["events"]) + (["label"] if manifest["labels"] else [])
    table = _read_columns(path, pf, names)

    def row_of(i: int) -> int:
        return i

    encoded = pc.dictionary_encode(_string_column(path, table, "sequence_id", row_of))
    group = encoded.indices.to_numpy().astype(np.int64)  # (R,) by first appearance
    ids = encoded.dictionary
    position = _int_column(path, table, "position", row_of)
    symbols = _int_column(path, table, "symbol", row_of)
    _check_symbols(path, symbols, manifest["n_symbols"], row_of)
    order = np.lexsort((position, group))
    same = group[order][1:] == group[order][:-1]
    twice = _first(same & (position[order][1:] == position[order][:-1]))
    if twice is not None:
        a, b = sorted((int(order[twice]), int(order[twice + 1])))
        seq = ids[int(group[a])].as_py()
        raise DataFormatError(
            path, None, f"rows {a} and {b}: sequence {seq!r} has position {int(position[a])} twice"
        )
    lengths = np.bincount(group, minlength=len(ids)).astype(np.int64)
    labels = None
    if manifest["labels"]:
        codes = _label_codes(path, table, manifest["label_names"], row_of)[order]
        mixed = _first(same & (codes[1:] != codes[:-1]))
        if mixed is not None:
            row = int(order[mixed + 1])
            raise DataFormatError(
                path, None, f"row {row}: sequence {ids[int(group[row])].as_py()!r} has two different labels"
            )
        labels = codes[np.cumsum(lengths) - lengths]  # each sequence's first event
    _check_counts(path, "the file", lengths.size, symbols.size, (entry["n_sequences"], entry["n_tokens"]))
    return symbols[order], lengths, labels, ids


# ============================================================================ small checks
def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")


def _positive_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)
