"""The fitting settings of the LDHMM-family estimators, each written once.

:class:`FitSettings` is the one table of the settings that
:class:`ldhmm.models.variant_hmm.VariantHMM` and every subclass of it (LDHMM, VBHMM, HMMV, ...)
take beside their own arguments: for each, its name, default, check, documentation and the
inference classes it is handed to. :class:`TakesFitSettings`, the estimators' base, reads the
rest off the table:

* the constructor takes the settings as keyword arguments (``**settings``) and stores each,
  checked, as an attribute of its name (scikit-learn's convention);
* the constructor's signature lists them by name, keyword-only, with the class's defaults
  (:attr:`TakesFitSettings.fit_defaults`), so that ``get_params``, ``get_config``, model files,
  ``repr`` and ``help`` see every one;
* a ``{fit_settings}`` line of the class docstring becomes their entries of its Parameters
  section;
* :meth:`FitSettings.arguments` hands the EM driver (:class:`ldhmm.inference.em.VariationalEM`)
  and the partition workers (:class:`ldhmm.inference.distributed.workers.PartitionWorker`) the
  settings that they take.

So a new setting is one field of :class:`FitSettings` (and the code that uses it).
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import textwrap
from dataclasses import dataclass, field, fields, replace
from typing import ClassVar

import numpy as np
import torch

from ..inference import HMM_START_CONCENTRATION, M_STEP_METHODS, RANDOM_STARTS, VariationalEM
from ..inference.acceleration import ACCELERATIONS
from ..inference.cavi.emissions import EMISSION_LAYOUTS
from ..inference.copies import IDENTICAL_SEQUENCES
from ..inference.distributed.workers import PartitionWorker

__all__ = [
    "DEFAULTS_VERSION",
    "DTYPES",
    "EFFORTS",
    "EFFORT_PRESETS",
    "START_POLICIES",
    "INIT_METHODS",
    "SEEDED_STARTS",
    "SETTING_NAMES",
    "FitSettings",
    "TakesFitSettings",
    "settings_doc",
]

#: The floating-point types an estimator computes in, by name.
DTYPES = {"float64": torch.float64, "float32": torch.float32}
#: How a fit starts (see :class:`FitSettings`' ``init``).
INIT_METHODS = ("auto", "random", "pf")
#: The version of the fitting defaults that the experiments' tables name (experiments/README.md,
#: "Defaults behind the tables"); part of every harness run's configuration hash, so that a run
#: directory of other defaults is never resumed into a mix. Raised when a default moves numbers.
DEFAULTS_VERSION = "v6"
#: The starts a fit may add beside its random restarts (see :class:`FitSettings`' ``seeded_start``).
SEEDED_STARTS = ("symbols", "none")
#: The effort presets of a fit (see :class:`FitSettings`' ``effort``), fastest first.
EFFORTS = ("quick", "standard", "thorough")
#: Where a fit's EM starts (see :class:`FitSettings`' ``start_policy``).
START_POLICIES = ("restarts", "hmm_and_seeded", "hmm")
#: The settings each effort preset gives where they are left None (docs/performance.md,
#: "Effort presets"). ``"thorough"`` is the v4 defaults bit for bit: ``n_init`` EM runs from
#: random starts and the symbol-seeded one, every start at the first E-step and at up to ten
#: refreshes. ``"standard"`` (v5) runs EM from the database-level HMM and from the symbol-seeded
#: start, with one start per sequence beside the warm run at every E-step, in turn, and up to
#: three refreshes; ``"quick"`` runs EM once, from the database-level HMM, with the rotating
#: start and no refresh. No preset accelerates EM (``acceleration``; issue 44, direction 2).
#: Since v6 ``"standard"`` and ``"quick"`` compute identical sequences once
#: (``identical_sequences``; issue 44, direction 1).
EFFORT_PRESETS = {
    "quick": {
        "start_policy": "hmm",
        "refresh_max": 0,
        "start_every": 1,
        "acceleration": "none",
        "identical_sequences": "once",
    },
    "standard": {
        "start_policy": "hmm_and_seeded",
        "refresh_max": 3,
        "start_every": 1,
        "acceleration": "none",
        "identical_sequences": "once",
    },
    "thorough": {
        "start_policy": "restarts",
        "refresh_max": 10,
        "start_every": 0,
        "acceleration": "none",
        "identical_sequences": "each",
    },
}
#: The docstring line that :class:`TakesFitSettings` replaces with the settings' entries.
PLACEHOLDER = "{fit_settings}"


@dataclass(frozen=True)
class _Integer:
    """An integer (not a bool) of at least ``low``, returned as ``int``."""

    low: int
    #: What the error message asks for (a subclass widens it).
    _wanted = "an integer"

    @property
    def kind(self) -> str:
        return f"int >= {self.low}"

    def __call__(self, name: str, value) -> int:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < self.low:
            raise ValueError(f"{name} must be {self._wanted} >= {self.low}, got {value!r}")
        return int(value)


@dataclass(frozen=True)
class _IntegerOrNone(_Integer):
    """None, or an integer (not a bool) of at least ``low``."""

    _wanted = "None or an integer"

    @property
    def kind(self) -> str:
        return f"int >= {self.low} or None"

    def __call__(self, name: str, value) -> int | None:
        return None if value is None else super().__call__(name, value)


@dataclass(frozen=True)
class _Number:
    """A finite real number (not a bool) of at least ``low``, returned as ``float``."""

    low: float

    @property
    def kind(self) -> str:
        return f"float >= {self.low:g}"

    def __call__(self, name: str, value) -> float:
        if (
            isinstance(value, (bool, np.bool_))
            or not isinstance(value, numbers.Real)
            or not math.isfinite(value)
            or value < self.low
        ):
            raise ValueError(f"{name} must be a finite number >= {self.low:g}, got {value!r}")
        return float(value)


@dataclass(frozen=True)
class _OneOf:
    """One of ``options`` (strings)."""

    options: tuple

    @property
    def kind(self) -> str:
        return "{" + ", ".join(f'"{o}"' for o in self.options) + "}"

    def __call__(self, name: str, value) -> str:
        if not isinstance(value, str) or value not in self.options:
            raise ValueError(f"{name} must be one of {self.options}, got {value!r}")
        return value


@dataclass(frozen=True)
class _OneOfOrNone(_OneOf):
    """None, or one of ``options`` (strings)."""

    @property
    def kind(self) -> str:
        return super().kind + " or None"

    def __call__(self, name: str, value) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or value not in self.options:
            raise ValueError(f"{name} must be None or one of {self.options}, got {value!r}")
        return value


def _setting(default, check, doc: str, to: tuple = ()):
    """A field of :class:`FitSettings`: its default, its check (returns the value to store or
    raises a one-line ``ValueError`` naming the setting), its documentation (one paragraph,
    wrapped into the docstrings) and the classes whose constructors take it (``to``)."""
    return field(default=default, metadata={"check": check, "doc": doc, "to": to})


@dataclass(frozen=True)
class FitSettings:
    """The fitting settings every LDHMM-family estimator takes (see the module docstring).

    Parameters
    ----------
    {fit_settings}

    Raises
    ------
    ValueError
        One line naming the setting, for a value of the wrong type or out of range.
    """

    max_iter: int = _setting(100, _Integer(1), "EM iterations at most.", to=(VariationalEM,))
    tol: float = _setting(
        1e-4,
        _Number(0.0),
        "EM stops at a relative change of the total training ELBO below ``tol``.",
        to=(VariationalEM,),
    )
    e_step_max_iter: int = _setting(
        100,
        _Integer(1),
        "Coordinate-ascent sweeps per sequence in each E-step, at most.",
        to=(VariationalEM, PartitionWorker),
    )
    e_step_tol: float = _setting(
        1e-6,
        _Number(0.0),
        "A sequence's sweeps stop at a relative change of its ELBO below ``e_step_tol``.",
        to=(VariationalEM, PartitionWorker),
    )
    dtype: str = _setting(
        "float64", _OneOf(tuple(DTYPES)), "Floating-point type of the parameters and the E-step."
    )
    bucket_cells: int = _setting(
        1 << 20,
        _Integer(1),
        "Padded cells (sequences x length) per E-step batch: the memory/speed trade-off.",
        to=(PartitionWorker,),
    )
    n_init: int = _setting(
        3,
        _Integer(1),
        "Random restarts (seeds: ``restart_seeds()``); the fit with the highest final training "
        'ELBO is kept (docs/math.md, "Restarts and initialization").',
    )
    path_n_init: int | None = _setting(
        None,
        _IntegerOrNone(1),
        "Random restarts at each K of a path after the first (:meth:`fit_path`), where the "
        "starts grown from the K - 1 fit race beside them: at most ``n_init``, the first seeds "
        "of ``restart_seeds()``; None (default): ``n_init``, as at the first K. 1 makes a path "
        "K = 2..8 about 0.6x as costly and its training ELBO up to 0.0032 nats/token lower "
        '(docs/performance.md, "Fewer restarts along K").',
    )
    seeded_start: str = _setting(
        "symbols",
        _OneOf(SEEDED_STARTS),
        '``"symbols"``: one more start beside the ``n_init`` restarts, each state\'s emission row '
        "seeded on one of the K most frequent symbols, initial and transition priors flat "
        "(:func:`ldhmm.inference.parameters.symbol_seeded_parameters`; skipped where fewer than K "
        "symbols occur); it is kept where its final training ELBO is highest (``start_kind_`` "
        '``"seeded"``). Random starts miss the optimum under sparse priors (docs/math.md, '
        '"Restarts and initialization"). ``"none"``: the restarts only (ldhmm 0.2.0 before v4).',
    )
    m_step: str = _setting(
        "collapsed",
        _OneOf(M_STEP_METHODS),
        'Update of learned Dirichlet priors: ``"collapsed"`` maximizes the ELBO over the prior '
        "and every q(theta_m) jointly (Newton-Raphson on ``sum_m log B(alpha + n_m) - log "
        'B(alpha)``); ``"paper"`` holds q(theta_m) fixed as in the paper and needs many more EM '
        "iterations (concentrations grow a little per iteration; see "
        ":mod:`ldhmm.inference.cavi.maximization`). Neither decreases the ELBO.",
        to=(VariationalEM, PartitionWorker),
    )
    effort: str = _setting(
        "standard",
        _OneOf(EFFORTS),
        "How hard a fit searches: a preset of ``start_policy``, ``refresh_max``, ``start_every`` "
        "and ``acceleration`` (each one left None takes the preset's; :data:`EFFORT_PRESETS`). "
        '``"thorough"`` reproduces the v4 defaults bit for bit (``n_init`` EM runs from random '
        "starts and the symbol-seeded start, every start at up to ten refreshes); "
        '``"standard"`` (the default since v5) two EM runs, from the database-level HMM and from '
        "the symbol-seeded start, with a rotating start at every E-step and up to three "
        'refreshes; ``"quick"`` the run from the HMM alone, no refresh (docs/performance.md, '
        '"Effort presets").',
    )
    start_policy: str | None = _setting(
        None,
        _OneOfOrNone(START_POLICIES),
        'Where EM starts. ``"restarts"``: ``n_init`` runs from random starting points and the '
        'symbol-seeded one (``seeded_start``), the best kept. ``"hmm"``: one run from the '
        "database-level HMM (fitted by Baum-Welch from ``n_init`` random starts and the "
        "symbol-seeded one; each learned prior row its probabilities times "
        '``hmm_start_concentration``). ``"hmm_and_seeded"``: '
        "that run and one from the symbol-seeded start (where ``seeded_start`` asks for it and "
        "K symbols occur), the better kept. None: ``effort``'s.",
    )
    hmm_start_concentration: float = _setting(
        HMM_START_CONCENTRATION,
        _Number(1e-3),
        "The total concentration of each learned prior row of the run from the database-level HMM "
        '(``start_policy`` ``"hmm"``, ``"hmm_and_seeded"``): the HMM\'s row times it. The '
        "default starts every sequence near the HMM's own posterior, so that the run ends at or "
        "above the HMM it contains; a loose start (1) lets the per-sequence parameters spread "
        "from the first E-step and reaches other optima (on splice's classes at K = 2 higher "
        'ones; docs/performance.md, "Where the splice AUCs come from").',
    )
    refresh_max: int | None = _setting(
        None,
        _IntegerOrNone(0),
        "Refreshes at most: each time EM converges, one more E-step runs every start beside each "
        "sequence's warm run and EM goes on where it gains more than ``tol``. None: ``effort``'s.",
        to=(VariationalEM,),
    )
    start_every: int | None = _setting(
        None,
        _IntegerOrNone(0),
        "A rotating start every this many E-steps: beside each sequence's warm run, one of the "
        "fit's starts in turn (a new random draw each time), the better run kept per sequence; "
        "0: none. None: ``effort``'s.",
        to=(VariationalEM,),
    )
    acceleration: str | None = _setting(
        None,
        _OneOfOrNone(ACCELERATIONS),
        '``"squarem"``: SQUAREM on the learned priors\' log concentrations (two EM iterations, an '
        'extrapolation, one stabilizing iteration); ``"anderson"``: damped Anderson acceleration '
        "of them (each iteration's point extrapolated from the last four); either point kept only "
        "where the ELBO does not fall (:mod:`ldhmm.inference.acceleration`); not with a "
        'checkpoint. ``"none"``: plain EM. '
        "None: ``effort``'s (plain EM in every preset).",
        to=(VariationalEM,),
    )
    identical_sequences: str | None = _setting(
        None,
        _OneOfOrNone(IDENTICAL_SEQUENCES),
        '``"once"``: each distinct sequence computed once and weighed by its copies, its random '
        "starts hashed from its content, so that copies are one computation, a fit does not "
        "depend on the order of the database and its starts not on the partitioning "
        "(:mod:`ldhmm.inference.copies`); "
        'per-sequence outputs stay one row per input. ``"each"``: every sequence on its own, its '
        "random starts hashed from its position (v5 and before). None: ``effort``'s "
        '(``"each"`` in ``"thorough"``).',
        to=(PartitionWorker,),
    )
    init: str = _setting(
        "auto",
        _OneOf(INIT_METHODS),
        'Where the fit starts: ``"random"``, the ``n_init`` seeded random starting points; '
        '``"pf"``, the same variant fitted first with the PF guide (with those restarts), then '
        'this guide from its parameters; ``"auto"``: ``"pf"`` for a guide that the E-step '
        'seeds from the exact chain (its ``starts`` include ``"chain"``, e.g. FF), else '
        '``"random"``. A mean-field fit from random points stops in poorer optima than the PF '
        "fit it is nested in.",
    )
    random_starts: int = _setting(
        RANDOM_STARTS,
        _Integer(0),
        "Random per-sequence starts of the E-step beside the deterministic ones (held-out "
        "scoring, a fit's first E-step and its refreshes; see "
        ":data:`ldhmm.inference.cavi.sequence_starts.STARTS`).",
        to=(VariationalEM,),
    )
    emission_layout: str = _setting(
        "auto",
        _OneOf(EMISSION_LAYOUTS),
        "How per-sequence emission counts are stored (:mod:`ldhmm.inference.cavi.emissions`): "
        '``"sparse"``, a K x (distinct symbols) block per sequence; ``"dense"``, K x V; '
        '``"auto"`` decides from K and V alone (sparse from '
        ":data:`ldhmm.inference.cavi.emissions.SPARSE_MIN_SYMBOLS` symbols on). Both give the "
        "same numbers (to rounding).",
    )

    def __post_init__(self):
        for f in fields(self):
            object.__setattr__(self, f.name, f.metadata["check"](f.name, getattr(self, f.name)))

    def resolved(self) -> FitSettings:
        """These settings with every one left None that ``effort`` presets set to its value
        (:data:`EFFORT_PRESETS`)."""
        preset = EFFORT_PRESETS[self.effort]
        return replace(self, **{k: v for k, v in preset.items() if getattr(self, k) is None})

    def arguments(self, consumer: type) -> dict:
        """The settings that ``consumer`` (:class:`VariationalEM`, :class:`PartitionWorker`)
        takes, as its keyword arguments of the same names (resolved: :meth:`resolved`)."""
        settings = self.resolved()
        return {f.name: getattr(settings, f.name) for f in fields(settings) if consumer in f.metadata["to"]}


#: The names of the settings, in the table's order.
SETTING_NAMES = tuple(f.name for f in fields(FitSettings))


def settings_doc(defaults: FitSettings, indent: str = "") -> str:
    """The numpydoc Parameters entries of the settings, with the defaults of ``defaults``."""
    lines = []
    for f in fields(FitSettings):
        value = getattr(defaults, f.name)
        default = f'"{value}"' if isinstance(value, str) else repr(value)
        lines.append(f"{indent}{f.name} : {f.metadata['check'].kind}, default {default}")
        body = indent + "    "
        lines += textwrap.wrap(f.metadata["doc"], width=92, initial_indent=body, subsequent_indent=body)
    return "\n".join(lines)


def _with_settings_doc(doc: str | None, defaults: FitSettings) -> str | None:
    """``doc`` with its :data:`PLACEHOLDER` line replaced by :func:`settings_doc`."""
    if not doc or PLACEHOLDER not in doc:
        return doc
    lines = doc.split("\n")
    for i, line in enumerate(lines):
        if line.strip() == PLACEHOLDER:
            lines[i] = settings_doc(defaults, line[: len(line) - len(line.lstrip())])
    return "\n".join(lines)


FitSettings.__doc__ = _with_settings_doc(FitSettings.__doc__, FitSettings())


def _settings_signature(init, defaults: FitSettings) -> inspect.Signature:
    """``init``'s signature with its ``**settings`` spelled out: each setting it does not name
    itself, keyword-only, with its default in ``defaults``."""
    signature = inspect.signature(init)
    params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    own = {p.name for p in params}
    keyword = inspect.Parameter.KEYWORD_ONLY
    params += [
        inspect.Parameter(f.name, keyword, default=getattr(defaults, f.name), annotation=f.type)
        for f in fields(FitSettings)
        if f.name not in own
    ]
    return signature.replace(parameters=params)


def _checked_init(cls, init):
    """``init`` (which ends in ``**settings``) with the settings spelled out in its signature
    (:func:`_settings_signature`, what ``inspect.signature`` reports: ``get_params``, model
    files, ``help``), and held to it: an argument it does not list is refused, even one that
    a base's ``__init__`` would take (LDHMM has no ``prior_concentration``)."""
    signature = _settings_signature(init, cls.fit_defaults)

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        try:
            signature.bind(self, *args, **kwargs)
        except TypeError as err:
            raise TypeError(f"{cls.__name__}(): {err}") from None
        init(self, *args, **kwargs)

    __init__.__signature__ = signature
    return __init__


