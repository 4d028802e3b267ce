"""The model-file schema: every field a saved LDHMM-family model holds, checked on load.

A model file is JSON (never pickle) written by :func:`write_model_file` (what
:meth:`ldhmm.models.variant_hmm.VariantHMM.save` calls) and read back by :func:`read_model_file`
(:meth:`ldhmm.models.variant_hmm.VariantHMM.load`)::

    format        "ldhmm"
    version       1 or 2 (FORMAT_HISTORY); a newer version is refused with both numbers
    class         the estimator class ("LDHMM", "VariantHMM", "VBHMM", "HMMV", ...)
    config        the constructor's settings: each of the type of its default (an int where
                  the default is an int, never a bool; a finite number where it is a float;
                  a string; null only where the default is null), and in its range
    sharing       {"pi", "A", "B": "sequence" | "shared" | "point", "learn_prior": bool,
                   "pseudocount": number >= 0}; for a class with a fixed sharing, that one
    prior         {group: Dirichlet concentrations} for every "sequence" and "shared" group,
                  each finite and in [MIN_CONCENTRATION, MAX_CONCENTRATION] (the M-step's box)
    posterior     {group: concentrations} for every "shared" group: finite, in
                  [MIN_CONCENTRATION, MAX_POSTERIOR_CONCENTRATION]
    log_point     {group: log-probabilities} for every "point" group: <= 0 or -inf, not NaN,
                  every row normalized (logsumexp within 1e-6 of 0)
    elbo_history  a list of finite numbers
    vocabulary    (version 2) null or V distinct strings
    arrays        (optional, version 2 files from ldhmm 0.2.0 on) the name of a side file in
                  the same directory, an NPZ archive (numpy's format, read with
                  allow_pickle=False) holding the large arrays: a group whose value is
                  {"npz": KEY} is the archive's float64 array KEY ("prior.B", ...), checked
                  like an inline one. Written only when some array has at least
                  NPZ_MIN_ENTRIES entries (large vocabularies); an older ldhmm refuses such a
                  file with "field 'arrays': unknown field", never misreads it.
    fit_history   (optional, ldhmm 0.2.0 on) {"restarts": [[number, ...], ...], "kept": int or
                  null}: the training ELBO per EM iteration of every restart (finite numbers;
                  ``restart_elbo_histories_``) and the index of the restart the fit kept
                  (``kept_restart_``; null: none, a fit from a given start); optionally
                  "start": how the kept run started (``start_kind_``): "restart", "seeded"
                  (the symbol-seeded start), "hmm" (the database-level HMM), "init" (given
                  parameters), "continued" (the K - 1 fit continued along a path) or "split:k"
                  (state k of the K - 1 fit split); files written before it have none;
                  optionally "stopped": how the fit stopped, one line (``str`` of its
                  ``convergence_``), and "starts": {"seeded" | "hmm": [number, ...]}, the
                  training ELBO per EM iteration of every run from a start that is no random
                  restart (``start_elbo_histories_``)
    training_data (optional, ldhmm 0.2.0 on) {"source": str, "n_sequences": int >= 0,
                  "n_tokens": int >= 0, "sha256": 64 hex digits or null}: the file the model was
                  fitted on (or "Python data"), its size and the SHA-256 of its coded sequences
                  (:func:`ldhmm.data.fingerprint.content_sha256`; ``training_data_``)

with shapes pi (K,), A (K, K), B (K, V), K = ``config.n_states`` and V = ``config.n_symbols``
(when that is null: the vocabulary's length, else B's width).

A model of the SVI route (:class:`ldhmm.models.pyro_sequence.PyroSequenceModel`, class
``"PyroSequenceModel"``) is a user's Pyro code with fitted parameters; its file (version 2)
holds, in place of ``sharing``, ``prior``, ``posterior`` and ``log_point``::

    factory       "package.module:factory": the code that rebuilds its Pyro model and guide,
                  factory(n_states, n_symbols, seed) -> PyroSequenceModel. A model file is
                  never run by itself: :func:`read_pyro_model_file` imports it only when the
                  caller names it (``factory=``, ``ldhmm score --factory``)
    config        the constructor's plain settings (n_states, n_symbols, seed, lr, score_draws, ...)
    params        {name: array}: the fitted global parameters (constrained values), each finite
    elbo_history, vocabulary   as above (vocabulary: null or n_symbols distinct strings)
    training_data (optional) as above

:func:`validate_pyro_document` checks it the same way (one error naming file and field).
:func:`validate_model_document` checks all of it and raises one ``ValueError`` naming the
file and the field. A model that passes scores every valid sequence with a finite bound,
except where a point-estimated group's -inf entries give a sequence probability 0 (a symbol
no state emits, or that no state path reaches there): the one rule of
:mod:`ldhmm.inference.cavi.support` names such a sequence when scoring (every CLI command
refuses it in one line naming the sequence and the symbol; ``score_samples`` gives it -inf,
its log-likelihood; the other methods raise ``ImpossibleSequenceError``, a ``ValueError``).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
from pathlib import Path

import numpy as np
import torch

from ..data.atomic import remove_stale_temporaries, write_atomically
from ..data.regular_files import open_regular, read_json
from ..inference.ops.dirichlet import MAX_CONCENTRATION, MIN_CONCENTRATION
from ..inference.parameters import VariantParameters
from ..inference.sharing import ParameterSharing
from .import_path import load_import_path
from .memory import check_memory, format_size, model_file_bytes

__all__ = [
    "FORMAT_VERSION",
    "FORMAT_HISTORY",
    "NPZ_MIN_ENTRIES",
    "side_file_name",
    "named_side_file",
    "resolve_arrays",
    "MAX_POSTERIOR_CONCENTRATION",
    "ModelFileError",
    "validate_model_document",
    "check_config_types",
    "check_fit_record",
    "fit_record",
    "set_fit_record",
    "write_model_file",
    "vocabulary_to_write",
    "read_model_file",
    "read_model_json",
    "PYRO_CLASS",
    "validate_pyro_document",
    "write_pyro_model_file",
    "read_pyro_model_file",
]

#: The model-file format this version writes; it reads every version in FORMAT_HISTORY.
FORMAT_VERSION = 2
#: What each format version added.
FORMAT_HISTORY = {
    1: "the first format",
    2: "optional 'vocabulary': the training symbols' names; optional 'arrays': large arrays in "
    "an NPZ side file; optional 'fit_history' (every restart's ELBO) and 'training_data' (ldhmm 0.2.0)",
}
#: Arrays with at least this many entries are written to the NPZ side file (K x V at large V:
#: as JSON text, 10^6 symbols x 8 states are ~170 MB and seconds to parse).
NPZ_MIN_ENTRIES = 1 << 16
#: Shared posteriors are prior + counts: allowed up to here (float64 digammas stay exact).
MAX_POSTERIOR_CONCENTRATION = 1e15

_GROUP_SHAPES = {"pi": ("K",), "A": ("K", "K"), "B": ("K", "V")}
_KINDS = ("sequence", "shared", "point")
#: Settings that decide how long scoring runs: a loaded file may not exceed these.
_UPPER_BOUNDS = {
    "random_starts": 100,
    "e_step_max_iter": 100_000,
    "max_iter": 1_000_000,
    "n_init": 1000,
    "svi_steps": 10_000_000,
    "bucket_cells": 2**34,
    "n_states": 100_000,
}
_TOP_LEVEL = ("format", "version", "class", "config", "sharing", "prior", "posterior", "log_point")


class ModelFileError(ValueError):
    """A model file that does not follow the schema (the message names file and field)."""

    def __init__(self, path, field: str, problem: str):
        super().__init__(f"{path}: field '{field}': {problem}")
        self.path, self.field, self.problem = path, field, problem


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def check_config_types(path, cls, config: dict) -> None:
    """Each setting of ``config`` is a parameter of ``cls`` of its default's type."""
    if not isinstance(config, dict):
        raise ModelFileError(path, "config", f"expected an object, got {type(config).__name__}")
    params = {}
    for klass in reversed(cls.__mro__):  # a subclass's settings are its own and its bases'
        if "__init__" in vars(klass) and klass is not object:
            params.update(inspect.signature(klass.__init__).parameters)
    for key, value in config.items():
        where = f"config.{key}"
        if key not in params or key == "self":
            raise ModelFileError(path, where, f"not a setting of {cls.__name__}")
        default = params[key].default
        if key in ("n_states", "n_symbols"):
            ok = _is_int(value) and value >= 1 or (key == "n_symbols" and value is None)
            if not ok:
                raise ModelFileError(path, where, f"expected an integer >= 1, got {value!r}")
        elif key == "guide":
            if not isinstance(value, str):
                raise ModelFileError(path, where, f"expected a guide name, got {value!r}")
        elif key == "batch_size" and default == "auto":  # the SVI route's: "auto" or a size
            if not (value == "auto" or _is_int(value) and value >= 1):
                raise ModelFileError(path, where, f'expected "auto" or an integer >= 1, got {value!r}')
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise ModelFileError(path, where, f"expected true or false, got {value!r}")
        elif _is_int(default):
            if not _is_int(value) or value < 0:
                raise ModelFileError(path, where, f"expected a non-negative integer, got {value!r}")
        elif isinstance(default, float):
            if not _is_number(value) or value < 0:
                raise ModelFileError(path, where, f"expected a finite number >= 0, got {value!r}")
        elif isinstance(default, str):
            if not isinstance(value, str):
                raise ModelFileError(path, where, f"expected a string, got {value!r}")
        elif value is not None and not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ModelFileError(path, where, f"unexpected value {value!r}")
    for key in ("e_step_max_iter", "bucket_cells", "max_iter", "n_init", "svi_steps"):
        if key in config and config[key] < 1:
            raise ModelFileError(path, f"config.{key}", f"must be >= 1, got {config[key]}")
    for key, top in _UPPER_BOUNDS.items():  # a file must not make scoring run for ever
        if key in config and config[key] > top:
            raise ModelFileError(path, f"config.{key}", f"must be <= {top:g}, got {config[key]}")


