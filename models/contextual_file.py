"""The model file of a contextual model: :class:`ldhmm.models.contextual.ContextualLDHMM` and
:class:`ldhmm.models.contextual_hmm.ContextualHMM` (the point variant).

JSON, written atomically, read back checked field by field (a one-line
:class:`ldhmm.models.file_format.ModelFileError` names the file and the field)::

    {"format": "ldhmm", "version": 2, "class": "ContextualLDHMM",
     "config": {...},                       # the constructor's arguments
     "contexts": {"order": 1, "min_count": 20, "keys": [[0, ..., V], ...]},
     "prior": {"pi": [...], "A": [[...]], "B": [[[...]]]},   # (K,), (K, K), (K, C, V)
     "shared": {"B": [[[...]]], ...} or absent,  # q(theta) of the groups shared by the database
     "point": {"pi": [...], ...} or absent,      # probabilities of the point groups
     "elbo_history": [...],                 # the training objective after every E-step
     "elbo": -1234.5,                       # the training bound (absent: the history's last)
     "vocabulary": ["symbol 0", ...] or null,
     "context_counts": [...] or absent,     # training positions per context row (C,)
     "stopped": "converged: ..." or absent,  # how the fit stopped, one line
     "training_data": {...} or absent}

``"shared"`` and ``"point"`` name the groups the config's ``sharing`` makes shared or point
estimates (a file of LDHMM's sharing has neither). A ContextualHMM's file holds
``"parameters"`` (its probabilities pi, A, B, each row summing to 1) in place of ``"prior"``,
and ``"objective_history"`` (the MAP objective after every E-step) in place of
``"elbo_history"`` and ``"elbo"``.

Floats as Python's repr (an exact float64 round trip); never a pickle.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..data.atomic import write_atomically
from ..inference.contexts import ContextTable
from ..inference.ops.dirichlet import MAX_CONCENTRATION
from .file_format import FORMAT_VERSION, ModelFileError, read_model_json, stop_report, vocabulary_to_write

__all__ = ["write_contextual_file", "read_contextual_file"]


def write_contextual_file(path, model, vocabulary=None) -> None:
    """Write the fitted ``model`` to ``path`` (see the module docstring)."""
    vocabulary = vocabulary_to_write(model, vocabulary)
    doc = {
        "format": "ldhmm",
        "version": FORMAT_VERSION,
        "class": type(model).__name__,
        "config": model.get_config(),
        "n_symbols": int(model.n_symbols_),
        "contexts": model.context_table_.to_json(),
        "vocabulary": vocabulary,
    }
    if hasattr(model, "beta_"):
        doc["prior"] = {
            "pi": model.alpha_pi_.tolist(),
            "A": model.alpha_A_.tolist(),
            "B": model.beta_.tolist(),
        }
        for key, groups in (("shared", model.shared_posterior_), ("point", model.point_probabilities_)):
            if groups:
                doc[key] = {g: v.tolist() for g, v in groups.items()}
        doc["elbo_history"] = [float(x) for x in model.elbo_history_]
        doc["elbo"] = float(model.elbo_)
    else:
        doc["parameters"] = {
            "pi": model.startprob_.tolist(),
            "A": model.transmat_.tolist(),
            "B": model.emissionprob_.tolist(),
        }
        doc["objective_history"] = [float(x) for x in model.objective_history_]
    if stop_report(model) is not None:
        doc["stopped"] = stop_report(model)
    if getattr(model, "context_counts_", None) is not None:
        doc["context_counts"] = [int(n) for n in model.context_counts_]
    if getattr(model, "training_data_", None) is not None:
        doc["training_data"] = model.training_data_
    write_atomically(Path(path), lambda f: f.write(json.dumps(doc)))


def _numbers(path, field, value, shape) -> np.ndarray:
    """An array of ``shape`` from the file's ``field`` (a one-line error otherwise)."""
    try:
        out = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ModelFileError(path, field, "not an array of numbers") from None
    if out.shape != shape:
        raise ModelFileError(path, field, f"shape {out.shape}, expected {shape}")
    return out


def _concentrations(path, field, value, shape) -> np.ndarray:
    out = _numbers(path, field, value, shape)
    if not np.all(np.isfinite(out)) or np.any(out <= 0) or np.any(out > MAX_CONCENTRATION * (1 + 1e-9)):
        raise ModelFileError(
            path, field, f"concentrations must be finite numbers in (0, {MAX_CONCENTRATION:g}]"
        )
    return out


def _probabilities(path, field, value, shape) -> np.ndarray:
    out = _numbers(path, field, value, shape)
    if not np.all(np.isfinite(out)) or np.any(out < 0) or not np.allclose(out.sum(-1), 1.0, atol=1e-9):
        raise ModelFileError(path, field, "expected probabilities: finite, >= 0, each row summing to 1")
    return out


