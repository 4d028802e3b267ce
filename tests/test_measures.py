"""Held-out scores say what they are, and bounds are compared only within one family.

The rule (``ldhmm.experiments.measures.comparison_measure``) on hand-made result tables whose
bounds and log p(x) disagree about the best model, the families the models declare, and a
small comparison run end to end (``folds.csv``, ``table()``, ``ttests.csv``, ``summary.md``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import ldhmm
from ldhmm import LDHMM, ParameterSharing, VariantHMM
from ldhmm.baselines import HMMV, LDA, VBHMM
from ldhmm.experiments.compare import best_lines, ttests
from ldhmm.experiments.measures import LOG_PX, comparison_measure, score_label, with_log_px
from ldhmm.inference.svi.dirichlet_guide import DirichletMeanField
from ldhmm.models.pyro_model import ldhmm_sequence_model
from ldhmm.models.pyro_sequence import PyroSequenceModel


def _wobble(model, f):
    return 0.01 * f * f if model == "route" else 0.0


#: Mean over the three folds of route's wobble: pf - route differences are shifted by it.
WOBBLE = (0.0 + 0.01 + 0.04) / 3


def _rows(model, kind, family, bound, is_value, folds=3):
    """Result rows of one model at K = 2; fold f adds f/10 to every score (paired noise), and
    for model "route" also f^2/100 (so that differences vary over folds)."""
    return [
        {
            "model": model,
            "K": 2,
            "fold": f,
            "score_kind": kind,
            "score_family": family,
            "heldout_elbo": bound + f / 10 + _wobble(model, f),
            "heldout_elbo_per_seq": np.nan,
            "heldout_elbo_per_token": np.nan,
            "heldout_is": is_value + f / 10 + _wobble(model, f) if is_value is not None else np.nan,
            "heldout_is_per_seq": np.nan,
            "heldout_is_per_token": np.nan,
        }
        for f in range(folds)
    ]


@pytest.fixture()
def two_families():
    """Model "route" has the higher bound (another family's), "pf" the higher log p(x)."""
    return pd.DataFrame(
        _rows("pf", "lower_bound", "PF", -105.0, -100.0)
        + _rows("route", "lower_bound", "z-summed, Dirichlet mean field", -101.0, -100.5)
    )


def test_bounds_of_two_families_are_compared_by_log_px(two_families):
    measure = comparison_measure(two_families, ["pf", "route"])
    assert measure.column == LOG_PX and not measure.by_bound
    best = best_lines(two_families, ["pf", "route"])
    assert best[0].startswith("Best by log p(x)") and "pf with K=2" in best[0]
    # its higher bound names nothing: route is named only as the runner-up pf is tested against
    assert all(line.count("route with K") == line.count("runner-up at K=2, route with K=2") for line in best)
    assert "the runner-up at K=2, route with K=2" in best[0] and "paired t-test over 3 folds" in best[0]
    tt = ttests(two_families, ["pf", "route"])
    assert list(tt["measure"]) == ["log p(x)"]
    row = tt.iloc[0]
    assert row["mean_diff"] == pytest.approx(0.5 - WOBBLE) and row["kind_a"] == "log p(x), importance-sampled"


def test_one_family_is_compared_by_its_bound_and_by_log_px(two_families):
    df = two_families.assign(score_family="PF")
    measure = comparison_measure(df, ["pf", "route"])
    assert measure.column == "heldout_elbo" and measure.label == "lower bound (PF family)"
    assert "route with K=2" in best_lines(df, ["pf", "route"])[0]
    tt = ttests(df, ["pf", "route"])
    assert list(tt["measure"]) == ["lower bound (PF family)", "log p(x)"]
    assert tt["mean_diff"].tolist() == pytest.approx([-4.0 - WOBBLE, 0.5 - WOBBLE])


def test_a_bound_beside_an_exact_likelihood_and_a_bound_without_log_px():
    df = pd.DataFrame(
        _rows("pf", "lower_bound", "PF", -99.0, None)  # the highest number, but a bound alone
        + _rows("hmm", "exact", "", -103.0, None)
        + _rows("ff", "lower_bound", "FF", -104.0, -102.0)
    )
    assert comparison_measure(df, ["pf", "hmm"]).column == LOG_PX
    best = best_lines(df, ["pf", "hmm", "ff"])
    assert "ff with K=2" in best[0] and "importance-sampled" in best[0]
    assert any(line.startswith("Not ranked") and "pf" in line for line in best)
    logged = with_log_px(df)
    np.testing.assert_array_equal(
        logged.loc[logged.model == "hmm", LOG_PX], df.loc[df.model == "hmm", "heldout_elbo"]
    )
    assert logged.loc[logged.model == "pf", LOG_PX].isna().all()
    # an exact likelihood against an exact likelihood needs no estimate
    exact = pd.DataFrame(_rows("hmm", "exact", "", -103.0, None) + _rows("mc", "exact", "", -104.0, None))
    assert comparison_measure(exact, ["hmm", "mc"]).label == "exact log-lik"


def test_a_bound_of_no_declared_family_is_compared_with_no_other_bound(two_families):
    df = two_families.assign(score_family=np.nan)  # e.g. a plug-in that declares none
    assert comparison_measure(df, ["pf", "route"]).column == LOG_PX
    assert comparison_measure(df, ["pf"]).column == "heldout_elbo"  # along K, within itself
    assert score_label("lower_bound", np.nan) == "lower bound (family unknown)"


def test_models_declare_their_families():
    assert LDHMM(2).score_family == "PF" and LDHMM(2, guide="ff").score_family == "FF"
    assert (
        VariantHMM(2, sharing=ParameterSharing(B="point")).score_family
        == "PF; pi sequence, A sequence, B point"
    )
    assert VBHMM(2).score_family != HMMV(2).score_family
    assert len({VBHMM(2).score_family, HMMV(2).score_family, LDA(2).score_family, "PF", "FF"}) == 5
    route = PyroSequenceModel(ldhmm_sequence_model, "dirichlet", 2)
    assert route.score_family == "z-summed, Dirichlet mean field"
    own = PyroSequenceModel(ldhmm_sequence_model, DirichletMeanField(ldhmm_sequence_model), 2)
    assert own.score_family == route.score_family
    assert PyroSequenceModel(ldhmm_sequence_model, "normal", 2).score_family == "z-summed, AutoNormal"


def _pf_plugin(n_states, n_symbols, seed):
    return LDHMM(n_states, n_symbols=n_symbols, seed=seed, max_iter=2, n_init=1)


def test_a_comparison_run_carries_kind_and_family(tmp_path):
    res = ldhmm.compare(
        {"LDHMM-PF": None, "LDHMM-FF": None, "HMM": None, "mine": _pf_plugin},
        "synthetic",
        states=[2],
        folds=2,
        n_sequences=24,
        max_iter=2,
        restarts=1,
        is_samples=3,
        quiet=True,
        out=tmp_path / "o",
    )
    folds = pd.read_csv(tmp_path / "o" / "folds.csv")
    families = folds.groupby("model")["score_family"].first()
    assert families["LDHMM-PF"] == "PF" and families["LDHMM-FF"] == "FF" and families["mine"] == "PF"
    assert folds.loc[folds.model == "HMM", "score_family"].isna().all()  # an exact score has none
    table = res.table()
    assert list(table.columns) == ["score", 2]
    assert table.loc["LDHMM-FF", "score"] == "lower bound (FF family)"
    assert table.loc["HMM", "score"] == "exact log-lik"
    assert res.table("log_px").loc["LDHMM-PF", "score"] == "log p(x), importance-sampled"
    assert res.best[0].startswith("Best by log p(x)")
    assert any(line.startswith("Best within the PF family") for line in res.best)
    tt = pd.read_csv(tmp_path / "o" / "ttests.csv")
    ff_pf = tt[(tt.model_a == "LDHMM-FF") & (tt.model_b == "LDHMM-PF")]
    assert list(ff_pf["measure"]) == ["log p(x)"]
    pf_mine = tt[(tt.model_a == "LDHMM-PF") & (tt.model_b == "mine")]
    assert list(pf_mine["measure"]) == ["lower bound (PF family)", "log p(x)"]
    assert "lower bound (FF family)" in res.summary and "log p(x), exact" in res.summary
    # how far each importance-sampled estimate can be trusted, beside it
    ldhmm_rows = folds[folds.model.isin(["LDHMM-PF", "LDHMM-FF", "mine"])]
    assert (ldhmm_rows["is_std_error"] > 0).all() and (ldhmm_rows["is_min_ess"] >= 1).all()
    assert ldhmm_rows["is_low_ess"].between(0, ldhmm_rows["n_test"]).all()
    assert folds.loc[folds.model == "HMM", "is_std_error"].isna().all()
    assert "## How far the importance-sampled estimates can be trusted" in res.summary
