"""Numbers for the result tables: mean and spread over folds, how a cell prints them, the
lines that report failed tasks, the rows of models without a K spread over the K columns, and
the words of a run's settings that its summary names."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

__all__ = ["mean_std", "fmt_pm", "failure_lines", "NO_K", "spread_over_k", "with_k_column", "effort_words"]

#: How the tables mark a model without hidden states: one fit per fold, its value at every K.
NO_K = "(no K)"


def mean_std(values) -> tuple[float, float, int]:
    """Mean, sample standard deviation (ddof=1; 0 for one value) and count of the finite values."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return math.nan, math.nan, 0
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0, int(v.size)


def fmt_pm(mean: float, std: float, digits: int = 2) -> str:
    """A table cell ``mean ± std`` with ``digits`` decimals; ``n/a`` for a missing mean."""
    if not np.isfinite(mean):
        return "n/a"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def failure_lines(errors) -> list[str]:
    """One line per model with failed tasks: how many, and the first task's reason."""
    by_model: dict[str, list[str]] = {}
    for e in errors:
        key, _, reason = str(e).partition(": ")
        by_model.setdefault(key.split("__")[0], []).append(reason)
    return [
        f"{m}: {len(r)} task(s) failed: {r[0]}" + ("" if len(set(r)) == 1 else " (and other reasons)")
        for m, r in by_model.items()
    ]


def effort_words(settings: dict) -> str:
    """How a run's summary names its ``effort`` (``config.json``): ``"effort thorough"``, or
    ``"effort: each model's default"`` where the run left it to the models (None, or a run
    recorded before the setting existed)."""
    effort = settings.get("effort")
    return f"effort {effort}" if effort else "effort: each model's default"


def with_k_column(df):
    """``df`` with ``K`` as integers, or as pandas' nullable ``Int64`` where a model without
    states left it empty (None): a results file then writes its rows with an empty K, and the
    other rows exactly as before."""
    if df["K"].isna().any():
        df = df.assign(K=df["K"].astype("Int64"))
    return df


def spread_over_k(df, states):
    """The rows with an empty ``K`` (models without states, one row per fold) repeated at every
    K of ``states``, so that the per-K tables, t-tests and plots compare every model with them;
    ``df`` itself when it has none. The result's ``K`` is int64."""
    empty = df["K"].isna()
    if not empty.any():
        return df
    spread = [df[~empty]] + [df[empty].assign(K=K) for K in states]
    out = pd.concat(spread, ignore_index=True)
    return out.assign(K=out["K"].astype(np.int64))