def _array(path, field, value, shape, low, high, log_probs=False) -> np.ndarray:
    """``value`` as a float64 array of ``shape`` with entries in [low, high]."""
    dims = " x ".join(map(str, shape))
    expected = f"expected a {'length-' + dims if len(shape) == 1 else dims} array of numbers"
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError):  # ragged nesting
        raise ModelFileError(path, field, expected) from None
    if raw.dtype.kind not in "iuf":  # strings, booleans, nulls, objects: not numbers
        raise ModelFileError(path, field, expected)
    arr = raw.astype(np.float64)
    if arr.shape != tuple(shape):
        raise ModelFileError(path, field, f"expected shape {tuple(shape)}, got {arr.shape}")
    if np.isnan(arr).any():
        raise ModelFileError(path, field, "holds NaN")
    if log_probs:
        if np.isposinf(arr).any() or (arr > 1e-9).any():
            raise ModelFileError(path, field, "log-probabilities must be <= 0")
        finite_rows = np.isfinite(arr).any(axis=-1)
        if not finite_rows.all():
            raise ModelFileError(path, field, "a row has no finite log-probability")
        with np.errstate(divide="ignore"):
            top = arr.max(axis=-1, keepdims=True)
            norm = (top + np.log(np.exp(arr - top).sum(axis=-1, keepdims=True)))[..., 0]
        if np.abs(norm).max() > 1e-6:
            raise ModelFileError(path, field, "rows do not sum to 1 (logsumexp must be 0)")
        return arr
    if not np.isfinite(arr).all():
        raise ModelFileError(path, field, "holds an infinite value")
    if arr.min() < low or arr.max() > high:
        bad = arr.min() if arr.min() < low else arr.max()
        raise ModelFileError(path, field, f"value {bad:g} outside [{low:g}, {high:g}]")
    return arr


