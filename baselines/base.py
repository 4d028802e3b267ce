"""The protocol every model of the comparison harness follows.

Every model in the comparison (LDHMM and its variants as well as the baselines of
:mod:`baselines`) is used by the harness through the same small interface:

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

Class attributes:

``name``
    The model's name in the harness (``"HMM"``, ``"LDA"``, ``"LDHMM-PF"``, ...); it is the
    value of the ``model`` column of the result files.
``score_kind``
    One of :data:`SCORE_KINDS`: ``"exact"`` (the log-likelihood itself), ``"lower_bound"``
    (a variational bound, <= the log-likelihood) or ``"estimate"`` (e.g. importance
    sampled). The harness labels every column with it so that bounds are never compared with
    exact values unknowingly.

Learned attributes end in ``_`` and exist only after ``fit``; every model sets
``n_symbols_`` (the vocabulary size it knows). At score time a symbol ``>= n_symbols_`` is
a ``ValueError``, never a silent ``-inf`` or an index error.

:class:`SequenceModel` is the mixin that implements the shared glue (argument checks,
input validation through :func:`inference.batch.validate_sequences`, the fitted check and
the vocabulary range check), so that a model only writes ``_fit`` and ``_score_samples``
on already validated ``int64`` arrays. :class:`SequenceModelProtocol` is the structural
type the harness can check against (``isinstance`` works on it) for models that do not
inherit the mixin.
"""

from __future__ import annotations

import abc
import numbers
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np
from sklearn.exceptions import NotFittedError

from inference.batch import infer_n_symbols, validate_sequences

__all__ = [
    "SCORE_KINDS",
    "NotFittedError",
    "SequenceModel",
    "SequenceModelProtocol",
    "check_n_states",
    "check_seed",
    "check_n_symbols",
]

#: What ``score_samples`` may return: the log-likelihood, a lower bound on it, an estimate.
SCORE_KINDS = ("exact", "lower_bound", "estimate")


@runtime_checkable
class SequenceModelProtocol(Protocol):
    """Structural type of a model in the comparison harness (see the module docstring)."""

    name: ClassVar[str]
    score_kind: ClassVar[str]
    n_states: int
    seed: int

    def fit(self, sequences) -> "SequenceModelProtocol": ...

    def score_samples(self, sequences) -> np.ndarray: ...

    def score(self, sequences) -> float: ...


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_n_states(n_states) -> int:
    """``n_states`` as an ``int``, or a ``ValueError`` naming it."""
    if not _is_int(n_states) or int(n_states) < 1:
        raise ValueError(f"n_states must be an integer >= 1, got {n_states!r}")
    return int(n_states)


def check_seed(seed) -> int:
    """``seed`` as a non-negative ``int``, or a ``ValueError`` naming it."""
    if not _is_int(seed) or int(seed) < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def check_n_symbols(n_symbols) -> int | None:
    """``n_symbols`` as ``None`` or an ``int >= 1``, or a ``ValueError`` naming it."""
    if n_symbols is None:
        return None
    if not _is_int(n_symbols) or int(n_symbols) < 1:
        raise ValueError(f"n_symbols must be None or an integer >= 1, got {n_symbols!r}")
    return int(n_symbols)


class SequenceModel(abc.ABC):
    """Mixin implementing the harness protocol around two hooks.

    Subclasses set the class attributes ``name`` and ``score_kind``, call
    ``super().__init__(n_states, seed)`` (and store their own options, checking them), and
    implement:

    ``_fit(sequences, n_symbols)``
        ``sequences`` is a validated list of ``int64`` arrays with every symbol
        ``< n_symbols``; ``n_symbols_`` is already set. Learn, set attributes ending in
        ``_``; the return value is ignored.
    ``_score_samples(sequences) -> np.ndarray``
        Validated sequences, all symbols ``< n_symbols_``; return shape ``(M,)`` float64.

    A subclass that takes an ``n_symbols`` option stores it as ``self.n_symbols``; then the
    training data must lie in ``0..n_symbols-1`` and ``n_symbols_ = n_symbols`` (symbols
    that never occur in training are still part of the model). Otherwise
    ``n_symbols_ = max training symbol + 1``.
    """

    name: ClassVar[str] = ""
    score_kind: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # checked for every class that declares either attribute itself
        if "score_kind" in cls.__dict__ or "name" in cls.__dict__:
            if cls.score_kind not in SCORE_KINDS:
                raise TypeError(
                    f"{cls.__name__}.score_kind must be one of {SCORE_KINDS}, got {cls.score_kind!r}"
                )
            if not isinstance(cls.name, str) or not cls.name:
                raise TypeError(f"{cls.__name__}.name must be a non-empty string")

    def __init__(self, n_states: int, seed: int = 0):
        self.n_states = check_n_states(n_states)
        self.seed = check_seed(seed)

    # ----------------------------------------------------------------- protocol
    def fit(self, sequences):
        """Learn from a database (list of 1-D integer arrays); returns ``self``."""
        seqs = self._validate_for_fit(sequences)
        self._fit(seqs, self.n_symbols_)
        return self

    def score_samples(self, sequences) -> np.ndarray:
        """Per-sequence held-out score in nats, shape ``(M,)``; see ``score_kind``."""
        seqs = self._validate_for_score(sequences)
        out = np.asarray(self._score_samples(seqs), dtype=np.float64)
        if out.shape != (len(seqs),):  # pragma: no cover - a bug in the subclass
            raise RuntimeError(
                f"{type(self).__name__}._score_samples returned shape {out.shape}, "
                f"expected ({len(seqs)},)"
            )
        return out

    def score(self, sequences) -> float:
        """Total held-out score of a database in nats: ``score_samples(sequences).sum()``."""
        return float(np.sum(self.score_samples(sequences)))

    # ---------------------------------------------------------------- hooks
    @abc.abstractmethod
    def _fit(self, sequences: list[np.ndarray], n_symbols: int) -> None:
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

    def _check_fitted(self) -> None:
        if not hasattr(self, "n_symbols_"):
            raise NotFittedError(
                f"this {type(self).__name__} is not fitted yet; call fit(sequences) first"
            )

    def _validate_for_score(self, sequences) -> list[np.ndarray]:
        """Check that the model is fitted and validate sequences against ``n_symbols_``."""
        self._check_fitted()
        return validate_sequences(sequences, n_symbols=self.n_symbols_)

    def __repr__(self) -> str:
        opts = ", ".join(
            f"{k}={v!r}" for k, v in vars(self).items() if not k.endswith("_") and not k.startswith("_")
        )
        return f"{type(self).__name__}({opts})"
