"""The one store of per-sequence (variational) state: what lets a stopped fit (its checkpoint), a
path along K (``ldhmm fit --states a..b``) and the harness's fits along K go on where they stopped.

A *state file* is numpy's NPZ, its arrays stored uncompressed, written atomically
(:func:`ldhmm.data.atomic.write_atomically`) by :func:`write_states` and read back by
:func:`read_states` through the hardened reader (:func:`ldhmm.data.npz_archives.read_stored_npz`:
a regular file, members stored, every header checked before its data, no pickles). Its members:

- ``manifest``: a JSON record as UTF-8 bytes (``uint8``): ``format`` = :data:`STATE_FORMAT`,
  ``version`` = :data:`STATE_VERSION`, ``n_states`` (K), ``dtype`` (``"float64"`` or
  ``"float32"``: every array's), ``parts`` (per partition, per bucket, the names of its arrays)
  and ``owner`` (what the state belongs to, a JSON record the reader compares with its own: the
  training data's SHA-256 for a path's state, the checkpoint's fit, run and iteration for a
  checkpoint's);
- ``p{P}/b{B}/{name}``: bucket ``B`` of partition ``P`` (the fit's layout of its data), each
  ``name`` of :data:`ARRAY_NAMES`: the expected counts ``counts_pi`` (M, K), ``counts_A``
  (M, K, K), ``counts_B`` (M, K, W); a guide's state marginals ``phi`` (M, T, K); the
  per-sequence ``entropy``, ``elbo`` and ``local_elbo`` (M,).

Reading checks every field of the manifest and every array (its name listed, its dtype the
manifest's, its shape against K and its bucket's M, its values: counts and marginals finite and
>= 0, the bounds finite) and refuses in one :class:`StateFileError` line naming the file and the
field or array, ended by the caller's way to start over.

Files written before this store are read too (``legacy=``): a checkpoint's state file
(``checkpoint.state.rR.iN.npz``: the same arrays without a manifest; its checkpoint's fingerprint
ties it to the fit) and a path's state file of format ``ldhmm-path-state`` version 1 (members
``format``, ``version``, ``n_states``, ``n_buckets``, ``sha256`` and per bucket ``pi_b``, ``A_b``,
``B_b``, ``phi_b``: one partition's counts and marginals), each checked as a new file is.
"""

from __future__ import annotations

import functools
import io
import json
import re

import numpy as np
import torch

from ..data.atomic import write_atomically
from ..data.npz_archives import read_stored_npz
from ..data.terminal_text import shown
from .cavi.expectation import BucketState

__all__ = [
    "STATE_FORMAT",
    "STATE_VERSION",
    "ARRAY_NAMES",
    "COUNTS",
    "CHECKPOINT_ARRAYS",
    "StateFileError",
    "write_states",
    "write_npz",
    "read_states",
    "bucket_arrays",
    "bucket_states",
]

#: The ``format`` of a state file's manifest.
STATE_FORMAT = "ldhmm-sequence-state"
STATE_VERSION = 1
#: The expected counts of a bucket: every state file holds them.
COUNTS = ("counts_pi", "counts_A", "counts_B")
#: The per-sequence bounds of a bucket.
BOUNDS = ("entropy", "elbo", "local_elbo")
#: Every array a bucket may hold.
ARRAY_NAMES = (*COUNTS, "phi", *BOUNDS)
#: What a checkpoint's state holds of every bucket (``phi`` besides, for a guide with marginals).
CHECKPOINT_ARRAYS = (*COUNTS, *BOUNDS)
_MANIFEST = "manifest"
_MAX_MANIFEST_BYTES = 64 << 20
_KEY = re.compile(r"p(\d+)/b(\d+)/(\w+)")
# the path's state file before this store: format "ldhmm-path-state", version 1
_OLD_PATH_FORMAT = "ldhmm-path-state"
_OLD_PATH_FIELDS = ("format", "version", "n_states", "n_buckets", "sha256")
_OLD_PATH_KEY = re.compile(r"(pi|A|B|phi)_(\d+)")


class StateFileError(ValueError):
    """A state file that cannot be used: one line naming the file and the field or array, and how
    to start over."""


