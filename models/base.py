"""The one base class of every model the comparison harness runs.

Every model in the comparison (LDHMM and its variants as well as the baselines of
:mod:`ldhmm.baselines`) is used by the harness through the same small interface (a model that
does not subclass :class:`SequenceModel` needs ``fit``, ``score_samples`` and ``score_kind``:
:func:`ldhmm.experiments.plugins.check_protocol`):

``Model(n_states, seed=0, **options)``
    ``n_states`` (int >= 1) is the number of hidden states or topics, the ``K`` that the
    harness sweeps; ``seed`` makes the fit reproducible (same data, same seed -> identical
    learned parameters). Model-specific options follow as keyword arguments; most models
    accept ``n_symbols`` (vocabulary size V, default: max symbol of the training data + 1).
``fit(sequences) -> self``
    Learn from a database: a list of 1-D integer arrays with symbols in ``0..V-1``.
``score_samples(sequences) -> np.ndarray`` of shape ``(M,)``
    Per-sequence held-out log-likelihood in nats, or a lower bound on it, or an estimate of
    it: the class attribute ``score_kind`` says which.
``score(sequences) -> float``
    The sum of ``score_samples``.
``log_marginal_is(sequences, n_samples, seed) -> np.ndarray`` (optional)
    An importance-sampled estimate of ``log p(x_m)`` per sequence, for models whose
    ``score_samples`` is a bound; the harness reports it beside ``score_samples`` when a model
    has it.

Class attributes:

``name``
    The model's own name (``"HMM"``, ``"LDA"``, ``"LDHMM"``, ...); the harness registers a
    class under this name unless it is given another one (``"LDHMM-PF"``).
``score_kind``
    One of :data:`SCORE_KINDS`: ``"exact"`` (the log-likelihood itself), ``"lower_bound"``
    (a variational bound, <= the log-likelihood) or ``"estimate"`` (e.g. importance
    sampled). The harness labels every column with it so that bounds are never compared with
    exact values unknowingly.
``has_states``
    ``True`` (the default) for a model with hidden states or topics, whose ``n_states`` is
    the ``K`` the harness sweeps; ``False`` for one without (a Markov chain over the
    symbols): it takes ``n_states`` and ignores it, and the harness fits it once per fold
    and shows its one value at every K, marked "no K".
``score_family``
    For a lower bound, the variational family it is a bound of (``"PF"``, ``"FF"``, the SVI
    route's ``"z-summed, Dirichlet mean field"``, ...; a class attribute, or a property where
    the family depends on the configuration). Two bounds are compared only when their
    families are equal (:mod:`ldhmm.experiments.measures`); a bound with no family is compared
    with no other model's.

Learned attributes end in ``_`` and exist only after ``fit``; every model sets
``n_symbols_`` (the vocabulary size it knows) and ``training_data_`` (what it was fitted on:
:func:`ldhmm.data.fingerprint.training_record`). A model fitted by an iterative rule sets
``convergence_``, ``n_iter_`` and ``converged_`` through :meth:`SequenceModel._set_convergence`
from the fit's :class:`ldhmm.inference.monitor.ConvergenceMonitor`. Using an unfitted model raises
:class:`NotFittedError` (a ``ValueError`` and an ``AttributeError``, as scikit-learn's). At
score time a symbol ``>= n_symbols_`` is a ``ValueError``, never a silent ``-inf`` or an
index error.

:class:`SequenceModel` implements the shared glue (argument checks, input validation through
:func:`ldhmm.inference.validate_sequences`, the fitted check, the vocabulary range check and
the configuration read off the constructor's signature), so that a model only writes
``_fit`` and ``_score_samples`` on already validated ``int64`` arrays.

Writing a model: a subclass of :class:`SequenceModel` sets the class attributes ``name`` and
``score_kind``, calls ``super().__init__(n_states, seed)``, stores every other constructor
argument as an attribute of the same name (checking it), and implements:

``_fit(sequences, n_symbols, **fit_params)``
    ``sequences`` is a validated list of ``int64`` arrays with every symbol
    ``< n_symbols``; ``n_symbols_`` is already set. Learn, set attributes ending in
    ``_``; the return value is ignored. ``fit_params`` are the keyword arguments of
    :meth:`SequenceModel.fit` beyond the data (e.g. a starting point).
``_score_samples(sequences) -> np.ndarray``
    Validated sequences, all symbols ``< n_symbols_``; return shape ``(M,)`` float64.

A subclass that takes an ``n_symbols`` option stores it as ``self.n_symbols``; then the
training data must lie in ``0..n_symbols-1`` and ``n_symbols_ = n_symbols`` (symbols
that never occur in training are still part of the model). Otherwise
``n_symbols_ = max training symbol + 1``.

:meth:`SequenceModel.get_params` and :meth:`SequenceModel.get_config` are read off the
constructor's signature (as scikit-learn's ``get_params`` is), so a subclass never writes them
by hand; it names the constructor arguments that are not configuration in ``_not_config``.
"""

