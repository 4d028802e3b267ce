"""Download a UCI data set into the data directory and verify its checksum.

``fetch("splice", "data/")`` downloads the UCI distribution, takes the standard file out of
it (zip, gzip or tar are unpacked as needed), checks its SHA-256 and moves it into place
under the name the loaders read. Nothing is left behind on failure: the download goes to a
temporary file in the data directory that is removed on any error, including a checksum
mismatch; the verified file is renamed into place (:func:`ldhmm.data.atomic.replace_into_place`:
atomic, with the permissions ``open()`` gives a new file).

The SHA-256 values (:data:`DATASETS`) are those of the standard files the experiments in this
repository were run on. The hashes of UCI's zip downloads are not known here, so the checksum
verified is always that of the extracted standard file (for MSNBC: of the uncompressed
``msnbc990928.seq`` content, since gzip output differs between compressors).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .atomic import replace_into_place

__all__ = ["DatasetSource", "DATASETS", "ChecksumError", "fetch", "sha256_of"]


@dataclass(frozen=True)
class DatasetSource:
    """Where a UCI data set comes from and what the loaders expect.

    Attributes
    ----------
    name : str
    urls : tuple of str
        Download locations, tried in order.
    filename : str
        The standard file the loader reads.
    sha256 : str
        SHA-256 of the standard file; of its uncompressed content if ``hash_content``.
    members : tuple of str
        File names accepted inside a downloaded archive (base names).
    keep_gzip : bool
        A gzip-compressed download is kept compressed (the loader reads gzip); it is then
        stored as ``filename + ".gz"`` unless ``filename`` already ends in ``.gz``.
    hash_content : bool
        Hash the decompressed content of a gzip file rather than its bytes.
    """

    name: str
    urls: tuple
    filename: str
    sha256: str
    members: tuple
    keep_gzip: bool = False
    hash_content: bool = False


# UCI's zip hashes are not known here; the checksum verified is of the extracted file.
DATASETS: dict[str, DatasetSource] = {
    "msnbc": DatasetSource(
        name="msnbc",
        urls=("https://archive.ics.uci.edu/static/public/133/msnbc+com+anonymous+web+data.zip",),
        filename="msnbc990928.seq",
        sha256="982d85eb7aff1744e64d8bfadb21f53fb921b79d53b6305d4df232da59f218fe",
        members=("msnbc990928.seq", "msnbc990928.seq.gz"),
        keep_gzip=True,
        hash_content=True,
    ),
    "splice": DatasetSource(
        name="splice",
        urls=(
            "https://archive.ics.uci.edu/static/public/69/molecular+biology+splice+junction+gene+sequences.zip",
        ),
        filename="splice.data",
        sha256="ebbae10c85d3c285e2a2489a37e42bc2ee8d91d15005e391a9962fa3389a114f",
        members=("splice.data",),
    ),
    "entree": DatasetSource(
        name="entree",
        urls=("https://archive.ics.uci.edu/static/public/123/entree+chicago+recommendation+data.zip",),
        filename="entree_data.tar.gz",
        sha256="b825f193b17dde3b0dccc09a771eb5b6e5da14982569807dd9e51c69ab3aa2b7",
        members=("entree_data.tar.gz",),
        keep_gzip=True,
    ),
}


class ChecksumError(ValueError):
    """The downloaded file's SHA-256 differs from the expected one."""

    def __init__(self, name: str, expected: str, actual: str, url: str):
        self.expected, self.actual, self.url = expected, actual, url
        super().__init__(
            f"checksum mismatch for {name} from {url}: expected sha256 {expected}, got {actual}; "
            "the download was discarded"
        )