def write_states(path, parts: list, n_states: int, owner: dict) -> None:
    """Write ``parts`` (per partition, per bucket, a dict of arrays named as :data:`ARRAY_NAMES`)
    to the state file ``path``, atomically, with its manifest (``owner``: JSON-able)."""
    arrays, names = {}, []
    dtypes = set()
    for p, part in enumerate(parts):
        names.append([])
        for b, bucket in enumerate(part):
            names[-1].append(sorted(bucket))
            for name, value in bucket.items():
                if name not in ARRAY_NAMES:
                    raise ValueError(f"write_states: '{name}' is not an array of a state file")
                value = np.asarray(value)
                dtypes.add(value.dtype)
                arrays[f"p{p}/b{b}/{name}"] = value
    if len(dtypes) > 1:
        raise ValueError(f"write_states: arrays of several dtypes ({sorted(map(str, dtypes))})")
    manifest = {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "n_states": int(n_states),
        "dtype": str(dtypes.pop()) if dtypes else "float64",
        "parts": names,
        "owner": owner,
    }
    arrays[_MANIFEST] = np.frombuffer(json.dumps(manifest, sort_keys=True).encode(), dtype=np.uint8)
    write_npz(path, arrays)


def write_npz(path, arrays: dict) -> None:
    """``arrays`` as the NPZ archive ``path`` (stored, not compressed: what
    :func:`ldhmm.data.npz_archives.read_stored_npz` reads back), written atomically."""

    def write(f):
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        f.write(buffer.getvalue())

    write_atomically(path, write, binary=True)


def read_states(
    path,
    *,
    n_states: int,
    owner: dict | None,
    start_over: str,
    what: str = "state file",
    required: tuple = COUNTS,
    dtype=None,
    n_partitions: int | None = None,
    legacy: tuple = (),
    follow: bool = True,
) -> list:
    """The state of the file ``path``: per partition, per bucket, a dict of numpy arrays.

    Parameters
    ----------
    n_states : int
        The K the state must have.
    owner : dict or None
        What the manifest's ``owner`` must hold (every key given; None: not checked).
    start_over : str
        How to start over, ending every refusal.
    what : str
        What the file is, in the messages.
    required : tuple of str
        The arrays every bucket must hold.
    dtype : numpy dtype, optional
        The dtype the arrays must have.
    n_partitions : int, optional
        The number of partitions the state must have.
    legacy : tuple of str
        Files of before this store that are read: ``"checkpoint"`` (a checkpoint's state file, no
        manifest) and ``"path"`` (a path's state file of format ``ldhmm-path-state``).
    follow : bool
        Follow a symbolic link at ``path``.

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    StateFileError
        One line naming the file and the field or array, ended by ``start_over``.
    """
    where = shown(path)

    def refuse(problem: str) -> StateFileError:
        return StateFileError(f"{what} {where}: {problem}: {start_over}")

    def member(key, shape, kind):
        if key == _MANIFEST:
            if kind != np.uint8 or len(shape) != 1 or shape[0] > _MAX_MANIFEST_BYTES:
                return f"expected at most {_MAX_MANIFEST_BYTES} bytes of JSON, got shape {shape} of {kind}"
            return None
        if "path" in legacy and key in _OLD_PATH_FIELDS:
            return None if len(shape) == 0 else f"has shape {shape}, a field's is ()"
        match = _KEY.fullmatch(key)
        if (match is None or match.group(3) not in ARRAY_NAMES) and not (
            "path" in legacy and _OLD_PATH_KEY.fullmatch(key)
        ):
            return "not an array of a state file"
        if kind not in (np.float32, np.float64):
            return f"holds {kind} values; a state file's arrays are float64 (float32 for a float32 fit)"
        return None if len(shape) <= 3 else f"has {len(shape)} dimensions"

    try:
        arrays = read_stored_npz(path, what, member, follow=follow, text=("format", "sha256"))
    except ValueError as err:  # FileNotFoundError goes to the caller
        raise StateFileError(f"{what} {err}: {start_over}") from None
    old_path = False
    if _MANIFEST in arrays:
        manifest = _manifest(arrays.pop(_MANIFEST), refuse)
        parts = _parts(arrays, manifest["parts"], refuse)
        file_k, file_dtype, file_owner = manifest["n_states"], np.dtype(manifest["dtype"]), manifest["owner"]
    elif "path" in legacy and "format" in arrays:
        parts, file_k, file_owner = _old_path_parts(arrays, refuse)
        file_dtype, old_path = None, True
    elif "checkpoint" in legacy and arrays and all(_KEY.fullmatch(k) for k in arrays):
        # K, the dtype and the owner come with the checkpoint that names the file
        parts = _parts(arrays, _old_names(arrays), refuse)
        file_k, file_dtype, file_owner = n_states, None, None
    else:
        raise refuse(f"no array '{_MANIFEST}' (not an ldhmm state file)")
    if file_k != n_states:
        raise refuse(f"field 'n_states': K = {file_k} there, {n_states} here")
    if dtype is not None and file_dtype is not None and np.dtype(dtype) != file_dtype:
        raise refuse(f"field 'dtype' is {file_dtype}, the fit {np.dtype(dtype)}")
    for key, want in (owner or {}).items() if file_owner is not None else ():
        there = file_owner.get(key) if isinstance(file_owner, dict) else None
        if there != want:
            raise refuse(
                f"field 'owner.{key}' is {shown(repr(there))} there, {want!r} here (the state of another fit)"
            )
    if n_partitions is not None and len(parts) != n_partitions:
        raise refuse(f"field 'parts': {len(parts)} partitions, the fit has {n_partitions}")
    for p, part in enumerate(parts):
        for b, bucket in enumerate(part):
            key = functools.partial(_old_path_key if old_path else _key, p, b)
            _check_bucket(key, bucket, n_states, required, dtype or file_dtype, refuse)
    return parts


