"""The line-up of the experiments: the registered models, as the harness names and builds them.

Everything here is read from :mod:`ldhmm.models.registry`, which the model classes fill
themselves (``LDHMM-FF``/``LDHMM-PF`` in :mod:`ldhmm.models.ldhmm`, each baseline in its
module of :mod:`ldhmm.baselines`); importing this module imports the baselines so that they
are registered. A model registered later (a plug-in) joins every list below: the module
attributes :data:`MODEL_NAMES`, :data:`LDHMM_NAMES`, :data:`IS_MODELS` and :data:`MODELS`
are computed from the registry when they are read.

:func:`make_model` adds the harness-wide EM settings ``max_iter``, ``tol`` and ``m_step`` to
the models that take them (each registration says which: LDA keeps gensim's own schedule,
``passes=10``, because its ``max_iter`` means per-document inference iterations, not EM
iterations; only the LDHMM entries take ``m_step``), and ``effort`` to the models of the LDHMM
family, those whose class takes an ``effort`` parameter (:func:`takes_effort`: LDHMM-PF,
LDHMM-FF, VBHMM, HMMV).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable

from ..models import LDHMM
from ..models.registry import get_spec, registered

__all__ = [  # noqa: F822 - the first four are served by the module's __getattr__
    "MODEL_NAMES",
    "LINEUP_NAMES",
    "lineup_names",
    "LDHMM_NAMES",
    "IS_MODELS",
    "MODELS",
    "model_names",
    "ldhmm_names",
    "is_models",
    "make_model",
    "constructor_options",
    "takes_effort",
    "em_settings_of",
    "options_from_settings",
    "model_from_settings",
    "resolve_models",
    "model_score_kind",
    "model_order",
]


def model_names() -> tuple[str, ...]:
    """The harness names of every registered model, in the order tables list them."""
    return tuple(spec.name for spec in registered())


def lineup_names() -> tuple[str, ...]:
    """The default line-up (no ``--models``, or ``all``): every registered model but the
    variants registered with ``in_lineup=False``, which run when named."""
    return tuple(spec.name for spec in registered() if spec.in_lineup)


def ldhmm_names() -> tuple[str, ...]:
    """The LDHMM entries (compared against every other model in the t-tests)."""
    return tuple(spec.name for spec in registered() if issubclass(spec.cls, LDHMM))


def is_models() -> tuple[str, ...]:
    """The models with ``log_marginal_is`` (importance-sampled log p(x))."""
    return tuple(spec.name for spec in registered() if spec.has_log_marginal_is)


def _factories() -> dict[str, Callable]:
    return {spec.name: spec.make for spec in registered()}


_LIVE = {
    "MODEL_NAMES": model_names,
    "LINEUP_NAMES": lineup_names,
    "LDHMM_NAMES": ldhmm_names,
    "IS_MODELS": is_models,
    "MODELS": _factories,
}


def __getattr__(name):
    # The registry may grow after this module is imported (a plug-in registers its class),
    # so these names are computed when read rather than frozen at import.
    try:
        return _LIVE[name]()
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def model_score_kind(name: str) -> str:
    """What ``score_samples`` of the named model returns: its class's ``score_kind``."""
    return get_spec(name).score_kind


def make_model(name: str, n_states: int, n_symbols: int, seed: int = 0, **options):
    """A fresh, unfitted model of the registry, built with the arguments that
    :func:`constructor_options` makes of ``n_symbols``, ``seed`` and the keywords below.

    Parameters
    ----------
    name : one of :data:`MODEL_NAMES`
    n_states : int or None
        K; None for a model without states (``has_states = False``), which is built with its
        ignored ``n_states`` at 1.
    n_symbols : int
        V of the whole database (so that every fold's model knows every symbol).
    seed : int
    max_iter, tol : optional, keyword
        EM settings for the models that iterate EM (not LDA); None keeps the model's default.
    m_step : {"collapsed", "paper"}, optional
        M-step of the LDHMM models (None: their default, ``"collapsed"``).
    n_init : int, optional
        Restarts, for every model that takes them (None: each model's default).
    effort : {"quick", "standard", "thorough"}, optional
        How hard each fit of the LDHMM family searches (:func:`takes_effort`; None: the
        model's default, ``"standard"``).
    **options
        Further constructor arguments of that model.
    """
    options = constructor_options(name, n_symbols, seed, **options)
    return get_spec(name).cls(1 if n_states is None else int(n_states), **options)