def sha256_of(path, content: bool = False) -> str:
    """SHA-256 of a file (of its decompressed content when ``content`` and it is gzip)."""
    h = hashlib.sha256()
    opener = gzip.open if content and _is_gzip(path) else open
    with opener(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _is_gzip(path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def _download(url: str, target: Path, quiet: bool) -> None:
    from tqdm import tqdm

    with urllib.request.urlopen(url, timeout=60) as response, open(target, "wb") as out:
        total = response.headers.get("Content-Length")
        with tqdm(
            total=int(total) if total else None,
            unit="B",
            unit_scale=True,
            desc=os.path.basename(url.rstrip("/")) or url,
            disable=quiet,
        ) as bar:
            for block in iter(lambda: response.read(1 << 16), b""):
                out.write(block)
                bar.update(len(block))


def _extract_member(archive_names, open_member, members: tuple, url: str, tmp_dir: Path, temps: list):
    wanted = set(members)
    candidates = [
        n for n in archive_names if os.path.basename(n) in wanted and "__MACOSX" not in n.split("/")
    ]
    if not candidates:
        raise ValueError(
            f"the download from {url} holds none of {', '.join(members)} "
            f"(it holds: {', '.join(list(archive_names)[:10])}); pass --url to a file that does"
        )
    # prefer the order given in members
    candidates.sort(key=lambda n: members.index(os.path.basename(n)))
    fd, out_name = tempfile.mkstemp(prefix=".fetch-", suffix=".part", dir=tmp_dir)
    temps.append(Path(out_name))
    with os.fdopen(fd, "wb") as out, open_member(candidates[0]) as src:
        shutil.copyfileobj(src, out)
    return Path(out_name)


def fetch(
    name: str,
    data_dir,
    url: str | None = None,
    sha256: str | None = None,
    quiet: bool = False,
    force: bool = False,
) -> Path:
    """Download data set ``name`` into ``data_dir``; return the path of the standard file.

    Parameters
    ----------
    name : {"msnbc", "entree", "splice"}
    data_dir : str or os.PathLike
        Created if missing.
    url : str, optional
        Download from here instead of UCI (any ``urllib`` URL, ``file://`` included). The
        download may be the standard file itself, or a zip, gzip or tar that holds it.
    sha256 : str, optional
        Expected SHA-256 instead of the registry's (same convention: of the standard file).
    quiet : bool
        No progress bar.
    force : bool
        Download even if a verified copy is already there.

    Raises
    ------
    ChecksumError
        On a mismatch (nothing is left in ``data_dir``).
    ValueError
        Unknown name, or an archive that holds no expected file.
    urllib.error.URLError
        When no URL could be downloaded.
    """
    key = str(name).lower()
    if key not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; known: {', '.join(DATASETS)}")
    spec = DATASETS[key]
    expected = (sha256 or spec.sha256).lower()
    data_dir = Path(data_dir).expanduser()
    data_dir.mkdir(parents=True, exist_ok=True)

    if not force:
        for existing in (data_dir / spec.filename, data_dir / (spec.filename + ".gz")):
            if existing.is_file() and sha256_of(existing, spec.hash_content) == expected:
                if not quiet:
                    print(f"{existing} is already there and verified")
                return existing

    temps: list[Path] = []
    try:
        fd, part = tempfile.mkstemp(prefix=".fetch-", suffix=".part", dir=data_dir)
        os.close(fd)
        current = Path(part)
        temps.append(current)
        urls = (url,) if url else spec.urls
        errors = []
        for candidate_url in urls:
            try:
                _download(candidate_url, current, quiet)
                used_url = candidate_url
                break
            except (urllib.error.URLError, OSError) as err:
                errors.append(f"{candidate_url}: {err}")
        else:
            raise urllib.error.URLError("; ".join(errors))
        if zipfile.is_zipfile(current):
            with zipfile.ZipFile(current) as zf:
                current = _extract_member(zf.namelist(), zf.open, spec.members, used_url, data_dir, temps)
        is_gz = _is_gzip(current)
        if is_gz and not spec.keep_gzip:
            fd, out_name = tempfile.mkstemp(prefix=".fetch-", suffix=".part", dir=data_dir)
            temps.append(Path(out_name))
            with os.fdopen(fd, "wb") as out, gzip.open(current, "rb") as src:
                shutil.copyfileobj(src, out)
            current, is_gz = Path(out_name), False
        if not spec.filename.endswith((".tar.gz", ".tgz", ".tar")) and tarfile.is_tarfile(current):
            with tarfile.open(current) as tf:
                names = [m.name for m in tf.getmembers() if m.isfile()]
                current = _extract_member(names, tf.extractfile, spec.members, used_url, data_dir, temps)
            is_gz = _is_gzip(current)

        actual = sha256_of(current, spec.hash_content)
        if actual != expected:
            raise ChecksumError(key, expected, actual, used_url)
        final_name = spec.filename
        if is_gz and not spec.filename.endswith(".gz"):
            final_name = spec.filename + ".gz"
        final = data_dir / final_name
        replace_into_place(current, final)
        temps.remove(current)
        if not quiet:
            print(f"saved {final} (sha256 verified)")
        return final
    finally:
        for t in temps:
            try:
                t.unlink()
            except FileNotFoundError:
                pass