def side_file_name(path, arrays: dict) -> str:
    """The NPZ side file's name for a model file ``path`` holding ``arrays``:
    ``<name>.<digest>.npz`` beside it, the digest of the arrays' bytes, so that a new save never
    overwrites the side file the current model file still names."""
    digest = hashlib.sha256()
    for key in sorted(arrays):
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(arrays[key]).tobytes())
    return f"{Path(path).name}.{digest.hexdigest()[:12]}.npz"


def named_side_file(path) -> Path | None:
    """The side file an existing model file at ``path`` names, or None (no file, not JSON, none
    named, or a name that is not a bare file name)."""
    try:
        name = read_model_json(path).get("arrays")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(name, str) or not name or name != Path(name).name or name in (".", ".."):
        return None
    return Path(path).parent / name


def resolve_arrays(doc, path) -> None:
    """Replace, in place, every ``{"npz": KEY}`` group of a document with the array
    KEY of its side file (``doc["arrays"]``, in the model file's directory).

    Only a bare file name is accepted (no directories: a model file names nothing outside its
    own directory), the archive is read with ``allow_pickle=False``, and each referenced array
    must exist and hold numbers; shapes and ranges are checked afterwards by
    :func:`validate_model_document` like inline arrays.

    Raises
    ------
    ModelFileError
        Naming the file and the field (``arrays`` or the group).
    """
    if not isinstance(doc, dict) or "arrays" not in doc:
        return
    name = doc["arrays"]
    if doc.get("version") == 1:
        raise ModelFileError(path, "arrays", "not a field of format version 1")
    if not isinstance(name, str) or not name or name != Path(name).name or name in (".", ".."):
        raise ModelFileError(path, "arrays", f"expected the bare name of a file beside it, got {name!r}")
    side = Path(path).parent / name
    try:  # a regular file where it is: never a link to a file elsewhere, nor a device or FIFO
        handle = open_regular(side, "side file", follow=False)
    except FileNotFoundError:
        raise ModelFileError(
            path, "arrays", f"side file {side} not found (copy it along with the model)"
        ) from None
    except ValueError as err:
        raise ModelFileError(path, "arrays", str(err)) from None
    with handle:
        try:
            archive = np.load(handle, allow_pickle=False)
        except Exception as err:  # noqa: BLE001 - any unreadable file is the same one-line refusal
            raise ModelFileError(path, "arrays", f"{side} is not a readable NPZ archive ({err})") from None
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ModelFileError(path, "arrays", f"{side} is a single .npy array, not an NPZ archive")
        with archive:
            _resolve_from(doc, path, side, archive)


def _resolve_from(doc, path, side, archive) -> None:
    """The ``{"npz": KEY}`` groups of ``doc`` read from ``archive`` (only the keys referenced)."""
    for section in ("prior", "posterior", "log_point"):
        groups = doc.get(section)
        if not isinstance(groups, dict):
            continue
        for g, value in groups.items():
            if not isinstance(value, dict):
                continue
            key = value.get("npz")
            if set(value) != {"npz"} or not isinstance(key, str):
                raise ModelFileError(path, f"{section}.{g}", 'expected an array or {"npz": KEY}')
            if key not in archive.files:
                raise ModelFileError(path, f"{section}.{g}", f"array {key!r} not in {side.name}")
            _check_member(path, f"{section}.{g}", side, archive, key)
            try:
                value = archive[key]
            except Exception as err:  # noqa: BLE001 - a damaged member, a pickled object array, ...
                raise ModelFileError(
                    path, f"{section}.{g}", f"array {key!r} of {side.name} is unreadable ({err})"
                ) from None
            if value.dtype.kind != "f":
                raise ModelFileError(path, f"{section}.{g}", f"array {key!r} in {side.name} is not float")
            groups[g] = value


_KNOB = "a smaller model, or a machine with more memory"


