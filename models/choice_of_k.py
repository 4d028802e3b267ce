"""Which K the held-out score prefers: the one-standard-error rule (docs/math.md, "Choosing K").

Along K (``ldhmm fit --states 2..8 --holdout 0.2``, :meth:`VariantHMM.fit_path` with held-out
sequences, ``ldhmm compare``), the held-out score of every K is known on the same units: the
held-out sequences of one split, or the test folds of a cross-validation. The suggested K is the
**smallest K whose held-out score is within one standard error of the best K's**: a larger K
must earn its extra parameters by more than the noise of the held-out data. The standard error
is that of the difference from the best K, paired over the units (each unit is scored by both K):

- held-out sequences: the score is nats per token, ``sum_n s_n(K) / T`` over the held-out
  sequences (``T`` their tokens); the standard error of the difference is
  ``sqrt(N) * std_n(s_n(K) - s_n(best)) / T`` (N sequences, ``std`` with ``ddof=1``);
- folds: the score is the mean over folds, and the same formula with ``T = N`` (folds) gives
  ``std_f(d_f) / sqrt(F)``.

With one unit there is no standard error: the suggestion is the best K. When the best K is
the first or the last of the range (and the range has more than one K), the range may not hold
the best K: :attr:`KSuggestion.warning` says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RULE", "KSuggestion", "suggest_k", "held_out_scores"]

#: The rule, as the line "suggested K: N (RULE)" names it.
RULE = "the smallest K within one standard error of the best held-out score"


@dataclass(frozen=True)
class KSuggestion:
    """The K the held-out score prefers.

    Attributes
    ----------
    K : int
        The suggested K (:data:`RULE`).
    best : int
        The K of the best held-out score.
    states : tuple of int
        Every K, increasing.
    scores : np.ndarray, shape (n_K,)
        The held-out score of each K (higher is better).
    std_errors : np.ndarray, shape (n_K,)
        The standard error of each K's difference from the best K (0 at the best; NaN with one
        unit).
    warning : str or None
        Where the best K is at an end of a range of several K: the range may not hold it.
    """

    K: int
    best: int
    states: tuple
    scores: np.ndarray
    std_errors: np.ndarray
    warning: str | None

    def line(self) -> str:
        """``"suggested K: 4 (the smallest K within one standard error of the best held-out
        score, K = 6: -1.2345 per token, 4 is 0.0012 below, one standard error 0.0020)"``."""
        i, j = self.states.index(self.K), self.states.index(self.best)
        if self.K == self.best:
            if np.isnan(self.std_errors[i]):
                return (
                    f"suggested K: {self.K} (the best held-out score; one held-out unit: no standard error)"
                )
            return f"suggested K: {self.K} ({RULE}: no smaller K is within one standard error of it)"
        return (
            f"suggested K: {self.K} ({RULE}, K = {self.best}: {self.scores[j]:.4f}; K = {self.K} is "
            f"{self.scores[j] - self.scores[i]:.4f} below it, one standard error {self.std_errors[i]:.4f})"
        )

    def lines(self) -> list[str]:
        """:meth:`line`, then the warning where there is one."""
        return [self.line()] + ([f"warning: {self.warning}"] if self.warning else [])


def suggest_k(states, scores, weights=None) -> KSuggestion:
    """The suggested K from each K's held-out scores on the same units.

    Parameters
    ----------
    states : sequence of int, length n_K
        The K values (any order; each once).
    scores : array-like, shape (n_K, N)
        The held-out score of each K on each of N units (a held-out sequence's nats, or a
        fold's score), the same units for every K; NaN where a unit is missing for a K (it is
        left out of that K's comparison). A K without any finite score is not suggested.
    weights : array-like, shape (N,), optional
        What a unit weighs in the score: a held-out sequence's tokens (the score is then nats
        per token); default 1 (the score is the mean over units).

    Returns
    -------
    KSuggestion
    """
    order = np.argsort(np.asarray(states))
    states = tuple(int(k) for k in np.asarray(states)[order])
    x = np.asarray(scores, dtype=np.float64)[order]
    if x.ndim != 2 or x.shape[0] != len(states) or not len(states):
        raise ValueError(f"scores must have shape (n_K, N) with n_K = {len(states)} > 0, got {x.shape}")
    w = np.ones(x.shape[1]) if weights is None else np.asarray(weights, dtype=np.float64)
    finite = np.isfinite(x)
    totals = np.array([w[ok].sum() for ok in finite])
    value = np.where(totals > 0, np.where(finite, x, 0.0).sum(1) / np.where(totals > 0, totals, 1), np.nan)
    if not np.isfinite(value).any():
        raise ValueError("suggest_k: no K has a finite held-out score")
    b = int(np.nanargmax(value))
    se = np.full(len(states), np.nan)
    for i in range(len(states)):
        both = finite[i] & finite[b]
        n = int(both.sum())
        if n >= 2:
            d = x[i, both] - x[b, both]
            se[i] = np.sqrt(n) * d.std(ddof=1) / w[both].sum()
    se[b] = 0.0 if x.shape[1] >= 2 else np.nan
    within = [
        i for i in range(len(states)) if i == b or (np.isfinite(se[i]) and value[i] >= value[b] - se[i])
    ]
    k = states[min(within)]
    warning = None
    if len(states) > 1 and b == len(states) - 1:
        warning = (
            f"the best held-out score is at K = {states[b]}, the largest K tried: "
            "a larger K may score higher (try a range beyond it)"
        )
    elif len(states) > 1 and b == 0 and states[0] > 1:
        warning = (
            f"the best held-out score is at K = {states[b]}, the smallest K tried: "
            "a smaller K may score higher (try a range below it)"
        )
    return KSuggestion(k, states[b], states, value, se, warning)


def held_out_scores(models: dict, sequences) -> tuple[list, np.ndarray, np.ndarray]:
    """Each model's per-sequence held-out score, for :func:`suggest_k`.

    Parameters
    ----------
    models : dict of int to fitted model
        ``{K: model}``, e.g. :meth:`VariantHMM.fit_path`'s result.
    sequences : list of 1-D int arrays
        The held-out sequences (N of them), in the models' codes.

    Returns
    -------
    (states, scores, weights): the K values, ``score_samples`` of each model, shape (n_K, N),
    and each sequence's length, shape (N,): ``suggest_k(*held_out_scores(models, held))``.
    """
    states = sorted(models)
    scores = np.stack([np.asarray(models[k].score_samples(sequences), dtype=np.float64) for k in states])
    return states, scores, np.array([len(s) for s in sequences], dtype=np.float64)
