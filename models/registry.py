"""The registry of the models the comparison harness runs, filled by the model classes themselves.

A model enters the harness by registering its class, next to the class::

    from ldhmm.models import SequenceModel, register

    @register                      # harness name: the class's ``name``
    class MyBaseline(SequenceModel):
        name = "MYB"
        score_kind = "exact"
        ...

and, for a model shipped with ldhmm, one row in :data:`BUILTIN_NAMES` (and its class in
:data:`BUILTIN_CLASSES`). Everything the harness knows about a model is read from the class:
``score_kind``, whether it has ``log_marginal_is`` (then the harness reports an
importance-sampled estimate beside ``score_samples``), and its constructor. What the class
cannot say is given to :func:`register`:

``name``
    The harness name (the ``model`` column of result files, ``--models``); default the
    class's ``name``. One class may be registered under several names with different
    fixed ``options`` (``LDHMM-FF`` and ``LDHMM-PF`` are :class:`ldhmm.models.LDHMM` with
    ``guide="ff"`` / ``"pf"``).
``options``
    Constructor arguments fixed for this name.
``em_settings``
    Which of the harness-wide settings :data:`EM_SETTINGS` (``--max-iter``, ``--tol``,
    ``--m-step``, ``--restarts`` as ``n_init``) the model takes as constructor arguments of
    the same names. Default
    ``("max_iter", "tol")``, for a model that iterates EM to convergence; ``()`` for one
    whose ``max_iter`` means something else (LDA: per-document iterations).

**The models shipped with ldhmm are known by name before their modules are imported.**
:data:`BUILTIN_CLASSES` names each built-in class's module and :data:`BUILTIN_NAMES` each
built-in harness name's class, in the order of the result tables. A module is imported when a
name or a class of it is first asked for (:func:`get_spec`, :func:`model_class`), and its
``@register`` then fills the entry; :func:`registered` imports them all (the harness runs
every model). Why: the baselines bring gensim, hmmlearn and scikit-learn, about 2 CPU seconds
of imports that ``ldhmm score`` of an LDHMM file never uses. This is the registry's one
on-demand import, by a static table (as ``ldhmm.cli.commands`` is the command line's). A
built-in harness name is its built-in class's, even before that class's module is imported:
another class that registers under it is refused.

Tables list the built-in models in the order of :data:`BUILTIN_NAMES`, then every other
registered model in the order it was registered.

Every registered class is called as ``cls(n_states, n_symbols=V, seed=seed, **options)``.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .base import SCORE_KINDS

__all__ = [
    "EM_SETTINGS",
    "BUILTIN_CLASSES",
    "BUILTIN_NAMES",
    "ModelSpec",
    "register",
    "unregister",
    "registered",
    "registered_names",
    "get_spec",
    "model_class",
]

#: The harness-wide settings a model may take (constructor arguments of these names).
EM_SETTINGS = ("max_iter", "tol", "m_step", "n_init")

#: ``{class name: module}`` (relative to ``ldhmm.models``) of every class shipped with ldhmm that
#: a model file may name or a built-in harness name runs.
BUILTIN_CLASSES = {
    "VariantHMM": ".variant_hmm",
    "LDHMM": ".ldhmm",
    "PyroSequenceModel": ".pyro_sequence",
    "HMM": "..baselines.hmm",
    "LDA": "..baselines.lda",
    "VBHMM": "..baselines.vbhmm",
    "HMMV": "..baselines.hmmv",
    "SmoothedMarkovChain": "..baselines.markov_smoothed",
    "ContextualLDHMM": ".contextual",
    "ContextualHMM": ".contextual_hmm",
}

#: ``{harness name: class name}`` of the models shipped with ldhmm, in the order of the tables.
BUILTIN_NAMES = {
    "LDHMM-FF": "LDHMM",
    "LDHMM-PF": "LDHMM",
    "HMM": "HMM",
    "LDA": "LDA",
    "VBHMM": "VBHMM",
    "HMMV": "HMMV",
    "MARKOV1": "SmoothedMarkovChain",
    "MARKOV3": "SmoothedMarkovChain",
    "LDHMM-PF-ctx1": "ContextualLDHMM",
    "LDHMM-PF-ctx3": "ContextualLDHMM",
    "LDHMM-FF-ctx1": "ContextualLDHMM",
    "HMM-ctx1": "ContextualHMM",
}

_REGISTRY: dict[str, ModelSpec] = {}


@dataclass(frozen=True)
class ModelSpec:
    """One harness name: a model class with its fixed options.

    Attributes
    ----------
    name : str
        The harness name.
    cls : type
        The model class (follows the harness protocol: :func:`ldhmm.experiments.plugins.check_protocol`).
    options : Mapping
        Constructor arguments fixed for this name.
    em_settings : tuple of str
        The harness-wide settings (of :data:`EM_SETTINGS`) the model takes.
    in_lineup : bool
        Whether a run without ``--models`` (or with ``all``) includes it; False for a variant
        that runs only when named (the contextual LDHMMs).
    """

    name: str
    cls: type
    options: Mapping[str, Any] = field(default_factory=dict)
    em_settings: tuple[str, ...] = ("max_iter", "tol")
    in_lineup: bool = True

    @property
    def score_kind(self) -> str:
        """What ``score_samples`` returns, as the class says (one of ``SCORE_KINDS``)."""
        return self.cls.score_kind

    @property
    def has_states(self) -> bool:
        """Whether the model has hidden states (a K); False for a chain over the symbols."""
        return bool(getattr(self.cls, "has_states", True))

    @property
    def has_log_marginal_is(self) -> bool:
        """Whether the model estimates ``log p(x)`` by importance sampling (``log_marginal_is``)."""
        return callable(getattr(self.cls, "log_marginal_is", None))

    def make(self, n_states: int, n_symbols: int | None, seed: int = 0, **options):
        """A fresh, unfitted model: ``cls(n_states, n_symbols=..., seed=..., **fixed, **options)``."""
        return self.cls(n_states, n_symbols=n_symbols, seed=seed, **{**self.options, **options})


def register(
    cls=None,
    *,
    name: str | None = None,
    options: Mapping[str, Any] | None = None,
    em_settings: tuple[str, ...] = ("max_iter", "tol"),
    in_lineup: bool = True,
):
    """Register a model class with the harness; usable as ``@register`` or ``@register(...)``.

    Parameters
    ----------
    cls : type, optional
        The model class; omitted when used as a decorator with arguments.
    name : str, optional
        Harness name (default ``cls.name``).
    options : mapping, optional
        Constructor arguments fixed for this name.
    em_settings : tuple of str
        The settings of :data:`EM_SETTINGS` the model takes (see the module docstring).
    in_lineup : bool
        Whether the default line-up (no ``--models``, or ``all``) includes it.

    Returns
    -------
    The class (so that it works as a decorator), or the decorator when ``cls`` is omitted.

    Raises
    ------
    ValueError
        The name is taken by another class, is empty, or ``em_settings`` names an unknown
        setting.
    TypeError
        The class declares no valid ``score_kind``.
    """
    if cls is None:
        return lambda klass: register(
            klass, name=name, options=options, em_settings=em_settings, in_lineup=in_lineup
        )
    key = name if name is not None else getattr(cls, "name", "")
    if not isinstance(key, str) or not key:
        raise ValueError(f"{cls.__name__}: a harness name is needed (name= or the class's `name`)")
    if getattr(cls, "score_kind", None) not in SCORE_KINDS:
        raise TypeError(f"{cls.__name__}.score_kind must be one of {SCORE_KINDS}")
    unknown = [s for s in em_settings if s not in EM_SETTINGS]
    if unknown:
        raise ValueError(f"{key}: unknown em_settings {unknown}; known: {', '.join(EM_SETTINGS)}")
    builtin = _builtin_qualified(key)
    if builtin is not None and builtin != _qualified(cls):
        raise ValueError(f"harness name {key!r} is taken by {builtin}")
    old = _REGISTRY.get(key)
    # The same class defined again (a module re-executed) replaces its entry, keeping its
    # place in the order; another class may not take a name.
    if old is not None and _qualified(old.cls) != _qualified(cls):
        raise ValueError(f"harness name {key!r} is taken by {_qualified(old.cls)}")
    _REGISTRY[key] = ModelSpec(
        key, cls, MappingProxyType(dict(options or {})), tuple(em_settings), bool(in_lineup)
    )
    return cls


def unregister(name: str) -> None:
    """Remove a harness name (a no-op when it is not registered; a built-in name comes back when
    its module is imported again)."""
    _REGISTRY.pop(name, None)


def registered_names() -> tuple[str, ...]:
    """Every harness name, in the order of the tables, without importing any model's module."""
    return (*BUILTIN_NAMES, *(name for name in _REGISTRY if name not in BUILTIN_NAMES))