def _check_member(path, field, side, archive, key) -> None:
    """The shape and dtype an NPZ member claims (its ``.npy`` header, read alone): a float
    array whose size fits in memory, refused before a byte of its data is decompressed (a
    small archive may claim gigabytes: a zip bomb)."""
    name = key if key in archive.zip.namelist() else f"{key}.npy"
    try:
        with archive.zip.open(name) as member:
            version = np.lib.format.read_magic(member)
            header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = header(member)
    except Exception as err:  # noqa: BLE001 - a damaged member: the same one-line refusal
        raise ModelFileError(path, field, f"array {key!r} of {side.name} is unreadable ({err})") from None
    if dtype.kind != "f":
        raise ModelFileError(path, field, f"array {key!r} in {side.name} is not float")
    entries = int(np.prod(shape, dtype=object))
    check_memory(
        model_file_bytes(entries),
        f"{path}: field '{field}': array {key!r} of {side.name} (shape {tuple(shape)})",
        _KNOB,
    )


def read_model_json(path):
    """The JSON document of the model file ``path``, its size checked against the memory limit
    before it is read (:func:`ldhmm.models.memory.model_file_bytes`) and parsed strictly
    (:func:`ldhmm.data.regular_files.read_json`: a regular file, no duplicate key)."""
    try:
        size = os.stat(path).st_size
    except OSError:
        size = 0  # no such file: read_json names it
    check_memory(model_file_bytes(0, size), f"{path}: a model file of {format_size(size)}", _KNOB)
    return read_json(path, "model file", expected="an ldhmm model file")


def _check_ldhmm_document(doc, path) -> None:
    """The first checks of every model file: a JSON object whose ``format`` is ``"ldhmm"``."""
    if not isinstance(doc, dict):
        raise ModelFileError(path, "(top level)", f"expected a JSON object, got {type(doc).__name__}")
    if doc.get("format") != "ldhmm":
        raise ModelFileError(
            path, "format", f'expected "ldhmm", got {doc.get("format")!r}: not an ldhmm model file'
        )


def validate_model_document(doc, path, versions=FORMAT_HISTORY) -> None:
    """Check a parsed model file against the schema (module docstring); the class's own
    checks of ``config`` and ``sharing`` run when it is built (:meth:`VariantHMM.load`).

    Raises
    ------
    ModelFileError
        The first field that does not follow the schema.
    """
    _check_ldhmm_document(doc, path)
    version = doc.get("version")
    if not _is_int(version) or version not in versions:
        if _is_int(version) and version > max(versions):
            raise ModelFileError(
                path,
                "version",
                f"format version {version} is newer than this ldhmm reads ({max(versions)}); upgrade ldhmm",
            )
        raise ModelFileError(
            path, "version", f"unknown format version {version!r} (known: {sorted(versions)})"
        )
    for key in _TOP_LEVEL:
        if key not in doc:
            raise ModelFileError(path, key, "missing")
    resolve_arrays(doc, path)
    sharing = doc["sharing"]
    if not isinstance(sharing, dict):
        raise ModelFileError(path, "sharing", "expected an object")
    for g in _GROUP_SHAPES:
        if sharing.get(g) not in _KINDS:
            raise ModelFileError(
                path, f"sharing.{g}", f"expected one of {', '.join(_KINDS)}, got {sharing.get(g)!r}"
            )
    if not isinstance(sharing.get("learn_prior", True), bool):
        raise ModelFileError(path, "sharing.learn_prior", "expected true or false")
    pseudo = sharing.get("pseudocount", 0.0)
    if not _is_number(pseudo) or pseudo < 0:
        raise ModelFileError(path, "sharing.pseudocount", f"expected a finite number >= 0, got {pseudo!r}")
    unknown = sorted(set(sharing) - set(_GROUP_SHAPES) - {"learn_prior", "pseudocount"})
    if unknown:
        raise ModelFileError(path, f"sharing.{unknown[0]}", "unknown field")
    config = doc["config"]
    if not isinstance(config, dict):
        raise ModelFileError(path, "config", "expected an object")
    K = config.get("n_states")
    if not _is_int(K) or K < 1:
        raise ModelFileError(path, "config.n_states", f"expected an integer >= 1, got {K!r}")
    V = config.get("n_symbols")
    sections = {"prior": ("sequence", "shared"), "posterior": ("shared",), "log_point": ("point",)}
    for section, kinds in sections.items():
        if not isinstance(doc[section], dict):
            raise ModelFileError(path, section, "expected an object")
        want = {g for g in _GROUP_SHAPES if sharing[g] in kinds}
        have = set(doc[section])
        if have != want:
            extra, missing = sorted(have - want), sorted(want - have)
            what = f"unexpected group {extra[0]!r}" if extra else f"missing group {missing[0]!r}"
            raise ModelFileError(
                path, section, f"{what} for sharing {sharing['pi']}/{sharing['A']}/{sharing['B']}"
            )
    vocabulary = doc.get("vocabulary")
    if V is None and isinstance(vocabulary, list) and vocabulary:
        V = len(vocabulary)
    if V is None:  # the width of any B array
        for section in sections:
            b = doc[section].get("B")
            if isinstance(b, np.ndarray) and b.ndim == 2:
                V = int(b.shape[1])
                break
            if isinstance(b, list) and b and isinstance(b[0], list):
                V = len(b[0])
                break
    if not _is_int(V) or V < 1:
        raise ModelFileError(path, "config.n_symbols", f"expected an integer >= 1, got {V!r}")
    sizes = {"K": K, "V": V}
    for section in sections:
        for g, value in doc[section].items():
            shape = [sizes[d] for d in _GROUP_SHAPES[g]]
            field = f"{section}.{g}"
            if section == "prior":
                _array(path, field, value, shape, MIN_CONCENTRATION, MAX_CONCENTRATION)
            elif section == "posterior":
                _array(path, field, value, shape, MIN_CONCENTRATION, MAX_POSTERIOR_CONCENTRATION)
            else:
                _array(path, field, value, shape, -math.inf, 0.0, log_probs=True)
    if vocabulary is None:  # its symbols' names are made up (0..V-1) when a log is mapped
        check_memory(
            model_file_bytes(0, names=V), f"{path}: a model of V = {V} symbols without a vocabulary", _KNOB
        )
    history = doc.get("elbo_history", [])
    if not isinstance(history, list) or not all(_is_number(x) for x in history):
        raise ModelFileError(path, "elbo_history", "expected a list of finite numbers")
    if vocabulary is not None:
        if (
            not isinstance(vocabulary, list)
            or len(vocabulary) != V
            or not all(isinstance(v, str) for v in vocabulary)
            or len(set(vocabulary)) != len(vocabulary)
        ):
            raise ModelFileError(path, "vocabulary", f"expected null or {V} distinct strings")
    check_fit_record(doc, path)
    unknown = sorted(set(doc) - set(_TOP_LEVEL) - {"elbo_history", "vocabulary", "arrays", *_FIT_RECORD})
    if unknown:
        raise ModelFileError(path, unknown[0], "unknown field")


