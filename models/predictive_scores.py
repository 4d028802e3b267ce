"""How well next-event predictions did: log loss, hit@1 and hit@3 of predictive distributions.

The one scoring rule of next-event predictions, shared by the next-event experiment
(:mod:`ldhmm.experiments.next_event`) and a model's description
(:mod:`ldhmm.models.description`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["prediction_scores"]


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
