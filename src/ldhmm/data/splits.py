"""Deterministic K-fold splits shared by the experiment harness and the tests."""

from __future__ import annotations

import numpy as np

__all__ = ["kfold_indices"]


def kfold_indices(n_or_labels, n_folds: int = 10, seed: int = 0, stratify: bool = True):
    """K-fold train/test index splits, deterministic given ``seed``.

    Parameters
    ----------
    n_or_labels : int, array-like of shape (M,), or SequenceDatabase
        The number of sequences M; or one label per sequence (then folds are stratified by
        label when ``stratify``); or a database (its labels are used when it has them,
        otherwise its length).
    n_folds : int
        Number of folds K, ``2 <= K <= M``.
    seed : int
        Seed of the shuffle (``random_state`` of scikit-learn's ``KFold`` /
        ``StratifiedKFold`` with ``shuffle=True``).
    stratify : bool
        Stratify by label when labels are given.

    Returns
    -------
    list of (train_idx, test_idx)
        K pairs of sorted int64 arrays; the test sets partition ``0..M-1``.

    Raises
    ------
    ValueError
        If ``n_folds < 2`` or ``n_folds > M``, or if stratifying and some class has fewer
        than ``n_folds`` members.
    """
    labels = None
    if hasattr(n_or_labels, "lengths") and hasattr(n_or_labels, "labels"):
        labels = n_or_labels.labels
        n = len(n_or_labels)
    elif isinstance(n_or_labels, (int, np.integer)) and not isinstance(n_or_labels, bool):
        n = int(n_or_labels)
        if n < 0:
            raise ValueError(f"the number of sequences must be non-negative, got {n}")
    else:
        labels = np.asarray(n_or_labels)
        if labels.ndim != 1:
            raise ValueError(f"labels must be 1-D (one per sequence), got shape {labels.shape}")
        n = labels.size
    if isinstance(n_folds, bool) or not isinstance(n_folds, (int, np.integer)):
        raise ValueError(f"n_folds must be an integer, got {n_folds!r}")
    n_folds = int(n_folds)
    if n_folds < 2:
        raise ValueError(f"n_folds must be at least 2, got {n_folds}")
    if n_folds > n:
        raise ValueError(f"n_folds = {n_folds} is more than the number of sequences ({n})")
    from sklearn.model_selection import KFold, StratifiedKFold  # imported here: sklearn is slow to import

    dummy = np.zeros((n, 1))
    if labels is not None and stratify:
        _, counts = np.unique(labels, return_counts=True)
        if counts.min() < n_folds:
            raise ValueError(
                f"cannot stratify {n_folds} folds: the smallest class has only {counts.min()} "
                "sequences; use fewer folds or stratify=False"
            )
        splitter = StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=seed)
        folds = splitter.split(dummy, labels)
    else:
        splitter = KFold(n_splits=n_folds, shuffle=True, random_state=seed)
        folds = splitter.split(dummy)
    return [(np.sort(tr).astype(np.int64), np.sort(te).astype(np.int64)) for tr, te in folds]