#: The optional fields of what a fit saw and did (module docstring), with their sub-fields.
_FIT_RECORD = {
    "fit_history": ("restarts", "kept"),
    "training_data": ("source", "n_sequences", "n_tokens", "sha256"),
}
#: Keys of a fit record's field that a file may leave out (written by later versions).
_FIT_RECORD_OPTIONAL = {"fit_history": ("start", "stopped", "starts")}
#: The starts a fit records besides its random restarts (``fit_history.starts``).
NAMED_STARTS = ("seeded", "hmm")
#: How a kept run may have started (``start_kind_``), besides ``"split:k"``.
START_KINDS = ("restart", "seeded", "hmm", "init", "continued")
_HEX = frozenset("0123456789abcdef")


def check_fit_record(doc: dict, path) -> None:
    """Check the optional fields ``fit_history`` and ``training_data`` of a model file (module
    docstring); absent fields pass (files written before them).

    Raises
    ------
    ModelFileError
        Naming the field (``fit_history.kept``, ``training_data.sha256``, ...).
    """
    for name, keys in _FIT_RECORD.items():
        if name not in doc:
            continue
        value = doc[name]
        if not isinstance(value, dict):
            raise ModelFileError(path, name, f"expected an object, got {type(value).__name__}")
        allowed = set(keys) | set(_FIT_RECORD_OPTIONAL.get(name, ()))
        extra, missing = sorted(set(value) - allowed), [k for k in keys if k not in value]
        if extra:
            raise ModelFileError(path, f"{name}.{extra[0]}", "unknown field")
        if missing:
            raise ModelFileError(path, f"{name}.{missing[0]}", "missing")
    history = doc.get("fit_history")
    if history is not None:
        runs = history["restarts"]
        if not isinstance(runs, list) or not all(
            isinstance(run, list) and all(_is_number(x) for x in run) for run in runs
        ):
            raise ModelFileError(path, "fit_history.restarts", "expected a list of lists of finite numbers")
        kept = history["kept"]
        if kept is not None and not (_is_int(kept) and 0 <= kept < len(runs)):
            raise ModelFileError(
                path, "fit_history.kept", f"expected null or a restart in [0, {len(runs)}), got {kept!r}"
            )
        starts = history.get("starts", {})
        if not isinstance(starts, dict) or not all(
            k in NAMED_STARTS and isinstance(run, list) and all(_is_number(x) for x in run)
            for k, run in starts.items()
        ):
            raise ModelFileError(
                path,
                "fit_history.starts",
                f"expected an object of {' or '.join(NAMED_STARTS)} to lists of finite numbers",
            )
        if "stopped" in history and not isinstance(history["stopped"], str):
            raise ModelFileError(
                path,
                "fit_history.stopped",
                f"expected a string (how the fit stopped), got {history['stopped']!r}",
            )
        if "start" in history and not is_start_kind(history["start"]):
            raise ModelFileError(
                path,
                "fit_history.start",
                f"expected one of {', '.join(START_KINDS)} or split:k (k a state), got {history['start']!r}",
            )
    data = doc.get("training_data")
    if data is not None:
        if not isinstance(data["source"], str):
            raise ModelFileError(path, "training_data.source", f"expected a string, got {data['source']!r}")
        for key in ("n_sequences", "n_tokens"):
            if not (_is_int(data[key]) and data[key] >= 0):
                raise ModelFileError(
                    path, f"training_data.{key}", f"expected an integer >= 0, got {data[key]!r}"
                )
        digest = data["sha256"]
        if digest is not None and not (isinstance(digest, str) and len(digest) == 64 and set(digest) <= _HEX):
            raise ModelFileError(
                path, "training_data.sha256", f"expected null or 64 lowercase hex digits, got {digest!r}"
            )


def is_start_kind(value) -> bool:
    """Whether ``value`` names how a kept run started (:data:`START_KINDS` or ``"split:k"``)."""
    if not isinstance(value, str):
        return False
    if value in START_KINDS:
        return True
    head, _, k = value.partition(":")
    return head == "split" and k.isascii() and k.isdigit() and str(int(k)) == k


