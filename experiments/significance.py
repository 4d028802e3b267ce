"""Whether the model with the best mean score beats the runner-up: the verdict of an experiment.

A cross-validated experiment names a winner only where the data support it. The winner is
the (model, K) with the best mean over folds of a measure; the runner-up is the best *other*
model at the same K (a model without K, such as a Markov chain, is at every K). The two are
compared by a paired two-tailed t-test over the folds both have (``scipy.stats.ttest_rel``):
below :data:`ALPHA` the winner is named, otherwise the sentence says that no model is named.
``compare``'s "Best" lines (with the measure of :func:`ldhmm.experiments.measures.comparison_measure`)
and ``next-event``'s verdict (log loss) use it, in ``summary.md`` and in the terminal alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import ttest_rel

from ..models.predictive_scores import ALPHA

__all__ = ["ALPHA", "RunnerUpTest", "runner_up_test"]


@dataclass(frozen=True)
class RunnerUpTest:
    """The winner against the runner-up at its K.

    Attributes
    ----------
    winner, runner_up : str
        Model names.
    K : int
        The winner's K.
    winner_mean, runner_up_mean : float
        Means over the folds both have.
    n_folds : int
    p_value : float
        NaN with fewer than two folds or no difference.
    lower_is_better : bool
    """

    winner: str
    runner_up: str
    K: int
    winner_mean: float
    runner_up_mean: float
    n_folds: int
    p_value: float
    lower_is_better: bool = False

    @property
    def significant(self) -> bool:
        """Whether the paired t-test gives ``p < ALPHA``."""
        return bool(np.isfinite(self.p_value) and self.p_value < ALPHA)

    def clause(self, digits: int = 2, label=None) -> str:
        """``"above the runner-up at K=6, HMM (-1234.56): paired t-test over 10 folds, p = 0.003"``,
        or ``"not significantly above ..., p = 0.4 (not below 0.05)"``; ``label(model)``: how a
        model is named (default its name)."""
        where = "below" if self.lower_is_better else "above"
        name = label(self.runner_up) if label else self.runner_up
        p = "p undefined" if not np.isfinite(self.p_value) else f"p = {self.p_value:.2g}"
        test = f"paired t-test over {self.n_folds} fold{'s' if self.n_folds != 1 else ''}, {p}"
        head = f"the runner-up at K={self.K}, {name} ({self.runner_up_mean:.{digits}f})"
        if self.significant:
            return f"{where} {head}: {test}"
        return f"not significantly {where} {head}: {test} (not below {ALPHA:g})"


def runner_up_test(df: pd.DataFrame, column: str, winner: str, K: int, models, lower_is_better=False):
    """The :class:`RunnerUpTest` of ``winner`` at ``K`` by ``column``, or None without a runner-up.

    Parameters
    ----------
    df : DataFrame
        One row per (model, K, fold): columns ``model``, ``K``, ``fold`` and ``column`` (a model
        without K spread over every K, :func:`ldhmm.experiments.tables.spread_over_k`).
    column : str
        The measure; its mean over folds ranks the models.
    winner : str
    K : int
    models : iterable of str
        The candidates for the runner-up.
    lower_is_better : bool
        A loss (log loss) rather than a score.
    """
    dk = df[(df["K"] == K) & df["model"].isin(list(models))]
    means = dk.groupby("model")[column].mean()
    means = means[np.isfinite(means.to_numpy(float)) & (means.index != winner)]
    if not len(means):
        return None
    runner = str(means.idxmin() if lower_is_better else means.idxmax())
    a = dk[dk["model"] == winner].set_index("fold")[column]
    b = dk[dk["model"] == runner].set_index("fold")[column]
    common = sorted(set(a.index) & set(b.index))
    xa, xb = a.loc[common].to_numpy(float), b.loc[common].to_numpy(float)
    ok = np.isfinite(xa) & np.isfinite(xb)
    xa, xb = xa[ok], xb[ok]
    p = float(ttest_rel(xa, xb).pvalue) if xa.size >= 2 and np.any(xa != xb) else math.nan
    return RunnerUpTest(
        winner,
        runner,
        int(K),
        float(xa.mean()) if xa.size else math.nan,
        float(xb.mean()) if xb.size else math.nan,
        int(xa.size),
        p,
        lower_is_better,
    )