def registered() -> tuple[ModelSpec, ...]:
    """Every registered model, in the order of the tables (imports every built-in model's module)."""
    for name in BUILTIN_NAMES:
        _load_builtin(name)
    ordered = [_REGISTRY[name] for name in BUILTIN_NAMES if name in _REGISTRY]
    return (*ordered, *(spec for name, spec in _REGISTRY.items() if name not in BUILTIN_NAMES))


def get_spec(name: str) -> ModelSpec:
    """The spec of a harness name, or a ``ValueError`` listing the known names."""
    _load_builtin(name)
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(registered_names())}") from None


def model_class(class_name: str) -> type | None:
    """The model class a model file names: a built-in class (its module imported now) or the
    class of a registered model; None when no class of that name is known."""
    module = BUILTIN_CLASSES.get(class_name)
    if module is not None:
        return getattr(importlib.import_module(module, __package__), class_name)
    return next((spec.cls for spec in _REGISTRY.values() if spec.cls.__name__ == class_name), None)


def _load_builtin(name: str) -> None:
    # Importing the module runs its ``register`` calls, which fill the entry.
    class_name = BUILTIN_NAMES.get(name)
    if class_name is not None and name not in _REGISTRY:
        importlib.import_module(BUILTIN_CLASSES[class_name], __package__)


def _builtin_qualified(name: str) -> str | None:
    class_name = BUILTIN_NAMES.get(name)
    if class_name is None:
        return None
    module = importlib.util.resolve_name(BUILTIN_CLASSES[class_name], __package__)
    return f"{module}.{class_name}"


def _qualified(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