def fit_record(model) -> dict:
    """The optional fields ``fit_history`` and ``training_data`` of a fitted model (those it has)."""
    doc = {}
    if hasattr(model, "restart_elbo_histories_"):
        kept = getattr(model, "kept_restart_", None)
        doc["fit_history"] = {
            "restarts": [[float(x) for x in run] for run in model.restart_elbo_histories_],
            "kept": None if kept is None else int(kept),
        }
        start = getattr(model, "start_kind_", None)
        if start is not None:
            doc["fit_history"]["start"] = str(start)
        stopped = stop_report(model)
        if stopped is not None:
            doc["fit_history"]["stopped"] = stopped
        starts = getattr(model, "start_elbo_histories_", None)
        if starts:
            doc["fit_history"]["starts"] = {k: [float(x) for x in run] for k, run in starts.items()}
    if hasattr(model, "training_data_"):
        doc["training_data"] = dict(model.training_data_)
    return doc


def stop_report(model) -> str | None:
    """How the model's fit stopped, one line (``str`` of its ``convergence_``, e.g. ``"converged: 5 EM
    iterations of at most 50, ... (rule: ...)"``; a loaded model: what its file recorded), or None."""
    convergence = getattr(model, "convergence_", None)
    if convergence is not None:
        return str(convergence)
    return getattr(model, "stop_report_", None)


def _set_loaded_fit(model, doc: dict) -> None:
    """Give a model built from a file what its file says of its fit: the ELBO history (and the
    iteration count), the vocabulary and the fit's record (:func:`set_fit_record`)."""
    model.elbo_history_ = np.asarray(doc.get("elbo_history", []), dtype=np.float64)
    model.n_iter_ = len(model.elbo_history_)
    if doc.get("vocabulary") is not None:
        model.vocabulary_ = list(doc["vocabulary"])
    set_fit_record(model, doc)


def set_fit_record(model, doc: dict) -> None:
    """Give a loaded model the fields of :func:`fit_record` its file holds (checked before)."""
    if "fit_history" in doc:
        history = doc["fit_history"]
        model.restart_elbo_histories_ = [np.asarray(run, dtype=np.float64) for run in history["restarts"]]
        model.kept_restart_ = history["kept"]
        if "start" in history:
            model.start_kind_ = history["start"]
        if "stopped" in history:
            model.stop_report_ = history["stopped"]
        if "starts" in history:
            model.start_elbo_histories_ = {
                k: np.asarray(run, dtype=np.float64) for k, run in history["starts"].items()
            }
    if "training_data" in doc:
        model.training_data_ = dict(doc["training_data"])


def vocabulary_to_write(model, vocabulary=None) -> list | None:
    """The symbol names a model file of ``model`` records: ``vocabulary`` (default the model's
    ``vocabulary_``, when set) as strings, or None; a ValueError unless ``n_symbols_`` distinct."""
    if vocabulary is None:
        vocabulary = getattr(model, "vocabulary_", None)
    if vocabulary is None:
        return None
    vocabulary = [str(v) for v in vocabulary]
    if len(vocabulary) != model.n_symbols_ or len(set(vocabulary)) != len(vocabulary):
        raise ValueError(
            f"vocabulary: expected {model.n_symbols_} distinct symbol names, got {len(vocabulary)}"
        )
    return vocabulary


