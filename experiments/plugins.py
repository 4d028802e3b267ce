"""A run's line-up: the registered models, a user's factories, and installed plug-ins.

The comparison API (:func:`ldhmm.compare`, :func:`ldhmm.classify`) and the commands take
``models`` as

* a built-in (registered) harness name, ``"all"``, or a list of them (``["LDHMM-PF", "HMM"]``);
* a mapping ``{name: factory}``, where a factory is a callable
  ``factory(n_states, n_symbols, seed) -> model``, a string ``"package.module:attribute"`` that
  names one, or, for the built-in model of that name, ``None`` or the name itself
  (``{"HMM": "HMM"}``);
* from the command line, ``--model NAME=package.module:factory`` (repeatable);
* installed packages: an entry point of the group :data:`ENTRY_POINT_GROUP` (``ldhmm.models``)
  named NAME whose value is ``package.module:factory`` joins ``"all"``.

A factory that names ``n_init``, ``max_iter``, ``tol``, ``m_step`` or ``effort`` among its
parameters gets the run's values (the restart budget is the same for every model).

The model a factory returns must follow the harness protocol: ``fit(sequences)``,
``score_samples(sequences) -> (M,) float array`` and a ``score_kind`` attribute (one of
``"exact"``, ``"lower_bound"``, ``"estimate"``); ``log_marginal_is(sequences, n_samples,
seed)`` is optional. :func:`check_protocol` checks it; a model that fails it, or whose
factory raises, fails its own tasks only.

A factory is recorded in the run's ``config.json`` (and its configuration hash) by its
import path, so a resumed run with another factory under the same name is refused, not mixed.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import inspect
import pickle
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from ..models.base import SCORE_KINDS
from ..models.import_path import load_import_path
from .lineup import em_settings_of, model_from_settings, model_names, resolve_models

__all__ = [
    "ENTRY_POINT_GROUP",
    "ModelEntry",
    "PluginError",
    "load_factory",
    "parse_model_option",
    "entry_point_factories",
    "resolve_lineup",
    "check_sendable",
    "build_model",
    "check_protocol",
    "check_scores",
]

#: The entry-point group through which installed packages add models to ``--models all``.
ENTRY_POINT_GROUP = "ldhmm.models"
#: What a model name may hold (it becomes part of file names).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


class PluginError(ValueError):
    """A plug-in model that cannot be loaded, built or used (a one-line reason)."""


@dataclass(frozen=True)
class ModelEntry:
    """One model of a run.

    Attributes
    ----------
    name : str
        The name in the result files.
    factory : callable, str or None
        ``None`` for a registered model; otherwise a factory or its ``"module:attribute"``.
    source : str
        ``"builtin"``, or the factory's import path (recorded in ``config.json``).
    """

    name: str
    factory: Callable | str | None = None
    source: str = "builtin"

    @property
    def builtin(self) -> bool:
        return self.factory is None


def load_factory(spec: str, what: str = "factory") -> Callable:
    """Import ``"package.module:attribute"`` (attribute may be dotted) and return the callable
    (:func:`ldhmm.models.import_path.load_import_path`).

    Raises
    ------
    PluginError
        A malformed string, a module that does not import, a missing attribute, or an object
        that is not callable; the message names ``what`` and the string.
    """
    return load_import_path(spec, what, PluginError)


def parse_model_option(text: str) -> tuple[str, str]:
    """``"NAME=package.module:factory"`` (``--model``) -> ``(NAME, "package.module:factory")``."""
    name, sep, spec = str(text).partition("=")
    name, spec = name.strip(), spec.strip()
    if not sep or not name or not spec:
        raise PluginError(f"--model {text!r}: expected NAME=package.module:factory")
    return name, spec


def entry_point_factories() -> dict[str, str]:
    """``{name: "module:attribute"}`` of the installed entry points of :data:`ENTRY_POINT_GROUP`."""
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _fingerprint(*parts) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:12]


def _source_of(factory) -> str:
    """The identity of a factory recorded in ``config.json`` (and its hash): its import path,
    plus a fingerprint of what the path does not say (a partial's arguments, a lambda's or a
    closure's code and captured values, a callable object's attributes), so that a resumed run
    with another factory under the same name is refused rather than mixed."""
    if isinstance(factory, str):
        return factory.strip()
    if isinstance(factory, functools.partial):
        inner = _source_of(factory.func)
        return f"{inner}#partial-{_fingerprint(factory.args, sorted(factory.keywords.items()))}"
    module = getattr(factory, "__module__", None) or type(factory).__module__
    qualname = getattr(factory, "__qualname__", None)
    if qualname is None:  # a callable object
        try:
            state = sorted(vars(factory).items())
        except TypeError:
            state = repr(factory)
        return f"{module}:{type(factory).__qualname__}#object-{_fingerprint(state)}"
    source = f"{module}:{qualname}"
    code = getattr(factory, "__code__", None)
    if code is not None and ("<lambda>" in qualname or "<locals>" in qualname):
        cells = tuple(repr(c.cell_contents) for c in (factory.__closure__ or ()))
        source += f"#code-{_fingerprint(code.co_code, code.co_consts, cells)}"
    return source


def plugin_settings(entries) -> dict:
    """``{"plugins": {name: source}}`` of a lineup's plug-in models, for a run's settings; ``{}``
    without plug-ins, so that a run of built-in models keeps the hash it always had."""
    plugins = {e.name: e.source for e in entries if not e.builtin}
    return {"plugins": plugins} if plugins else {}


def resolve_lineup(models="all", extra: Iterable[str] = ()) -> list[ModelEntry]:
    """The models of a run, in table order (registered models first, then the others as given).

    Parameters
    ----------
    models : str, iterable of str, or mapping name -> factory
        See the module docstring. ``"all"`` is every registered model plus every installed
        entry point.
    extra : iterable of str
        ``NAME=package.module:factory`` strings (the CLI's ``--model``), added to ``models``.

    Raises
    ------
    ValueError
        An unknown built-in name, a malformed ``--model``, a name given twice with two
        factories, or a name of a built-in model given another factory.
    """
    builtin = set(model_names())
    plugins: dict[str, Callable | str] = {}
    names: list[str] = []
    if isinstance(models, Mapping):
        for name, factory in models.items():
            name = str(name)
            if factory is None:
                names.append(name)
                continue
            if isinstance(factory, str) and ":" not in factory:
                names.append(_builtin_by_name(name, factory, builtin))
                continue
            if not (callable(factory) or isinstance(factory, str)):
                raise PluginError(f"model {name!r}: a factory must be callable or 'module:factory'")
            plugins[name] = factory
    else:
        names = [models] if isinstance(models, str) else list(models or ["all"])
    wants_all = any(str(n).lower() == "all" for n in names)
    installed = {}
    if wants_all:
        for name, spec in entry_point_factories().items():
            if name in builtin or not _NAME.fullmatch(name):
                warnings.warn(
                    f"entry point {name!r} of {ENTRY_POINT_GROUP} skipped: not a usable model name",
                    stacklevel=2,
                )
                continue
            installed[name] = spec
            plugins.setdefault(name, spec)
    for text in extra:
        name, spec = parse_model_option(text)
        if name in plugins and _source_of(plugins[name]) != spec:
            raise PluginError(f"--model {name}: given twice with different factories")
        plugins[name] = spec
    clash = sorted(set(plugins) & builtin)
    if clash:
        raise PluginError(f"model name {clash[0]!r} is a built-in model; give the plug-in another name")
    for name, factory in plugins.items():
        if not _NAME.fullmatch(name) or "__" in name:
            raise PluginError(
                f"model name {name!r}: use letters, digits, '.', '_', '-' or '+' (no '__'); it names files"
            )
        # an explicit factory string fails now, in one line; an installed entry point that does
        # not import fails only its own tasks (one broken package must not block the others)
        if isinstance(factory, str) and installed.get(name) != factory:
            load_factory(factory, what=f"model {name!r}: factory")
    chosen = resolve_models(names) if (names or not plugins) else []
    entries = [ModelEntry(n) for n in chosen]
    entries += [ModelEntry(n, f, _source_of(f)) for n, f in plugins.items()]
    return entries


def _builtin_by_name(name: str, value: str, builtin) -> str:
    """The built-in model that ``{name: value}`` names by its name (``{"HMM": "HMM"}``), or a
    :class:`PluginError` saying what a value without ':' may be."""
    known = {b.upper(): b for b in builtin}
    key = value.strip().upper()
    if key in known and name.strip().upper() == key:
        return known[key]
    if key in known:
        raise PluginError(
            f"model {name!r}: {value!r} is a built-in model, which keeps its own name in the results: "
            f"give it as {{{known[key]!r}: {known[key]!r}}} (or None)"
        )
    raise PluginError(
        f"model {name!r}: {value!r} is neither 'module:factory' nor a built-in model "
        f"({', '.join(builtin)}; given by its name, {{'HMM': 'HMM'}} or {{'HMM': None}})"
    )


def check_sendable(entries: list[ModelEntry], jobs: int) -> None:
    """With worker processes, every factory must pickle (a module-level function or a string)."""
    if int(jobs) <= 1:
        return
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    for e in entries:
        if e.builtin or isinstance(e.factory, str):
            continue
        if e.source.startswith("__main__:") and not main_file:
            raise PluginError(
                f"model {e.name!r}: factory {e.source} is defined in an interactive session or a script "
                f"read from stdin, which worker processes cannot import (jobs={jobs}); put it in a module "
                f"and pass it (or 'package.module:factory'), or use jobs=1"
            )
        try:
            pickle.dumps(e.factory)
        except Exception:
            raise PluginError(
                f"model {e.name!r}: factory {e.source} cannot be sent to worker processes (jobs={jobs}); "
                f"define it at module level, pass 'package.module:factory', or use jobs=1"
            ) from None


def check_protocol(model, name: str) -> None:
    """Raise :class:`PluginError` when ``model`` does not follow the harness protocol."""
    for method in ("fit", "score_samples"):
        if not callable(getattr(model, method, None)):
            raise PluginError(f"model {name!r} violates the harness protocol: no {method}() method")
    kind = getattr(model, "score_kind", None)
    if kind not in SCORE_KINDS:
        raise PluginError(
            f"model {name!r} violates the harness protocol: score_kind is {kind!r}, "
            f"expected one of {', '.join(SCORE_KINDS)}"
        )


def build_model(entry: ModelEntry | str, n_states: int, n_symbols: int, settings: dict):
    """A fresh model of a run: a registered one with the run's settings, or the factory's.

    A factory is called as ``factory(n_states, n_symbols, seed)``, plus the run's harness-wide
    settings it names as keyword parameters (``n_init`` = the restart budget, ``max_iter``,
    ``tol``, ``m_step``, ``effort``; each only when the run sets it), so that a plug-in can take the same
    restart budget as every other model. Its model is checked by :func:`check_protocol`. Any
    error names the model.
    """
    if isinstance(entry, str):
        entry = ModelEntry(entry)
    if entry.builtin:
        return model_from_settings(entry.name, n_states, n_symbols, settings)
    factory = entry.factory
    if isinstance(factory, str):
        factory = load_factory(factory, what=f"model {entry.name!r}: factory")
    given = em_settings_of(settings)
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin or C callable: positional arguments only
        params = {}
    extra = {k: v for k, v in given.items() if v is not None and k in params}
    try:
        model = factory(int(n_states), int(n_symbols), int(settings["seed"]), **extra)
    except Exception as err:
        raise PluginError(f"model {entry.name!r}: the factory raised {type(err).__name__}: {err}") from None
    check_protocol(model, entry.name)
    return model


#: How far above 0 nats a plug-in's per-sequence score may round (a one-event sequence whose
#: probability is 1 computed as exp(log(1)) summed in another order).
POSITIVE_SCORE_SLACK = 1e-9


def check_scores(scores, n: int, name: str, what: str = "score_samples") -> np.ndarray:
    """``scores`` as a finite float array of length ``n`` with no value above 0 nats (beyond
    :data:`POSITIVE_SCORE_SLACK`), or a :class:`PluginError` naming the model."""
    try:
        arr = np.asarray(scores, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise PluginError(f"model {name!r}: {what} returned {type(scores).__name__}, not numbers") from None
    if arr.size != n:
        raise PluginError(f"model {name!r}: {what} returned {arr.size} values for {n} sequences")
    bad = int((~np.isfinite(arr)).sum())
    if bad:
        raise PluginError(f"model {name!r}: {what} returned {bad} non-finite values of {n}")
    # a log probability (or a bound on one) of a sequence of discrete events is at most 0 nats
    # (an empty sequence's is 0): a positive score is a density or a bug, and would win every t-test
    above = int((arr > POSITIVE_SCORE_SLACK).sum())
    if above:
        raise PluginError(
            f"model {name!r}: {what} returned {above} values above 0 nats of {n} (largest "
            f"{float(arr.max()):.6g}): a log probability of a sequence of discrete events cannot exceed 0"
        )
    return arr
