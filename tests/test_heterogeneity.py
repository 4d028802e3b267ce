"""The study "When does LDHMM pay?" (experiments/heterogeneity.py): its synthetic logs, the prior
summary against known priors, and one log's row against the run's own files."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ldhmm import LDHMM
from ldhmm.experiments import heterogeneity as H
from ldhmm.inference.ops.dirichlet import MAX_CONCENTRATION, MIN_CONCENTRATION
from ldhmm.modelfiles import load_model


def test_prior_summary_of_known_priors():
    c = 0.5
    truth = LDHMM.from_hyperparameters(c * H.PI_PRIOR, c * H.A_PRIOR, c * H.B_PRIOR)
    got = H.prior_summary({g: truth.params_.prior[g].numpy() for g in ("pi", "A", "B")})
    assert got["pi_total"] == pytest.approx(3 * c) and got["A_total"] == pytest.approx(8 * c)
    assert got["B_total"] == pytest.approx(c * np.median(H.B_PRIOR.sum(axis=1)))
    assert all(got[f"{g}_at_{end}"] == 0.0 for g in ("pi", "A", "B") for end in ("max", "min"))
    capped = {
        "pi": [MIN_CONCENTRATION, MAX_CONCENTRATION, 1.0, 2.0],
        "A": np.ones((4, 4)),
        "B": np.ones((4, 3)),
    }
    capped["B"][0, 0] = MIN_CONCENTRATION
    got = H.prior_summary(capped)
    assert got["pi_at_max"] == 0.25 and got["pi_at_min"] == 0.25 and got["B_at_min"] == 1 / 12
    assert got["pi_total"] == pytest.approx(MAX_CONCENTRATION + 3.0)


def test_small_scales_make_sequences_differ():
    def spread(scale):
        seqs = H.heterogeneous_log(scale, 200, seed=3, lengths=(30, 30))
        assert len(seqs) == 200 and all(len(x) == 30 and x.min() >= 0 and x.max() < 6 for x in seqs)
        return np.std([np.mean(x == 0) for x in seqs])  # symbol 0's frequency, sequence by sequence

    np.testing.assert_array_equal(
        H.heterogeneous_log(1.0, 5, seed=2)[3], H.heterogeneous_log(1.0, 5, seed=2)[3]
    )
    assert spread(0.1) > 2 * spread(100.0)


def test_a_log_row_is_what_the_run_wrote(tmp_path):
    seqs = H.heterogeneous_log(0.3, 30, seed=1, lengths=(8, 12))
    row = H.study_log(
        "c=0.3", seqs, tmp_path, K=2, folds=2, restarts=1, is_samples=5, max_iter=3, seed=0
    )  # fmt: skip
    folds = pd.read_csv(tmp_path / "c=0.3" / "folds.csv")
    assert row["tokens"] == sum(len(x) for x in seqs) and row["sequences"] == len(seqs)
    by_model = folds.groupby("model")[["heldout_elbo", "heldout_is", "n_test_tokens"]].sum()
    for m in ("HMM", "MARKOV1", "MARKOV3"):  # exact scores: log p(x) is the held-out score
        assert row[m] == pytest.approx(by_model.loc[m, "heldout_elbo"] / row["tokens"], rel=1e-12)
    pf = by_model.loc["LDHMM-PF"]
    assert row["LDHMM-PF"] == pytest.approx(pf["heldout_is"] / row["tokens"], rel=1e-12)
    assert row["LDHMM-PF bound"] == pytest.approx(pf["heldout_elbo"] / row["tokens"], rel=1e-12)
    others = max(row[m] for m in ("HMM", "MARKOV1", "MARKOV3"))
    assert row["margin"] == pytest.approx(row["LDHMM-PF"] - others)
    # the priors: read back through the package's own loader, fold by fold
    totals = []
    for path in sorted((tmp_path / "c=0.3" / "models").glob("LDHMM-PF__K2__fold*.json")):
        totals.append(np.median(load_model(path).params_.prior["A"].double().sum(dim=1).numpy()))
    assert len(totals) == 2 and row["A_total"] == pytest.approx(np.median(totals))
    assert "| c=0.3 | " in H.markdown_table(pd.DataFrame([row]))


def _hmm_log_likelihood(x, pi, A, B) -> float:
    """The forward algorithm, scaled, in numpy (independent of the package's recursions)."""
    alpha, total = pi * B[:, x[0]], 0.0
    for t in range(1, len(x) + 1):
        total += np.log(alpha.sum())
        alpha = alpha / alpha.sum()
        if t < len(x):
            alpha = (alpha @ A) * B[:, x[t]]
    return total


def test_truth_of_a_log_of_nearly_identical_sequences_is_the_mean_hmm():
    # with every prior scaled by 10^4 every sequence's pi, A, B is the prior mean (to about 1e-4)
    scale = 1e4
    seqs = H.heterogeneous_log(scale, 20, seed=4, lengths=(10, 15))
    pi, A, B = (p / p.sum(axis=-1, keepdims=True) for p in (H.PI_PRIOR, H.A_PRIOR, H.B_PRIOR))
    exact = sum(_hmm_log_likelihood(x, pi, A, B) for x in seqs) / sum(len(x) for x in seqs)
    assert H.truth_per_token(scale, seqs, n_samples=20, seed=0) == pytest.approx(exact, abs=2e-3)
