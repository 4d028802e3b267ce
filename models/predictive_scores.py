"""How well next-event predictions did: log loss, hit@1 and hit@3 of predictive distributions.

The one scoring rule of next-event predictions, shared by the next-event experiment
(:mod:`ldhmm.experiments.next_event`) and a model's description
(:mod:`ldhmm.models.description`).
"""

from __future__ import annotations

import numpy as np
from scipy.stats import ttest_rel

__all__ = ["ALPHA", "prediction_scores", "target_losses", "next_event_verdict"]

#: The significance level of every verdict (here, and the experiments' in
#: :mod:`ldhmm.experiments.significance`).
ALPHA = 0.05


def prediction_scores(proba: np.ndarray, targets: np.ndarray) -> dict:
    """Log loss, hit@1 and hit@3 of next-event predictions.

    Parameters
    ----------
    proba : np.ndarray, shape (M, V)
        Predictive distributions.
    targets : np.ndarray, shape (M,)
        The events that happened.
    """
    proba = np.asarray(proba, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.int64)
    if not np.isfinite(proba).all():
        raise ValueError("the predictive distributions hold non-finite values")
    p = proba[np.arange(targets.size), targets]
    # rank of the target: how many symbols are strictly more probable (ties in its favour)
    rank = (proba > p[:, None]).sum(axis=1)
    return {
        "log_loss": float(-np.mean(np.log(np.maximum(p, 1e-300)))),
        "hit1": float(np.mean(rank < 1)),
        "hit3": float(np.mean(rank < 3)),
    }


def target_losses(proba: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Each prediction's loss ``-log p(target)`` (nats; p floored at 1e-300 as in
    :func:`prediction_scores`, whose ``log_loss`` is their mean), shape (M,)."""
    proba = np.asarray(proba, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.int64)
    return -np.log(np.maximum(proba[np.arange(targets.size), targets], 1e-300))


def next_event_verdict(rows: list, losses: list) -> str:
    """Which of two models predicts the users' last events better, in one sentence: the lower
    mean log loss, named only where a paired t-test over the users puts it below the other.

    Parameters
    ----------
    rows : list of 2 dict
        Each model's ``{"model": name, **prediction_scores(...)}``.
    losses : list of 2 np.ndarray, each shape (M,)
        Each model's :func:`target_losses` on the same users.
    """
    a, b = sorted(range(2), key=lambda i: rows[i]["log_loss"])
    win, other = rows[a], rows[b]
    d = np.asarray(losses[a]) - np.asarray(losses[b])
    p = float(ttest_rel(losses[a], losses[b]).pvalue) if d.size >= 2 and np.any(d != 0) else float("nan")
    # no test where there is nothing to test (one user, or the same loss for every user): said
    # in words, never as a p of "nan"
    tested = f"p = {p:.2g}" if np.isfinite(p) else "no test possible"
    numbers = (
        f"log loss {win['log_loss']:.4f} against {other['log_loss']:.4f}, hit@1 {win['hit1']:.3f} against "
        f"{other['hit1']:.3f}; paired t-test over {d.size} user{'s' if d.size != 1 else ''}, {tested}"
    )
    if np.isfinite(p) and p < ALPHA:
        return f"{win['model']} predicts the users' last events better than {other['model']} ({numbers})"
    return (
        f"neither model predicts the users' last events significantly better: {win['model']} has the lower "
        f"log loss but not significantly ({numbers}{f', not below {ALPHA:g}' if np.isfinite(p) else ''})"
    )
