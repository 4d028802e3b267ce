"""The next-event experiment (``ldhmm next-event``) on tiny synthetic data."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ldhmm.cli import main
from ldhmm.experiments.next_event import MARKOV, next_event, prediction_scores


def test_prediction_scores_by_hand():
    proba = np.array([[0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    s = prediction_scores(proba, np.array([1, 0, 3]))
    assert np.isclose(s["log_loss"], -np.mean(np.log([0.3, 0.1, 0.25])))
    assert s["hit1"] == 1 / 3  # only the tie of the third row counts in the target's favour
    assert s["hit3"] == 2 / 3


def test_next_event_tiny(tmp_path, capsys):
    res = next_event(
        ["LDHMM-PF", "HMM", "markov"], "synthetic", states=[2, 3], folds=2, n_sequences=40, max_iter=3,
        restarts=1, out=tmp_path / "o", quiet=True,
    )  # fmt: skip
    df = res.folds
    assert set(df["model"]) == {"LDHMM-PF", "HMM", MARKOV} and len(df) == 2 * 2 * 2 + 2
    assert np.isfinite(df["log_loss"]).all() and (df["hit3"] >= df["hit1"]).all()
    m = df[df["model"] == MARKOV]
    assert m["K"].isna().all() and sorted(m["fold"]) == [0, 1]  # no K: one row per fold
    assert "MARKOV (no K)" in res.summary and "Markov chain: MARKOV (no hidden states)" in res.summary
    assert (tmp_path / "o" / "next_event.png").is_file() and "Log loss" in res.summary
    # the command gives the same numbers
    argv = ["next-event", "--dataset", "synthetic", "--n-sequences", "40", "--states", "2", "3"]
    argv += ["--folds", "2", "--max-iter", "3", "--restarts", "1", "--models", "LDHMM-PF", "HMM", "MARKOV"]
    capsys.readouterr()
    code = main(argv + ["--quiet", "--out", str(tmp_path / "cli")])
    assert code == 0
    # the terminal shows every measure of the tables and ends with the summary's verdict
    printed = capsys.readouterr().out
    for title in ("Log loss (nats per predicted event", "hit@1 (mean", "hit@3 (mean", "Verdict"):
        assert f"\n{title}" in printed
    summary = (tmp_path / "cli" / "summary.md").read_text()
    verdict = summary.split("## Verdict\n\n")[1].strip().splitlines()
    assert printed.split("Verdict\n\n")[1].split("\n\nresults in")[0].splitlines() == verdict
    assert verdict[0].startswith(("Winner by log loss: ", "No winner by log loss: "))
    assert "paired t-test over 2 folds" in verdict[0] and "hit@1" in verdict[0]
    cli = pd.read_csv(tmp_path / "cli" / "folds.csv")
    assert cli["log_loss"].tolist() == df["log_loss"].tolist()