def _key(p: int, b: int, name: str) -> str:
    """The member of array ``name`` of bucket ``b`` of partition ``p``."""
    return f"p{p}/b{b}/{name}"


def _old_path_key(p: int, b: int, name: str) -> str:
    """The member of array ``name`` of bucket ``b`` in a path's state file of before the store."""
    return f"{name.removeprefix('counts_')}_{b}"


def _manifest(raw: np.ndarray, refuse) -> dict:
    """The manifest's JSON, each field checked."""
    try:
        manifest = json.loads(raw.tobytes().decode())
    except (UnicodeDecodeError, ValueError) as err:
        raise refuse(f"array '{_MANIFEST}' is not JSON ({shown(err)})") from None
    if not isinstance(manifest, dict):
        raise refuse(f"array '{_MANIFEST}' is not a record")
    if manifest.get("format") != STATE_FORMAT or manifest.get("version") != STATE_VERSION:
        got = (manifest.get("format"), manifest.get("version"))
        raise refuse(f"field 'format', 'version': {shown(repr(got))}, this ldhmm reads ({STATE_FORMAT!r}, 1)")
    k = manifest.get("n_states")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise refuse(f"field 'n_states' is {shown(repr(k))}, not a K >= 1")
    if manifest.get("dtype") not in ("float32", "float64"):
        raise refuse(f"field 'dtype' is {shown(repr(manifest.get('dtype')))}, not float64 or float32")
    parts = manifest.get("parts")
    if not isinstance(parts, list) or not all(
        isinstance(part, list)
        and all(isinstance(names, list) and all(n in ARRAY_NAMES for n in names) for names in part)
        for part in parts
    ):
        raise refuse("field 'parts' is not a list of partitions of buckets of array names")
    if "owner" not in manifest:
        raise refuse("field 'owner' missing")
    return manifest


def _old_names(arrays: dict) -> list:
    """The per-partition, per-bucket names of a file without a manifest (a checkpoint's of before)."""
    names: list = []
    for key in arrays:
        p, b, name = _KEY.fullmatch(key).groups()
        p, b = int(p), int(b)
        while len(names) <= p:
            names.append([])
        while len(names[p]) <= b:
            names[p].append([])
        names[p][b].append(name)
    return names


def _parts(arrays: dict, names: list, refuse) -> list:
    """The arrays as partitions of buckets, exactly those ``names`` lists."""
    parts, listed = [], set()
    for p, part in enumerate(names):
        parts.append([])
        for b, bucket in enumerate(part):
            parts[p].append({})
            for name in bucket:
                key = f"p{p}/b{b}/{name}"
                if key not in arrays:
                    raise refuse(f"no array '{key}'")
                parts[p][b][name] = arrays[key]
                listed.add(key)
    stray = sorted(set(arrays) - listed)
    if stray:
        raise refuse(f"array '{shown(stray[0])}' is not one the manifest lists")
    return parts