def write_model_file(path, model, vocabulary=None) -> None:
    """Write a fitted estimator of the LDHMM family (:class:`ldhmm.models.variant_hmm.VariantHMM`
    or a subclass) to ``path`` as JSON, written to a temporary file and then renamed into place.

    Format (version 2)::

        {"format": "ldhmm", "version": 2, "class": "LDHMM", "config": {...},
         "sharing": {"pi": ..., "A": ..., "B": ..., "learn_prior": ..., "pseudocount": ...},
         "prior": {"pi": [...], "A": [[...]], "B": [[...]]},      # Dirichlet concentrations
         "posterior": {...},                                     # shared groups
         "log_point": {...},                                     # point groups, log-probs
         "elbo_history": [...],
         "vocabulary": ["symbol 0", ...] or null,                 # V names (version 2)
         "fit_history": {"restarts": [[...], ...], "kept": 0, "start": "restart"},  # when set
         "training_data": {"source": ..., "n_sequences": ..., "n_tokens": ..., "sha256": ...}}

    Arrays are nested lists of float64 (exact round trip: Python's float repr). An array of at
    least :data:`NPZ_MIN_ENTRIES` entries (B at large vocabularies) is written instead to the
    NPZ side file ``<name>.<digest>.npz`` beside the model (:func:`side_file_name`), and the
    JSON holds ``{"npz": "prior.B"}`` for it and ``"arrays": "<name>.<digest>.npz"``.
    Replacing a model file removes the side file the old one named once the new one is in
    place, and temporary files of a save that was killed before its rename are removed
    (:func:`ldhmm.data.atomic.remove_stale_temporaries`).

    Parameters
    ----------
    path : str or Path
    model : fitted estimator
        Its class name, ``get_config()``, ``sharing``, ``params_``, ``n_symbols_``,
        ``elbo_history_`` and, when set, ``vocabulary_``, ``restart_elbo_histories_`` with
        ``kept_restart_`` and ``start_kind_``, and ``training_data_`` are written.
    vocabulary : sequence of str, optional
        The names of the V training symbols (default: ``model.vocabulary_`` when set).

    Raises
    ------
    ValueError
        A vocabulary that is not ``n_symbols_`` distinct names.
    """
    vocabulary = vocabulary_to_write(model, vocabulary)
    path = Path(path)
    side = {}  # large arrays: to the NPZ side file

    def arrays(section: str, tensors: dict) -> dict:
        out = {}
        for g, t in tensors.items():
            values = t.detach().double().cpu().numpy()
            if values.size >= NPZ_MIN_ENTRIES:
                side[f"{section}.{g}"] = values
                out[g] = {"npz": f"{section}.{g}"}
            else:
                out[g] = values.tolist()
        return out

    params = model.params_
    doc = {
        "format": "ldhmm",
        "version": FORMAT_VERSION,
        "class": type(model).__name__,
        "config": model.get_config(),
        "sharing": model.sharing.to_dict(),
        "prior": arrays("prior", params.prior),
        "posterior": arrays("posterior", params.posterior),
        "log_point": arrays("log_point", params.log_point),
        "elbo_history": [float(x) for x in getattr(model, "elbo_history_", [])],
        "vocabulary": vocabulary,
        **fit_record(model),
    }
    check_fit_record(doc, path)  # what a load would refuse is not written
    remove_stale_temporaries(path)  # of a save killed before its rename (the side file's too)
    previous = named_side_file(path)  # of a model file being replaced
    if side:
        # The side file first, under a name of its own (a digest of its arrays): the JSON
        # that names it appears only once it is complete, and until then the old JSON still
        # names the old side file.
        doc["arrays"] = side_file_name(path, side)
        write_atomically(path.parent / doc["arrays"], lambda f: np.savez(f, **side), binary=True)
    write_atomically(path, lambda f: f.write(json.dumps(doc, allow_nan=True)))
    if previous is not None and previous.name != doc.get("arrays") and previous.is_file():
        previous.unlink()  # no model file names it any more


def read_model_file(path, cls, guide=None):
    """The model saved in ``path`` (format versions 1 and 2), built as ``cls``.

    Every field is checked (:func:`validate_model_document`, :func:`check_config_types`)
    before anything is built; then ``cls._from_config(config, sharing, guide)`` builds the
    estimator (its own checks of the settings), which gets the saved parameters (in its
    ``dtype``), ``elbo_history_``, ``n_iter_``, ``vocabulary_`` and what the file records of the
    fit (:func:`set_fit_record`).

    Parameters
    ----------
    path : str or Path
    cls : the estimator class (:class:`ldhmm.models.variant_hmm.VariantHMM` or a subclass)
    guide : guide object, optional
        Needed when the model was fitted with a custom guide (saved as its name only).

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        One line naming the file and the field (:class:`ModelFileError`) for a file that does
        not follow the schema, is not JSON (or repeats a key, or nests too deeply), is of a
        newer format version, or is not a regular file (a directory, a FIFO, a device).
    """
    doc = read_model_json(path)
    validate_model_document(doc, path)
    config = dict(doc["config"])
    check_config_types(path, cls, config)
    if "effort" not in config and getattr(cls, "fit_defaults", None) is not None:
        # a file written before v5 (no "effort") was fitted with v4's restarts and refreshes
        config["effort"] = "thorough"
    elif "identical_sequences" not in config and getattr(cls, "fit_defaults", None) is not None:
        # a v5 file computed every sequence on its own, its random starts hashed from its
        # position: held-out scores as it gave them ("thorough" says so already)
        config["identical_sequences"] = "each"
    saved_guide = config.pop("guide", "pf")
    if guide is None:
        if saved_guide not in ("pf", "ff"):
            raise ModelFileError(
                path, "config.guide", f"custom guide {saved_guide!r}; pass guide= to load it"
            )
        guide = saved_guide
    try:
        sharing = ParameterSharing(**doc["sharing"])
        model = cls._from_config(config, sharing, guide)
    except (TypeError, ValueError) as err:
        raise ModelFileError(path, "config", " ".join(str(err).split())) from None
    if model.sharing != sharing:
        raise ModelFileError(
            path, "sharing", f"{doc['sharing']} is not the sharing of class {type(model).__name__}"
        )
    dtype = getattr(torch, model.dtype)  # "float64" or "float32", checked by the class

    def tensors(section: str) -> dict:
        return {
            k: torch.as_tensor(np.asarray(v, dtype=np.float64)).to(dtype) for k, v in doc[section].items()
        }

    model._set_params(
        VariantParameters(sharing, tensors("prior"), tensors("posterior"), tensors("log_point"))
    )
    _set_loaded_fit(model, doc)
    return model


#: The class name of a model of the SVI route in a model file.
PYRO_CLASS = "PyroSequenceModel"
_PYRO_FIELDS = ("format", "version", "class", "factory", "config", "params")


def _check_version(doc, path, versions=FORMAT_HISTORY) -> None:
    version = doc.get("version")
    if not _is_int(version) or version not in versions or version < 2:
        raise ModelFileError(
            path, "version", f"expected {FORMAT_VERSION} for a {PYRO_CLASS}, got {version!r}"
        )


