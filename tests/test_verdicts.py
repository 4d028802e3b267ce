"""Verdicts (issue 48, item 3): a model is named best only where a paired t-test over the folds
puts it above the runner-up at its K; compare's "Best" lines say so, with the K its folds
suggest."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import ttest_rel

from ldhmm.experiments.compare import best_lines, markov_line
from ldhmm.experiments.measures import with_log_px
from ldhmm.experiments.significance import ALPHA, runner_up_test
from ldhmm.models.predictive_scores import next_event_verdict


def _rows(model, K, values, kind="exact"):
    return [
        {
            "model": model,
            "K": K,
            "fold": f,
            "score_kind": kind,
            "score_family": "",
            "heldout_elbo": v,
            "heldout_elbo_per_seq": np.nan,
            "heldout_elbo_per_token": np.nan,
            "heldout_is": np.nan,
            "heldout_is_per_seq": np.nan,
            "heldout_is_per_token": np.nan,
        }
        for f, v in enumerate(values)
    ]


def _frame(gap: float, noise: float, seed: int = 0, folds: int = 6) -> pd.DataFrame:
    """HMM-like "a" above "b" by ``gap`` nats at K = 3 with fold noise ``noise``; K = 2 lower."""
    rng = np.random.default_rng(seed)
    base = rng.normal(-100.0, 3.0, folds)
    rows = []
    for K, shift in ((2, -5.0), (3, 0.0)):
        rows += _rows("a", K, base + shift + gap + rng.normal(0, noise, folds))
        rows += _rows("b", K, base + shift + rng.normal(0, noise, folds))
    return pd.DataFrame(rows)


def test_the_runner_up_test_is_scipys_paired_t_test():
    df = _frame(gap=0.5, noise=1.0)
    test = runner_up_test(df, "heldout_elbo", "a", 3, ["a", "b"])
    a = df[(df.model == "a") & (df.K == 3)]["heldout_elbo"].to_numpy()
    b = df[(df.model == "b") & (df.K == 3)]["heldout_elbo"].to_numpy()
    assert test.runner_up == "b" and test.n_folds == 6
    assert test.p_value == pytest.approx(ttest_rel(a, b).pvalue, rel=1e-12)
    assert test.significant == (test.p_value < ALPHA)
    assert runner_up_test(df, "heldout_elbo", "a", 3, ["a"]) is None  # no other model


def test_a_winner_within_the_noise_is_not_named_best():
    line = best_lines(_frame(gap=0.2, noise=2.0), ["a", "b"])[0]
    assert "not decided: a with K=3 is highest" in line
    assert (
        "not significantly above the runner-up at K=3, b with K=3" in line
        and "no model is named best" in line
    )


def test_a_clear_winner_is_named_with_its_test_and_the_k_its_folds_suggest():
    line = best_lines(_frame(gap=3.0, noise=0.1), ["a", "b"])[0]
    assert line.startswith("Best by the held-out score, exact log-lik")
    assert ": a with K=3 (" in line and "above the runner-up at K=3, b with K=3" in line
    assert "paired t-test over 6 folds, p = " in line and "not decided" not in line
    # K = 3 beats K = 2 by 5 nats: suggested, at the end of the range tried
    assert "Along K, a's folds give suggested K: 3" in line and "the largest K tried" in line


def test_the_next_event_verdict_names_a_winner_only_with_its_test():
    rows = [
        {"model": "LDHMM", "log_loss": 1.1645, "hit1": 0.463},
        {"model": "MARKOV1", "log_loss": 1.0502, "hit1": 0.564},
    ]
    rng = np.random.default_rng(0)
    markov = rng.exponential(1.0, 200)
    ldhmm = markov + 0.11 + rng.normal(0, 0.05, 200)
    clear = next_event_verdict(rows, [ldhmm, markov])
    p = ttest_rel(markov, ldhmm).pvalue
    assert p < ALPHA and clear == (
        "MARKOV1 predicts the users' last events better than LDHMM (log loss 1.0502 against 1.1645, "
        f"hit@1 0.564 against 0.463; paired t-test over 200 users, p = {p:.2g})"
    )
    noisy = next_event_verdict(rows, [markov + rng.normal(0, 3.0, 200), markov])
    assert noisy.startswith("neither model predicts the users' last events significantly better: MARKOV1")


def test_the_markov_line_says_its_paired_test():
    rows = _rows("MARKOV1", 2, [-100.0, -90.0, -95.0, -99.0]) + _rows(
        "LDHMM-PF", 2, [-101.0, -91.0, -96.5, -99.5]
    )
    line = markov_line(with_log_px(pd.DataFrame(rows)), ["MARKOV1", "LDHMM-PF"])
    d = np.array([1.0, 1.0, 1.5, 0.5])
    p = ttest_rel(d, np.zeros(4)).pvalue
    assert "MARKOV1 (no hidden states, exact) wins" in line
    assert f"Paired t-test over 4 folds: p = {p:.2g}, significant." in line and p < ALPHA
