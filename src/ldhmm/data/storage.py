"""Where a partitioned data set's files live: a local directory, or any fsspec URL
(``s3://bucket/parts``, ``gs://...``, ``hdfs://...``, ``file:///...``).

Local paths go through :mod:`pathlib` and need nothing more. A URL is opened with fsspec
(``pip install "ldhmm[remote]"``; ``s3://`` also needs ``s3fs``, ``gs://`` ``gcsfs``), which takes
its credentials and end point from the environment of the process that opens it (for S3:
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, or ``~/.aws``): on a
cluster the driver reads only ``dataset.json`` and every worker its own Parquet files, so every
worker needs the same environment.

A location is a :class:`pathlib.Path` (local) or a ``str`` URL without a trailing slash; the
functions below take either.
"""

from __future__ import annotations

import importlib
import math
import os
import re
from pathlib import Path

from .terminal_text import without_credentials

__all__ = [
    "is_url",
    "location",
    "join",
    "read_bytes",
    "is_dir",
    "exists",
    "parquet_source",
    "file_sizes",
    "upload_directory",
    "check_remote_target",
    "network_timeout",
    "NETWORK_TIMEOUT_ENV",
]

#: The environment variable of the seconds an object store may take to answer (each connection
#: and each read; on a cluster, every worker's environment): an end point that never answers is
#: one line naming the URL, not a hang.
NETWORK_TIMEOUT_ENV = "LDHMM_NETWORK_TIMEOUT"
#: Its default.
NETWORK_SECONDS = 5.0
#: Attempts of each call to an object store (its client's own retries included).
_CALL_ATTEMPTS = 1

# scheme://..., the scheme as RFC 3986 spells it (a Windows drive "C:\" never matches)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path) -> bool:
    """Whether ``path`` is a URL (``scheme://...``) rather than a local path."""
    return isinstance(path, str) and _URL.match(path) is not None


def location(path):
    """``path`` as a location: a URL without its trailing slash, or an absolute local Path."""
    if is_url(path):
        return path.rstrip("/")
    return Path(os.path.abspath(path))


def join(directory, name: str):
    """The file ``name`` inside the location ``directory``."""
    if is_url(directory):
        return f"{directory}/{name}"
    return Path(directory) / name


def _fsspec():
    """fsspec, an optional dependency (loaded only for a URL)."""
    try:
        return importlib.import_module("fsspec")
    except ImportError as err:
        raise ValueError(f'a URL needs fsspec: pip install "ldhmm[remote]" ({err})') from None


def network_timeout() -> float:
    """Seconds an object store's connection, and each of its reads, may take: the environment
    variable :data:`NETWORK_TIMEOUT_ENV` (a number of seconds), else :data:`NETWORK_SECONDS`."""
    text = os.environ.get(NETWORK_TIMEOUT_ENV, "").strip()
    if not text:
        return NETWORK_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(
            f"environment variable {NETWORK_TIMEOUT_ENV}: {text!r} is not a number of seconds > 0"
        )
    return seconds


def _bounded_options(url: str) -> dict:
    """The fsspec options that bound ``url``'s waits (S3: botocore's connect and read timeouts,
    two attempts); none for a scheme without such options."""
    seconds = network_timeout()
    if url.split("://", 1)[0].lower() in ("s3", "s3a"):
        return {
            "config_kwargs": {
                "connect_timeout": seconds,
                "read_timeout": seconds,
                "retries": {"max_attempts": 2},
            }
        }
    return {}


def _filesystem(url: str):
    """(fsspec file system, path inside it) of ``url``, its waits bounded (:func:`network_timeout`);
    a scheme without its fsspec package installed (s3fs for ``s3://``) is one line naming it."""
    try:
        fs, path = _fsspec().core.url_to_fs(url, **_bounded_options(url))
    except ImportError as err:
        raise ValueError(f"{without_credentials(url)}: {err}") from None
    if hasattr(fs, "retries"):  # s3fs retries each call 5 times by default: 5 timeouts in a row
        fs.retries = _CALL_ATTEMPTS
    return fs, path


def _remote(url: str, call):
    """``call(fs, path)`` on the file system of ``url``; its errors as one line naming the URL
    (its credentials masked; a missing file or bucket stays a ``FileNotFoundError``, which
    callers name; the ``FileExistsError`` and ``ValueError`` of this module's own checks pass as
    they are), a timeout saying how to wait longer."""
    fs, path = _filesystem(url)
    try:
        return call(fs, path)
    except (FileNotFoundError, IsADirectoryError, FileExistsError, ValueError):
        raise
    except Exception as err:  # noqa: BLE001 - a client library's own error types (botocore, aiohttp, ...)
        detail = without_credentials(" ".join(str(err).split()) or type(err).__name__, url)
        hint = ""
        if "timeout" in type(err).__name__.lower() or "timed out" in detail.lower():
            hint = (
                f" (the end point did not answer within {network_timeout():g} s; "
                f"{NETWORK_TIMEOUT_ENV}=SECONDS waits longer)"
            )
        raise OSError(f"{without_credentials(url)}: {type(err).__name__}: {detail}{hint}") from None