def _old_path_parts(arrays: dict, refuse) -> tuple:
    """(parts, K, owner) of a path's state file of format ``ldhmm-path-state`` version 1."""
    for field in _OLD_PATH_FIELDS:
        if field not in arrays:
            raise refuse(f"no array '{field}'")
    if str(arrays["format"]) != _OLD_PATH_FORMAT or arrays["version"] != 1:
        raise refuse("field 'format', 'version': not a path state file this ldhmm reads")
    k, n_buckets = arrays["n_states"], arrays["n_buckets"]
    for field, value, least in (("n_states", k, 1), ("n_buckets", n_buckets, 0)):
        if value.dtype.kind not in "iu" or value < least:
            raise refuse(f"field '{field}' is {shown(repr(value))}, not an integer >= {least}")
    bucket_of = {}
    for key in arrays:
        match = _OLD_PATH_KEY.fullmatch(key)
        if match:
            bucket_of[key] = int(match.group(2))
            if bucket_of[key] >= n_buckets:
                raise refuse(f"array '{key}': the file has {int(n_buckets)} buckets")
    bucket = [{} for _ in range(int(n_buckets))]
    renamed = {"pi": "counts_pi", "A": "counts_A", "B": "counts_B", "phi": "phi"}
    for key, b in bucket_of.items():
        bucket[b][renamed[key.split("_")[0]]] = arrays[key]
    return [bucket], int(k), {"sha256": str(arrays["sha256"])}


def _check_bucket(key, bucket: dict, K: int, required: tuple, dtype, refuse) -> None:
    """A bucket's arrays (``key(name)``: an array's member, for the messages): those ``required``
    there, every dtype ``dtype`` (where given; else one dtype), shapes against K and the bucket's
    M, values (counts and marginals finite and >= 0, bounds finite)."""
    for name in (*required, "counts_pi"):
        if name not in bucket:
            raise refuse(f"no array '{key(name)}'")
    M = bucket["counts_pi"].shape[0] if bucket["counts_pi"].ndim else -1
    want = np.dtype(dtype) if dtype is not None else bucket["counts_pi"].dtype
    for name in sorted(bucket):
        array = bucket[name]
        if array.dtype != want:
            raise refuse(f"array '{key(name)}' holds {array.dtype} values, the fit {want}")
        shape = array.shape
        ok = {
            "counts_pi": shape == (M, K),
            "counts_A": shape == (M, K, K),
            "counts_B": len(shape) == 3 and shape[:2] == (M, K),
            "phi": len(shape) == 3 and (shape[0], shape[2]) == (M, K),
        }.get(name, shape == (M,))
        if not ok:
            raise refuse(
                f"array '{key(name)}' of shape {shape}: the state has K = {K} and M = {M} sequences here"
            )
        problem = None
        if np.isnan(array).any():
            problem = "holds NaN"
        elif not np.isfinite(array).all():
            problem = "holds an infinite value"
        elif name not in BOUNDS and (array < 0).any():
            problem = f"holds a negative count ({float(array.min()):g})"
        if problem:
            raise refuse(f"array '{key(name)}' {problem}")


def bucket_arrays(states: list) -> list:
    """One partition's states (BucketState per bucket) as the arrays of a state file: the
    expected counts and the guide's state marginals where it has them (a path's state)."""
    out = []
    for st in states:
        arrays = {f"counts_{g}": st.counts[g].detach().cpu().numpy() for g in ("pi", "A", "B")}
        if isinstance(st.guide_state, torch.Tensor):
            arrays["phi"] = st.guide_state.detach().cpu().numpy()
        out.append(arrays)
    return out


def bucket_states(buckets: list) -> list:
    """The arrays of :func:`bucket_arrays` read back as BucketState (no bounds: a state that EM
    continues from)."""
    out = []
    for arrays in buckets:
        counts = {g: torch.from_numpy(np.ascontiguousarray(arrays[f"counts_{g}"])) for g in ("pi", "A", "B")}
        phi = arrays.get("phi")
        phi = None if phi is None else torch.from_numpy(np.ascontiguousarray(phi))
        out.append(BucketState(counts, None, phi, None, None, {}, 0))
    return out
