"""Numbers for the result tables: mean and spread over folds, how a cell prints them, and the
lines that report failed tasks."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["mean_std", "fmt_pm", "failure_lines"]


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