def read_bytes(path) -> bytes:
    """The contents of the file ``path`` (raises ``FileNotFoundError`` when there is none)."""
    if not is_url(path):
        return Path(path).read_bytes()

    def read(fs, inner):
        if fs.isdir(inner):
            raise IsADirectoryError(path)
        return fs.cat_file(inner)

    return _remote(path, read)


def is_dir(path) -> bool:
    """Whether ``path`` is a directory (for an object store: a prefix that holds objects)."""
    if not is_url(path):
        return Path(path).is_dir()
    return bool(_remote(path, lambda fs, inner: fs.isdir(inner)))


def exists(path) -> bool:
    """Whether ``path`` exists (a file, or a directory / prefix)."""
    if not is_url(path):
        return Path(path).exists()
    return bool(_remote(path, lambda fs, inner: fs.exists(inner)))


def parquet_source(path) -> dict:
    """Keyword arguments of :class:`pyarrow.parquet.ParquetFile` that open ``path``: the local
    path, or the path inside the URL's file system with that file system (pyarrow reads only
    the byte ranges of the row groups it is asked for)."""
    if not is_url(path):
        return {"source": path}
    fs, inner = _filesystem(path)
    return {"source": inner, "filesystem": fs}


def file_sizes(directory, names: list[str]) -> list[int]:
    """Bytes of each file ``names`` in ``directory``."""
    if not is_url(directory):
        return [(Path(directory) / name).stat().st_size for name in names]
    return _remote(directory, lambda fs, inner: [int(fs.size(f"{inner}/{name}")) for name in names])


def unlisted_message(where: str, others: list[str]) -> str:
    """The refusal of an ``overwrite`` whose target holds ``others``, names its manifest does not list."""
    more = f" and {len(others) - 1} more" if len(others) > 1 else ""
    return (
        f"{where}: holds {others[0]!r}{more}, which its data set's manifest does not list; "
        "refusing to replace it (move that away, or export to another directory)"
    )


def check_remote_target(url: str, overwrite: bool, manifest: str, listed) -> set[str]:
    """Refuse to write a data set at ``url`` when it holds files, unless ``overwrite`` and it
    is a data set whose ``manifest`` lists every file in it, so that nothing else is ever
    deleted. ``listed(manifest_bytes, where)``: the names the manifest allows to replace (it
    raises ValueError for a foreign manifest). Returns the names to delete (empty: none)."""

    def check(fs, inner):
        fs.invalidate_cache(inner)  # what is there now, not a listing cached earlier in this process
        if not fs.exists(inner) or not fs.ls(inner, detail=False):
            return set()
        if not overwrite:
            raise FileExistsError(
                f"{url}: exists and is not empty; pass overwrite=True (--overwrite) to replace it"
            )
        if not fs.isfile(f"{inner}/{manifest}"):
            raise ValueError(f"{url}: not a partitioned data set (no {manifest}); refusing to replace it")
        names = listed(fs.cat_file(f"{inner}/{manifest}"), url)
        entries = fs.ls(inner, detail=True)
        others = sorted(
            e["name"].rstrip("/").rsplit("/", 1)[-1]
            for e in entries
            if e["name"].rstrip("/").rsplit("/", 1)[-1] not in names or e.get("type") != "file"
        )
        if others:
            raise ValueError(unlisted_message(url, others))
        return names

    return _remote(url, check)


def upload_directory(local: Path, url: str, manifest: str, overwrite: bool, listed) -> None:
    """Copy the files of the finished local data set ``local`` to ``url``, ``manifest`` last:
    a reader that finds it finds every file it lists. With ``overwrite`` the files of the data
    set already at ``url`` (checked by :func:`check_remote_target`, again) are removed first,
    and nothing else."""
    old = check_remote_target(url, overwrite, manifest, listed)

    def upload(fs, inner):
        # the manifest first: a reader never finds a manifest whose files are gone
        for name in sorted(old, key=lambda n: n != manifest):
            fs.rm_file(f"{inner}/{name}")
        protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
        if "file" in protocols:
            # a local directory must exist before its files (an object store has no
            # directories, and an export never creates a bucket)
            fs.makedirs(inner, exist_ok=True)
        names = sorted(p.name for p in local.iterdir() if p.name != manifest)
        for name in names + [manifest]:
            fs.put_file(str(local / name), f"{inner}/{name}")

    _remote(url, upload)
