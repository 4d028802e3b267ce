"""The collapse diagnosis (issue 48, item 1): a fit on data drawn with huge concentrations says
the users share one HMM, wherever the model is shown (``ldhmm fit``, ``describe()``, the report);
one drawn with small concentrations says the users differ."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ldhmm import LDHMM, ParameterSharing, compare
from ldhmm.cli.main import main
from ldhmm.inference.ops.dirichlet import MAX_CONCENTRATION
from ldhmm.models.collapse import CAP_FACTOR, SHARED_HMM, diagnose_collapse, group_list, users_differ
from ldhmm.report_html import render_report

POINT = ParameterSharing("point", "point", "point")


def _params(pi, A, B, sharing=None):
    sharing = ParameterSharing() if sharing is None else sharing
    prior = {"pi": np.asarray(pi, float), "A": np.asarray(A, float), "B": np.asarray(B, float)}
    return SimpleNamespace(sharing=sharing, prior=prior)


def _draw(scale: float, n: int = 40, seed: int = 1):
    """``n`` short sequences of an LDHMM whose concentrations are ``scale`` times small ones."""
    truth = LDHMM.from_hyperparameters(
        np.array([1.0, 2.0]) * scale,
        np.array([[5.0, 1.0], [1.0, 5.0]]) * scale,
        np.array([[4.0, 1.0, 1.0], [1.0, 1.0, 4.0]]) * scale,
    )
    return truth.sample(n, lengths=np.random.default_rng(0).integers(10, 20, n), seed=seed)


@pytest.fixture(scope="module")
def fits():
    """Tiny fits on data drawn with huge (1e5 x) and with small (0.5 x) concentrations."""
    out = {}
    for name, scale in (("huge", 1e5), ("small", 0.5)):
        data = _draw(scale)
        out[name] = (LDHMM(2, seed=0, effort="quick", max_iter=30).fit(data), data)
    return out


def test_every_prior_at_its_cap_is_one_shared_hmm():
    cap = MAX_CONCENTRATION
    d = diagnose_collapse(_params([cap, cap / 2], [[cap, 3], [2, cap]], [[cap, 1, 1], [1, 1, cap / 5]]))
    assert d.collapsed and d.sentence == SHARED_HMM
    assert d.rows_at_cap == {"pi": (1, 1), "A": (2, 2), "B": (2, 2)}
    assert "pi: 1 of 1 row at the cap" in d.line() and "B: 2 of 2 rows at the cap" in d.line()


def test_some_groups_or_rows_at_the_cap_and_none():
    cap = MAX_CONCENTRATION
    below = cap / CAP_FACTOR * 0.99  # just under the threshold: not at the cap
    part = diagnose_collapse(_params([cap, 1], [[cap, 1], [1, cap]], [[3, 1, 1], [1, 1, below]]))
    assert not part.collapsed
    assert part.sentence.startswith("the users share pi and A: every row of their prior is at its cap")
    assert part.sentence.endswith("B still differs between users")
    rows = diagnose_collapse(_params([1, 2], [[cap, 1], [1, 5]], [[3, 1, 1], [1, 1, 2]]))
    assert rows.rows_at_cap["A"] == (1, 2)
    assert "some rows of the priors of A are at their cap" in rows.sentence
    none = diagnose_collapse(_params([1, 2], [[4, 1], [1, 5]], [[3, 1, 1], [1, 1, below]]))
    assert none.sentence == "no prior is at its cap: the users have dynamics of their own"
    point = diagnose_collapse(_params([1, 2], [[4, 1], [1, 5]], [[3, 1, 1]], POINT))
    assert point.per_user == () and "one shared HMM" in point.line()
    assert group_list(["pi"]) == "pi" and group_list(["pi", "A", "B"]) == "pi, A and B"


def test_users_differ_by_the_largest_difference_of_their_posterior_means():
    same = np.full((4, 2, 3), 1 / 3)
    spread, sentence = users_differ([same + 1e-7 * np.arange(4)[:, None, None]])
    assert spread == pytest.approx(3e-7) and sentence.endswith("the users do not differ")
    other = same.copy()
    other[2, 1] = [0.8, 0.1, 0.1]
    spread, sentence = users_differ([np.zeros((4, 0)), other])
    assert spread == pytest.approx(0.8 - 1 / 3) and "differ by up to 0.47" in sentence
    assert users_differ([same[:1]])[0] == 0.0


def test_a_fit_on_huge_concentrations_says_the_users_share_one_hmm(fits):
    model, data = fits["huge"]
    assert diagnose_collapse(model.params_).collapsed
    summary = dict(model.describe(data[:10]).summary.itertuples(index=False))
    assert summary["per-user priors"].startswith(SHARED_HMM + " (pi: 1 of 1 row at the cap")
    assert summary["do the users differ"].endswith("the users do not differ")
    page = render_report(model.describe(data[:10]), "huge")
    assert f'<p class="finding"><strong>per-user priors:</strong> {SHARED_HMM}.</p>' in page
    assert f"The spreads: {SHARED_HMM}." in page


def test_a_fit_on_small_concentrations_says_the_users_differ(fits):
    model, data = fits["small"]
    d = diagnose_collapse(model.params_)
    assert not d.collapsed and d.rows_at_cap["B"] == (0, 2)
    summary = dict(model.describe(data[:10]).summary.itertuples(index=False))
    assert SHARED_HMM not in summary["per-user priors"]
    assert "differ by up to" in summary["do the users differ"]


def test_ldhmm_fit_prints_the_diagnosis(tmp_path, capsys):
    data = _draw(1e5, n=30)
    path = tmp_path / "log.txt"
    path.write_text("\n".join(" ".join("abc"[x] for x in s) for s in data) + "\n")
    out = str(tmp_path / "m.json")
    args = [str(path), "--states", "2", "--effort", "quick", "--max-iter", "30", "--out", out]
    assert main(["fit", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].startswith(f"per-user priors: {SHARED_HMM} (pi: 1 of 1 row at the cap")


def test_compare_summary_says_which_priors_sit_at_their_cap(tmp_path):
    data = _draw(1e5, n=30)
    path = tmp_path / "log.txt"
    path.write_text("\n".join(" ".join("abc"[x] for x in s) for s in data) + "\n")
    result = compare(
        {"LDHMM-PF": None, "HMM": None},
        str(path),
        states=[2],
        folds=2,
        max_iter=10,
        effort="quick",
        is_samples=0,
        out=tmp_path / "run",
        quiet=True,
    )
    share = result.folds.groupby("model")["priors_at_cap"].mean()
    assert share["LDHMM-PF"] == 1.0 and np.isnan(share["HMM"])  # no per-user priors: no share
    assert "## Per-user priors at their cap" in result.summary
    assert f"LDHMM-PF: {SHARED_HMM}, at every K and in every fold." in result.summary