def constructor_options(
    name: str,
    n_symbols: int,
    seed: int = 0,
    max_iter: int | None = None,
    tol: float | None = None,
    m_step: str | None = None,
    n_init: int | None = None,
    effort: str | None = None,
    **options,
) -> dict:
    """The constructor arguments of the registry's model ``name``, K aside: what
    :func:`make_model` passes after ``n_states`` (the name's fixed options, ``n_symbols``,
    ``seed``, the EM settings it takes, ``effort`` where its class takes it, ``options``),
    and what a fit along K (``fit_path(sequences, states, **options)``) gets."""
    spec = get_spec(name)
    given = {
        "max_iter": None if max_iter is None else int(max_iter),
        "tol": None if tol is None else float(tol),
        "m_step": m_step,
        "n_init": None if n_init is None else int(n_init),
    }
    for key in spec.em_settings:
        if given[key] is not None:
            options.setdefault(key, given[key])
    if effort is not None and takes_effort(name):
        options.setdefault("effort", effort)
    return {**spec.options, "n_symbols": int(n_symbols), "seed": int(seed), **options}


def takes_effort(name: str) -> bool:
    """Whether the registry's model ``name`` is of the LDHMM family: its class takes an
    ``effort`` parameter (:class:`ldhmm.models.fit_settings.FitSettings`), which the harness's
    ``effort`` is passed to."""
    return "effort" in inspect.signature(get_spec(name).cls).parameters


def em_settings_of(settings: dict) -> dict:
    """A run's harness-wide settings, as ``config.json`` records them, by their constructor names
    (:data:`ldhmm.models.registry.EM_SETTINGS`; ``restarts`` is ``n_init``; and ``effort``);
    None where the run leaves one to the models."""
    return {
        "max_iter": settings.get("max_iter"),
        "tol": settings.get("tol"),
        "m_step": settings.get("m_step"),
        "n_init": settings.get("restarts"),
        "effort": settings.get("effort"),
    }


def model_from_settings(name: str, n_states: int, n_symbols: int, settings: dict):
    """:func:`make_model` with a run's ``seed`` and harness-wide settings (:func:`em_settings_of`)."""
    return make_model(name, n_states, n_symbols, seed=settings["seed"], **em_settings_of(settings))


def options_from_settings(name: str, n_symbols: int, settings: dict) -> dict:
    """:func:`constructor_options` with a run's ``seed`` and harness-wide settings."""
    return constructor_options(name, n_symbols, seed=settings["seed"], **em_settings_of(settings))


def resolve_models(names: Iterable[str] | None) -> list[str]:
    """``None``/``["all"]`` -> the line-up (every model registered with ``in_lineup``; a variant
    such as LDHMM-PF-ctx1 runs only when named); otherwise the given names (checked,
    case-insensitive, duplicates dropped), in the registry order."""
    known = model_names()
    names = list(names or ["all"])
    if any(str(n).lower() == "all" for n in names):
        return list(lineup_names())
    upper = {m.upper(): m for m in known}
    chosen = []
    for n in names:
        key = str(n).upper()
        if key not in upper:
            raise ValueError(f"unknown model {n!r}; choose from all, {', '.join(known)}")
        chosen.append(upper[key])
    return [m for m in known if m in chosen]


def model_order(name) -> tuple:
    """Sort key of a result row's model (``"LDHMM-PF+LR"`` sorts with ``LDHMM-PF``): registry order."""
    known = model_names()
    base = str(name).split("+")[0]
    return (known.index(base) if base in known else 99, str(name))
