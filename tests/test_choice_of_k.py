"""The suggested K (issue 48, item 2): the smallest K within one standard error of the best
held-out score, paired over the held-out units; a warning when the best K is at an end of the
range; ``--states 2-8`` is the range 2..8."""

from __future__ import annotations

import numpy as np
import pytest

from ldhmm import LDHMM
from ldhmm.cli.main import main
from ldhmm.models.choice_of_k import RULE, held_out_scores, suggest_k
from ldhmm.models.path import parse_states


def _units(seed=0, n=40):
    """Held-out scores of K = 2..5 on ``n`` units: K = 3 and 4 close, 2 and 5 well below."""
    rng = np.random.default_rng(seed)
    base = rng.normal(-30.0, 5.0, n)
    noise = rng.normal(0.0, 0.2, (4, n))
    return base + np.array([[-3.0], [-0.02], [0.0], [-2.0]]) + noise


def test_the_smallest_k_within_one_standard_error_of_the_best():
    scores = _units()
    weights = np.random.default_rng(1).integers(5, 30, scores.shape[1]).astype(float)
    s = suggest_k([2, 3, 4, 5], scores, weights)
    value = scores.sum(1) / weights.sum()
    best = int(np.argmax(value))
    d = scores - scores[best]
    se = np.sqrt(scores.shape[1]) * d.std(axis=1, ddof=1) / weights.sum()
    np.testing.assert_allclose(s.scores, value, rtol=1e-12)
    np.testing.assert_allclose(np.delete(s.std_errors, best), np.delete(se, best), rtol=1e-12)
    within = [k for k, v, e in zip([2, 3, 4, 5], value, se) if v >= value[best] - e]
    assert s.best == [2, 3, 4, 5][best] and s.K == min(within) and s.K in (3, 4) and s.K != 2
    assert s.warning is None and s.line().startswith(f"suggested K: {s.K} ({RULE}")


def test_states_in_any_order_and_folds_as_units():
    scores = _units(n=10)
    shuffled, s = suggest_k([5, 3, 2, 4], scores[[3, 1, 0, 2]]), suggest_k([2, 3, 4, 5], scores)
    assert (shuffled.K, shuffled.best, shuffled.states) == (s.K, s.best, s.states) == (3, 4, (2, 3, 4, 5))
    np.testing.assert_array_equal(shuffled.std_errors, s.std_errors)
    # with unit weights the score is the mean over the folds, the error std(d) / sqrt(F)
    np.testing.assert_allclose(s.scores, scores.mean(1), rtol=1e-12)
    i = 0 if s.best != 2 else 1
    d = scores[i] - scores[[2, 3, 4, 5].index(s.best)]
    assert s.std_errors[i] == pytest.approx(d.std(ddof=1) / np.sqrt(10), rel=1e-12)


def test_a_best_k_at_an_end_of_the_range_is_warned_about():
    rising = np.array([[-3.0, -3.1, -2.9], [-2.0, -2.2, -2.1], [-1.0, -1.1, -0.9]])
    s = suggest_k([2, 3, 4], rising)
    assert (s.K, s.best) == (4, 4)
    assert s.lines()[1] == (
        "warning: the best held-out score is at K = 4, the largest K tried: a larger K may score higher "
        "(try a range beyond it)"
    )
    assert "smallest K tried" in suggest_k([2, 3, 4], rising[::-1]).warning
    assert suggest_k([1, 2, 3], rising[::-1]).warning is None  # K = 1 is the smallest K there is


def test_one_unit_has_no_standard_error_and_nan_units_are_left_out():
    s = suggest_k([2, 3], [[-5.0], [-4.0]])
    assert (
        s.K == 3
        and s.line() == "suggested K: 3 (the best held-out score; one held-out unit: no standard error)"
    )
    scores = _units(n=12)
    scores[1, 4] = np.nan
    assert np.isfinite(suggest_k([2, 3, 4, 5], scores).std_errors).all()
    with pytest.raises(ValueError, match="no K has a finite held-out score"):
        suggest_k([2], [[np.nan]])


def test_fit_path_models_and_held_out_sequences():
    truth = LDHMM.from_hyperparameters([1, 2], [[5, 1], [1, 5]], [[4, 1, 1], [1, 1, 4]])
    data = truth.sample(40, lengths=np.random.default_rng(0).integers(8, 16, 40), seed=1)
    models = LDHMM.fit_path(data[:30], [1, 2], effort="quick", max_iter=10, seed=0)
    states, scores, weights = held_out_scores(models, data[30:])
    assert states == [1, 2] and scores.shape == (2, 10) and weights.sum() == sum(len(s) for s in data[30:])
    np.testing.assert_allclose(scores[1], models[2].score_samples(data[30:]))
    assert suggest_k(states, scores, weights).K in (1, 2)


def test_a_dash_range_is_the_dotted_range():
    assert parse_states("2-8") == parse_states("2..8") == list(range(2, 9))


def test_ldhmm_fit_along_k_suggests_a_k(tmp_path, capsys):
    truth = LDHMM.from_hyperparameters([1, 2], [[5, 1], [1, 5]], [[4, 1, 1], [1, 1, 4]])
    data = truth.sample(30, lengths=np.random.default_rng(0).integers(8, 16, 30), seed=1)
    path = tmp_path / "log.txt"
    path.write_text("\n".join(" ".join("abc"[x] for x in s) for s in data) + "\n")
    out = tmp_path / "path"
    args = [str(path), "--states", "1-2", "--holdout", "0.3", "--effort", "quick", "--max-iter", "10"]
    assert main(["fit", *args, "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = [i for i, line in enumerate(lines) if line.startswith("suggested K: ")]
    assert len(at) == 1 and RULE in lines[at[0]] or "no standard error" in lines[at[0]]
    assert lines[-1].startswith(f"K = {lines[at[0]].split()[2]}: per-user priors: ")
    # without --holdout: no K suggested, and said why
    assert main(["fit", *args[:3], *args[5:], "--out", str(tmp_path / "plain")]) == 0
    assert "no K suggested: --holdout FRACTION" in capsys.readouterr().out
