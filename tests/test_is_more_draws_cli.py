"""``--is-min-ess``/``--is-max-samples`` on ``ldhmm score`` and ``ldhmm compare``: the documented
rule for more importance draws (``ldhmm.models.base.importance_estimate``) from the command line,
the same numbers as the API's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ldhmm import LDHMM
from ldhmm.cli import main
from ldhmm.models.base import importance_estimate


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A small LDHMM with sparse priors (low effective sample sizes at 4 draws) and its log."""
    d = tmp_path_factory.mktemp("ess")
    truth = LDHMM.from_hyperparameters(
        [0.5, 0.5, 0.5], np.full((3, 3), 0.3) + np.eye(3), np.full((3, 6), 0.2) + 3 * np.eye(3, 6)
    )
    seqs = truth.sample(40, lengths=np.random.default_rng(0).integers(8, 30, size=40), seed=1)
    (d / "log.txt").write_text("\n".join(" ".join(map(str, s)) for s in seqs) + "\n")
    model = LDHMM(3, n_symbols=6, seed=0, n_init=1, max_iter=30).fit(seqs)
    model.save(d / "model.json", vocabulary=[str(v) for v in range(6)])
    return d, model, seqs


def test_score_draws_more_where_the_ess_is_low_as_the_api_does(fitted):
    d, model, seqs = fitted
    argv = ["score", str(d / "model.json"), str(d / "log.txt"), "--is-samples", "4", "--seed", "3"]
    rule = ["--is-min-ess", "3", "--is-max-samples", "32"]
    assert main([*argv, *rule, "--quiet", "--out", str(d / "s.csv")]) == 0
    table = pd.read_csv(d / "s.csv")
    found = importance_estimate(model, seqs, 4, 3, 3.0, 32)
    np.testing.assert_allclose(table["log_marginal_is"], found.log_marginal, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(table["log_marginal_is_samples"], found.n_samples)
    more = table["log_marginal_is_samples"] > 4
    assert more.any() and table["log_marginal_is_samples"].max() <= 32
    # off (the default): every sequence keeps its 4 draws, the same estimates where none were added
    assert main([*argv, "--quiet", "--out", str(d / "s0.csv")]) == 0
    plain = pd.read_csv(d / "s0.csv")
    assert "log_marginal_is_samples" not in plain
    np.testing.assert_array_equal(plain["log_marginal_is"][~more], table["log_marginal_is"][~more])


def test_compare_takes_the_rule_and_rejects_a_bad_value(fitted, tmp_path, capsys):
    d, _, _ = fitted
    argv = ["compare", "--file", str(d / "log.txt"), "--models", "LDHMM-PF", "--states", "2", "--folds", "2"]
    argv += ["--restarts", "1", "--max-iter", "10", "--is-samples", "4", "--quiet"]
    assert main([*argv, "--is-min-ess", "3", "--out", str(tmp_path / "c")]) == 0
    folds = pd.read_csv(tmp_path / "c" / "folds.csv")
    assert (folds["is_samples"] >= 4).all() and np.isfinite(folds["heldout_is"]).all()
    assert main([*argv, "--is-min-ess", "-1", "--out", str(tmp_path / "c2")]) != 0
    assert "--is-min-ess" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["score", "compare"])
@pytest.mark.parametrize(
    "given, message",
    [
        (["--is-samples", "0", "--is-min-ess", "3"], "--is-min-ess needs --is-samples N > 0"),
        (["--is-samples", "4", "--is-max-samples", "32"], "--is-max-samples needs --is-min-ess ESS"),
    ],
)
def test_a_part_of_the_rule_without_what_it_acts_on_is_refused(
    fitted, tmp_path, capsys, command, given, message
):
    """Either option alone changes nothing: one line naming it, nothing written (not a run
    without it)."""
    d, _, _ = fitted
    if command == "score":
        argv = ["score", str(d / "model.json"), str(d / "log.txt")]
    else:
        argv = ["compare", "--file", str(d / "log.txt"), "--models", "HMM", "--states", "2", "--folds", "2"]
    out = tmp_path / ("s.csv" if command == "score" else "c")
    assert main([*argv, *given, "--quiet", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and not out.exists()