from __future__ import annotations

import abc
import inspect
import numbers
from typing import ClassVar

import numpy as np

from ..data.fingerprint import training_record
from ..data.seeds import MAX_SEED, derived_seeds
from ..inference import infer_n_symbols, validate_sequences
from ..inference.ops.importance import ImportanceEstimate, pool_estimates

__all__ = [
    "SCORE_KINDS",
    "data_source",
    "keep_vocabulary",
    "NotFittedError",
    "SequenceModel",
    "check_n_states",
    "check_seed",
    "check_n_symbols",
    "importance_estimate",
]

#: What ``score_samples`` may return: the log-likelihood, a lower bound on it, an estimate.
SCORE_KINDS = ("exact", "lower_bound", "estimate")


def data_source(data) -> str | None:
    """The file a database was read from (a :class:`ldhmm.data.SequenceDatabase`'s
    ``meta["source"]``), or None (sequences given in Python)."""
    meta = getattr(data, "meta", None)
    source = meta.get("source") if isinstance(meta, dict) else None
    return None if source is None else str(source)


def keep_vocabulary(model, vocabulary) -> None:
    """Set ``model.vocabulary_`` to ``vocabulary``, the names of the training symbols (a
    :class:`ldhmm.data.SequenceDatabase`'s, a partitioned directory's manifest's), where it is a
    list of ``model.n_symbols_`` names; anything else names no symbol of the model and is left out."""
    if isinstance(vocabulary, list) and len(vocabulary) == model.n_symbols_:
        model.vocabulary_ = list(vocabulary)


class NotFittedError(ValueError, AttributeError):
    """A model used before ``fit``: the bases of scikit-learn's ``NotFittedError``, defined here
    so that loading a model does not import scikit-learn (over half a second of start-up)."""


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_n_states(n_states) -> int:
    """``n_states`` as an ``int``, or a ``ValueError`` naming it."""
    if not _is_int(n_states) or int(n_states) < 1:
        raise ValueError(f"n_states must be an integer >= 1, got {n_states!r}")
    return int(n_states)


def check_seed(seed) -> int:
    """``seed`` as an ``int`` in ``0..MAX_SEED`` (:data:`ldhmm.data.seeds.MAX_SEED`), or a
    ``ValueError`` naming it."""
    if not _is_int(seed) or int(seed) < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if int(seed) > MAX_SEED:
        raise ValueError(f"seed must be <= {MAX_SEED} (2**32 - 1), got {seed!r}")
    return int(seed)


def check_n_symbols(n_symbols) -> int | None:
    """``n_symbols`` as ``None`` or an ``int >= 1``, or a ``ValueError`` naming it."""
    if n_symbols is None:
        return None
    if not _is_int(n_symbols) or int(n_symbols) < 1:
        raise ValueError(f"n_symbols must be None or an integer >= 1, got {n_symbols!r}")
    return int(n_symbols)


def _init_parameters(cls) -> tuple[list[str], bool]:
    """Named parameters of ``cls.__init__`` (no ``self``, ``*args``) and whether it takes ``**kwargs``."""
    params, var_keyword = [], False
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            var_keyword = True
        elif p.kind is not p.VAR_POSITIONAL and p.name != "self":
            params.append(p.name)
    return params, var_keyword