def validate_pyro_document(doc, path, cls) -> None:
    """Check a parsed model file of the SVI route (module docstring) against ``cls``'s settings.

    Raises
    ------
    ModelFileError
        The first field that does not follow the schema.
    """
    _check_ldhmm_document(doc, path)
    _check_version(doc, path)
    for key in _PYRO_FIELDS:
        if key not in doc:
            raise ModelFileError(path, key, "missing")
    factory = doc["factory"]
    module, sep, attr = str(factory).partition(":") if isinstance(factory, str) else ("", "", "")
    if not (module and sep and attr):
        raise ModelFileError(path, "factory", f"expected 'package.module:factory', got {factory!r}")
    config = doc["config"]
    check_config_types(path, cls, config)
    for key in ("n_states", "n_symbols"):
        if not _is_int(config.get(key)):
            raise ModelFileError(path, f"config.{key}", f"expected an integer >= 1, got {config.get(key)!r}")
    params = doc["params"]
    if not isinstance(params, dict) or not params:
        raise ModelFileError(path, "params", "expected an object of named arrays")
    for name, value in params.items():
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError):  # ragged nesting
            raise ModelFileError(path, f"params.{name}", "expected an array of numbers") from None
        if arr.dtype.kind not in "iuf" or not np.isfinite(arr.astype(np.float64)).all():
            raise ModelFileError(path, f"params.{name}", "expected an array of finite numbers")
    history = doc.get("elbo_history", [])
    if not isinstance(history, list) or not all(_is_number(x) for x in history):
        raise ModelFileError(path, "elbo_history", "expected a list of finite numbers")
    vocabulary = doc.get("vocabulary")
    V = config["n_symbols"]
    if vocabulary is not None and (
        not isinstance(vocabulary, list)
        or len(vocabulary) != V
        or not all(isinstance(v, str) for v in vocabulary)
        or len(set(vocabulary)) != V
    ):
        raise ModelFileError(path, "vocabulary", f"expected null or {V} distinct strings")
    check_fit_record(doc, path)
    unknown = sorted(set(doc) - set(_PYRO_FIELDS) - {"elbo_history", "vocabulary", *_FIT_RECORD})
    if unknown:
        raise ModelFileError(path, unknown[0], "unknown field")


def write_pyro_model_file(path, model, factory: str) -> None:
    """Write a fitted model of the SVI route to ``path`` (JSON, atomically; module docstring).

    Parameters
    ----------
    path : str or Path
    model : fitted :class:`ldhmm.models.pyro_sequence.PyroSequenceModel`
        Its ``get_config()``, ``params_``, ``elbo_history_`` and ``vocabulary_`` (when set).
    factory : str
        ``"package.module:factory"`` that rebuilds its Pyro model and guide.
    """
    vocabulary = getattr(model, "vocabulary_", None)
    doc = {
        "format": "ldhmm",
        "version": FORMAT_VERSION,
        "class": PYRO_CLASS,
        "factory": str(factory),
        "config": {**model.get_config(), "n_symbols": int(model.n_symbols_)},
        "params": {k: np.asarray(v, dtype=np.float64).tolist() for k, v in model.params_.items()},
        "elbo_history": [float(x) for x in getattr(model, "elbo_history_", [])],
        "vocabulary": None if vocabulary is None else [str(v) for v in vocabulary],
        **fit_record(model),
    }
    check_fit_record(doc, path)  # what a load would refuse is not written
    write_atomically(Path(path), lambda f: f.write(json.dumps(doc)))


def read_pyro_model_file(path, cls, factory=None):
    """The model of the SVI route saved in ``path``, rebuilt by ``factory`` with its parameters.

    Parameters
    ----------
    path : str or Path
    cls : :class:`ldhmm.models.pyro_sequence.PyroSequenceModel` (or a subclass)
    factory : callable or str, optional
        ``factory(n_states, n_symbols, seed) -> PyroSequenceModel`` (or its
        ``"package.module:factory"``), giving the Pyro model, guide and start; the file's
        settings and parameters replace the rest. None: refused, naming the factory the file
        records (a model file is never run by itself).

    Raises
    ------
    ValueError
        One line naming the file and the field (:class:`ModelFileError`).
    """
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not an ldhmm model file ({exc})") from None
    validate_pyro_document(doc, path, cls)
    if factory is None:
        raise ModelFileError(
            path,
            "factory",
            f"a {PYRO_CLASS} is rebuilt by the code {doc['factory']!r}, which a model file never runs by "
            f"itself: name it to run it (factory={doc['factory']!r} in Python, --factory {doc['factory']} "
            f"on the command line)",
        )
    if isinstance(factory, str):
        factory = load_import_path(factory, what=f"{path}: factory", error=ValueError)
    config = dict(doc["config"])
    try:
        built = factory(config["n_states"], config["n_symbols"], config.get("seed", 0))
    except Exception as err:  # a user's factory: any error is one line naming it
        raise ModelFileError(path, "factory", f"the factory raised {type(err).__name__}: {err}") from None
    if not isinstance(built, cls):
        raise ModelFileError(
            path, "factory", f"the factory returned a {type(built).__name__}, not a {cls.__name__}"
        )
    try:
        model = cls.from_parameters(
            built.model, built.guide, params=doc["params"], init=built.init, verbose=built.verbose, **config
        )
    except (TypeError, ValueError) as err:
        raise ModelFileError(path, "params", " ".join(str(err).split())) from None
    _set_loaded_fit(model, doc)
    return model