class TakesFitSettings:
    """Base of the estimators that take the :class:`FitSettings` (see the module docstring).

    A subclass's ``__init__`` ends its parameters with ``**settings`` and passes them on to
    its base (whose ``__init__`` calls :meth:`_store_fit_settings`); a subclass may change
    defaults with its own :attr:`fit_defaults` (then it defines ``__init__``, whose signature
    carries them).
    """

    #: The class's defaults of the settings.
    fit_defaults: ClassVar[FitSettings] = FitSettings()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        init = vars(cls).get("__init__")
        if init is not None and any(
            p.kind is p.VAR_KEYWORD for p in inspect.signature(init).parameters.values()
        ):
            cls.__init__ = _checked_init(cls, init)
        cls.__doc__ = _with_settings_doc(cls.__doc__, cls.fit_defaults)

    def _store_fit_settings(self, given: dict) -> None:
        """Check the settings ``given`` (by name; the others take :attr:`fit_defaults`) and store
        each as an attribute of its name."""
        settings = replace(self.fit_defaults, **given)
        for name in SETTING_NAMES:
            setattr(self, name, getattr(settings, name))

    @property
    def fit_settings(self) -> FitSettings:
        """The current settings (the attributes of their names), checked."""
        return FitSettings(**{name: getattr(self, name) for name in SETTING_NAMES})