class SequenceModel(abc.ABC):
    """Base of every harness model: the protocol implemented around two hooks, ``_fit`` and
    ``_score_samples`` (what a subclass writes: "Writing a model" in the module docstring)."""

    name: ClassVar[str] = ""
    score_kind: ClassVar[str] = ""
    #: Whether ``n_states`` means something (hidden states or topics): see the module docstring.
    has_states: ClassVar[bool] = True
    #: The bound's variational family (see the module docstring); empty for an exact score.
    score_family: ClassVar[str] = ""
    #: Constructor arguments left out of :meth:`get_config`: run-time switches such as
    #: ``verbose``, or settings a model file records elsewhere.
    _not_config: ClassVar[tuple[str, ...]] = ("verbose",)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _check_class_attributes(cls)

    def __init__(self, n_states: int, seed: int = 0):
        self.n_states = check_n_states(n_states)
        self.seed = check_seed(seed)

    # ----------------------------------------------------------------- protocol
    def fit(self, sequences, **fit_params):
        """Learn from a database (list of 1-D integer arrays, or a
        :class:`ldhmm.data.SequenceDatabase`, whose symbol names are then kept as
        ``vocabulary_`` and saved with the model, and the file it was read from is recorded in
        ``training_data_``); returns ``self``."""
        seqs = self._validate_for_fit(sequences)
        self._fit(seqs, self.n_symbols_, **fit_params)
        keep_vocabulary(self, getattr(sequences, "vocabulary", None))  # a SequenceDatabase's names
        self.training_data_ = training_record(seqs, data_source(sequences))
        return self

    def score_samples(self, sequences) -> np.ndarray:
        """Per-sequence held-out score in nats, shape ``(M,)``; see ``score_kind``."""
        seqs = self._validate_for_score(sequences)
        out = np.asarray(self._score_samples(seqs), dtype=np.float64)
        if out.shape != (len(seqs),):  # pragma: no cover - a bug in the subclass
            raise RuntimeError(
                f"{type(self).__name__}._score_samples returned shape {out.shape}, expected ({len(seqs)},)"
            )
        return out

    def score(self, sequences) -> float:
        """Total held-out score of a database in nats: ``score_samples(sequences).sum()``."""
        return float(np.sum(self.score_samples(sequences)))

    # ---------------------------------------------------------------- hooks
    @abc.abstractmethod
    def _fit(self, sequences: list[np.ndarray], n_symbols: int, **fit_params) -> None:
        """Learn from validated sequences (see the class docstring)."""

    @abc.abstractmethod
    def _score_samples(self, sequences: list[np.ndarray]) -> np.ndarray:
        """Per-sequence scores of validated, in-range sequences."""

    # ----------------------------------------------------------------- glue
    def _validate_for_fit(self, sequences) -> list[np.ndarray]:
        """Validate training data and set ``n_symbols_``."""
        n_symbols = check_n_symbols(getattr(self, "n_symbols", None))
        seqs = validate_sequences(sequences, n_symbols=n_symbols)
        self.n_symbols_ = n_symbols if n_symbols is not None else infer_n_symbols(seqs)
        return seqs

    def _set_convergence(self, report) -> None:
        """Record how an iterative fit stopped, the same way for every model: ``convergence_``
        (the :class:`ldhmm.inference.monitor.ConvergenceReport`; ``str`` of it is the one-line
        stopping report), ``n_iter_`` (iterations or epochs run) and ``converged_`` (the rule's
        test was met, not ``max_iter``)."""
        self.convergence_ = report
        self.n_iter_ = report.n_iter
        self.converged_ = report.converged

    def __sklearn_is_fitted__(self) -> bool:
        """Whether :meth:`fit` has completed (scikit-learn's ``check_is_fitted`` asks this)."""
        return hasattr(self, "n_symbols_")

    def _check_fitted(self) -> None:
        if not self.__sklearn_is_fitted__():
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit(sequences) first")

    def _validate_for_score(self, sequences) -> list[np.ndarray]:
        """Check that the model is fitted and validate sequences against ``n_symbols_``."""
        self._check_fitted()
        return validate_sequences(sequences, n_symbols=self.n_symbols_)

    # ------------------------------------------------------- configuration
    def get_params(self) -> dict:
        """Constructor arguments of this model as stored on it (scikit-learn's ``get_params``)."""
        return {p: getattr(self, p) for p in _constructor_parameters(type(self))}

    def get_config(self) -> dict:
        """The configuration a model file records: :meth:`get_params` less ``_not_config``.

        ``type(self)(**config)`` (with what ``_not_config`` removed passed separately) gives
        an unfitted model with the same settings.
        """
        return {k: v for k, v in self.get_params().items() if k not in self._not_config}

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({opts})"


def _check_class_attributes(cls) -> None:
    """Refuse a subclass that declares ``name`` or ``score_kind`` itself with a bad value (checked
    when the class is created, so that a bad plug-in fails at import, not in the harness)."""
    if "score_kind" in cls.__dict__ or "name" in cls.__dict__:
        if cls.score_kind not in SCORE_KINDS:
            raise TypeError(f"{cls.__name__}.score_kind must be one of {SCORE_KINDS}, got {cls.score_kind!r}")
        if not isinstance(cls.name, str) or not cls.name:
            raise TypeError(f"{cls.__name__}.name must be a non-empty string")