def _groups(path, doc, key: str, shape, read) -> tuple:
    """The arrays pi (K,), A (K, K), B (K, C, V) of the file's object ``key``, each checked by ``read``."""
    K, C, V = shape
    groups = doc.get(key)
    if not isinstance(groups, dict):
        raise ModelFileError(path, key, "expected an object")
    shapes = {"pi": (K,), "A": (K, K), "B": (K, C, V)}
    return tuple(read(path, f"{key}.{g}", groups.get(g), shapes[g]) for g in shapes)


def _history(path, doc, field: str) -> list:
    history = doc.get(field)
    if not isinstance(history, list) or not history or not all(isinstance(x, (int, float)) for x in history):
        raise ModelFileError(path, field, "expected a non-empty list of numbers")
    return [float(x) for x in history]


def _database_groups(path, doc, key: str, names: list, shape, read) -> dict:
    """The file's object ``key`` holding exactly the groups ``names`` (absent: none), each
    checked by ``read``."""
    groups = doc.get(key, {} if not names else None)
    if not isinstance(groups, dict) or sorted(groups) != sorted(names):
        raise ModelFileError(path, key, f"expected an object with the groups {names} (the config's sharing)")
    K, C, V = shape
    shapes = {"pi": (K,), "A": (K, K), "B": (K, C, V)}
    return {g: read(path, f"{key}.{g}", groups[g], shapes[g]) for g in names}


def _read_priors(path, doc, model, shape) -> None:
    """A ContextualLDHMM's priors, its shared and point groups, training objective and bound."""
    model.alpha_pi_, model.alpha_A_, model.beta_ = _groups(path, doc, "prior", shape, _concentrations)
    sharing = model.parameter_sharing
    model.shared_posterior_ = _database_groups(
        path, doc, "shared", sharing.groups("shared"), shape, _concentrations
    )
    model.point_probabilities_ = _database_groups(
        path, doc, "point", sharing.groups("point"), shape, _probabilities
    )
    model.elbo_history_ = _history(path, doc, "elbo_history")
    elbo = doc.get("elbo", model.elbo_history_[-1])
    if isinstance(elbo, bool) or not isinstance(elbo, (int, float)) or not np.isfinite(elbo):
        raise ModelFileError(path, "elbo", f"expected a finite number, got {elbo!r}")
    model.elbo_ = float(elbo)


def _read_point_parameters(path, doc, model, shape) -> None:
    """A ContextualHMM's probabilities and MAP objective history."""
    model.startprob_, model.transmat_, model.emissionprob_ = _groups(
        path, doc, "parameters", shape, _probabilities
    )
    model.objective_history_ = _history(path, doc, "objective_history")


def _context_counts(path, value, n_contexts: int):
    """The training positions per context row (None where the file predates them)."""
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != n_contexts
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value)
    ):
        raise ModelFileError(
            path, "context_counts", f"expected {n_contexts} integers >= 0 (one per context row)"
        )
    return np.asarray(value, dtype=np.int64)


def read_contextual_file(path, cls):
    """The model saved in ``path``, built as ``cls``, every field checked."""
    path = Path(path)
    doc = read_model_json(path)
    if not isinstance(doc, dict) or doc.get("format") != "ldhmm" or doc.get("class") != cls.__name__:
        raise ModelFileError(path, "class", f"not a {cls.__name__} model file")
    if doc.get("version") != FORMAT_VERSION:
        raise ModelFileError(path, "version", f"{doc.get('version')!r}, expected {FORMAT_VERSION}")
    config = doc.get("config")
    if not isinstance(config, dict):
        raise ModelFileError(path, "config", "expected an object")
    try:
        model = cls(**config)
    except (TypeError, ValueError) as err:
        raise ModelFileError(path, "config", str(err)) from None
    V = doc.get("n_symbols")
    if isinstance(V, bool) or not isinstance(V, int) or V < 1 or (model.n_symbols not in (None, V)):
        raise ModelFileError(path, "n_symbols", f"expected an integer >= 1 (the config's), got {V!r}")
    try:
        table = ContextTable.from_json(doc.get("contexts") or {}, V)
    except ValueError as err:
        raise ModelFileError(path, "contexts", str(err)) from None
    K, C = model.n_states, table.n_contexts
    if cls.score_kind == "exact":
        _read_point_parameters(path, doc, model, (K, C, V))
    else:
        _read_priors(path, doc, model, (K, C, V))
    vocabulary = doc.get("vocabulary")
    if vocabulary is not None:
        if (
            not isinstance(vocabulary, list)
            or len(vocabulary) != V
            or not all(isinstance(v, str) for v in vocabulary)
            or len(set(vocabulary)) != V
        ):
            raise ModelFileError(path, "vocabulary", f"expected {V} distinct symbol names")
        model.vocabulary_ = list(vocabulary)
    model.context_table_ = table
    model.context_counts_ = _context_counts(path, doc.get("context_counts"), C)
    model.n_symbols_ = V
    stopped = doc.get("stopped")
    if stopped is not None and not isinstance(stopped, str):
        raise ModelFileError(path, "stopped", f"expected a string (how the fit stopped), got {stopped!r}")
    model.stop_report_ = stopped
    if isinstance(doc.get("training_data"), dict):
        model.training_data_ = doc["training_data"]
    return model