def _constructor_parameters(cls) -> list[str]:
    """The constructor's parameters, with those its ``**kwargs`` forwards to the bases.

    Each name is listed where the most basic class that declares it puts it, then a
    subclass's own additions: saved configurations keep one key order through the class
    hierarchy (an LDHMM file lists VariantHMM's settings in VariantHMM's order).
    """
    accepted: set[str] = set()
    for klass in cls.__mro__:  # cls, then the bases its **kwargs reach
        if "__init__" not in vars(klass) or klass is object:
            continue
        params, var_keyword = _init_parameters(klass)
        accepted.update(params)
        if not var_keyword:
            break
    order: list[str] = []
    for klass in reversed(cls.__mro__):
        if "__init__" in vars(klass) and klass not in (object, SequenceModel):
            order += [p for p in _init_parameters(klass)[0] if p not in order]
    # n_states and seed (SequenceModel's own) go last: every subclass so far names them
    # itself, where it wants them; only one passing them on through **kwargs gets here
    order += [p for p in _init_parameters(SequenceModel)[0] if p not in order]
    return [p for p in order if p in accepted]


def importance_estimate(
    model,
    sequences,
    n_samples: int,
    seed: int,
    min_ess: float = 0.0,
    max_samples: int | None = None,
    **where,
) -> ImportanceEstimate:
    """``model.log_marginal_is`` with each estimate's standard error and effective sample size
    where the model gives them (``diagnostics=True``: the built-in models), else NaN for those
    (a plug-in's ``log_marginal_is(sequences, n_samples, seed)``); the estimates are the same
    numbers either way.

    More draws where the effective sample size is low (``min_ess > 0``; off by default, so the
    estimates are those of ``n_samples`` draws): while a sequence has fewer than ``min_ess``
    effective draws and fewer than ``max_samples`` draws (default ``8 * n_samples``), round
    ``r = 1, 2, ...`` draws as many again as it has (capped at ``max_samples``) for those
    sequences, seeded by ``derived_seeds(seed, r + 1)[r]``, and pools them with the draws before
    (:func:`ldhmm.inference.ops.importance.pool_estimates`): the same inputs give the same
    estimates. ``n_samples`` of the result says how many draws each estimate has.

    ``where``: ``backend``, ``client``, ``n_partitions`` of a model whose ``log_marginal_is``
    takes them (the draws are seeded per partition: the estimates depend on ``n_partitions``).
    """
    first = _log_marginal_with_diagnostics(model, sequences, n_samples, seed, **where)
    if not min_ess > 0:
        return first
    cap = int(max_samples) if max_samples is not None else 8 * int(n_samples)
    found = first
    for r in range(1, 64):
        low = np.flatnonzero((found.ess < min_ess) & (found.n_samples < cap))
        if low.size == 0:
            break
        draws = int(min(found.n_samples[low].min(), cap - found.n_samples[low].max()))
        if draws < 1:
            break
        more = _log_marginal_with_diagnostics(
            model, [sequences[i] for i in low], draws, derived_seeds(seed, r + 1)[r], **where
        )
        pooled = pool_estimates(ImportanceEstimate(*(np.asarray(v)[low] for v in found)), more)
        found = ImportanceEstimate(*(_replace(np.asarray(v), low, p) for v, p in zip(found, pooled)))
    return found


def _replace(values: np.ndarray, index: np.ndarray, part) -> np.ndarray:
    out = values.astype(np.result_type(values, np.asarray(part)), copy=True)
    out[index] = part
    return out


def _log_marginal_with_diagnostics(
    model, sequences, n_samples: int, seed: int, **where
) -> ImportanceEstimate:
    """One call of ``model.log_marginal_is`` as an ``ImportanceEstimate`` (NaN diagnostics for a
    model that gives none)."""
    method = model.log_marginal_is
    try:
        takes = "diagnostics" in inspect.signature(method).parameters
    except (TypeError, ValueError):  # a builtin or C callable
        takes = False
    if takes:
        found = method(sequences, n_samples=n_samples, seed=seed, diagnostics=True, **where)
        if isinstance(found, ImportanceEstimate):
            return found
    else:
        found = method(sequences, n_samples=n_samples, seed=seed)
    values = np.asarray(found, dtype=np.float64).reshape(-1)
    missing = np.full(values.shape, np.nan)
    return ImportanceEstimate(values, missing, missing.copy(), np.full(values.shape, int(n_samples)))
