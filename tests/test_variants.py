"""Variants of the LDHMM code against hmmlearn: HMM (all point estimates) and VBHMM (all shared)."""

import numpy as np
import pytest
import torch
from hmmlearn.hmm import CategoricalHMM
from hmmlearn.vhmm import VariationalCategoricalHMM

from ldhmm.baselines.hmmv import HMMV
from ldhmm.baselines.vbhmm import VBHMM
from ldhmm.inference import VariantParameters
from ldhmm.inference.sharing import HMM_SHARING, VBHMM_SHARING
from ldhmm.models import VariantHMM

K, V = 3, 4


@pytest.fixture(scope="module")
def data(true_model):
    rng = np.random.default_rng(3)
    seqs = true_model.sample(150, lengths=rng.integers(2, 30, 150), seed=4)
    return seqs, np.concatenate(seqs)[:, None], [len(s) for s in seqs]


def random_rows(rng, shape):
    rows = rng.uniform(0.5, 1.5, size=shape)
    return rows / rows.sum(-1, keepdims=True)


def test_point_variant_reproduces_hmmlearn_em_trajectory(data):
    seqs, X, lengths = data
    rng = np.random.default_rng(0)
    start, trans, emit = random_rows(rng, K), random_rows(rng, (K, K)), random_rows(rng, (K, V))
    init = VariantParameters(
        HMM_SHARING,
        log_point={
            "pi": torch.log(torch.tensor(start)),
            "A": torch.log(torch.tensor(trans)),
            "B": torch.log(torch.tensor(emit)),
        },
    )
    ours = VariantHMM(K, n_symbols=V, sharing=HMM_SHARING, max_iter=12, tol=0.0).fit(seqs, init_params=init)

    ref = CategoricalHMM(
        K, n_features=V, n_iter=1, init_params="", params="ste", implementation="scaling", tol=-np.inf
    )
    ref.startprob_, ref.transmat_, ref.emissionprob_ = start, trans, emit
    trajectory = []
    for _ in range(12):
        trajectory.append(ref.score(X, lengths))
        ref.fit(X, lengths)
    np.testing.assert_allclose(ours.e_step_elbo_history_, trajectory, rtol=1e-10)
    assert np.all(np.diff(trajectory) > 0)
    np.testing.assert_allclose(np.exp(ours.params_.log_point["A"].numpy()), ref.transmat_, atol=1e-9)
    np.testing.assert_allclose(np.exp(ours.params_.log_point["B"].numpy()), ref.emissionprob_, atol=1e-9)
    # Held-out score of the point variant is the exact log-likelihood.
    np.testing.assert_allclose(
        ours.score(seqs[:20]), sum(ref.score(s[:, None]) for s in seqs[:20]), rtol=1e-10
    )


def test_vbhmm_matches_hmmlearn_variational_categorical_hmm(data):
    seqs, X, lengths = data
    rng = np.random.default_rng(1)
    prior = 0.5
    post = {
        "pi": prior + 20 * random_rows(rng, K),
        "A": prior + 200 * random_rows(rng, (K, K)),
        "B": prior + 300 * random_rows(rng, (K, V)),
    }
    init = VariantParameters(
        VBHMM_SHARING,
        prior={g: torch.full(p.shape, prior) for g, p in post.items()},
        posterior={g: torch.tensor(p) for g, p in post.items()},
    )
    ours = VBHMM(K, n_symbols=V, prior_concentration=prior, max_iter=10, tol=0.0).fit(seqs, init_params=init)

    ref = VariationalCategoricalHMM(
        K,
        n_features=V,
        n_iter=1,
        init_params="",
        params="ste",
        implementation="scaling",
        tol=-np.inf,
        startprob_prior=prior,
        transmat_prior=prior,
        emissionprob_prior=prior,
    )
    ref.startprob_prior_ = np.full(K, prior)
    ref.transmat_prior_ = np.full((K, K), prior)
    ref.emissionprob_prior_ = np.full((K, V), prior)
    ref.startprob_posterior_, ref.transmat_posterior_, ref.emissionprob_posterior_ = (
        post["pi"],
        post["A"],
        post["B"],
    )
    for _ in range(10):
        ref.fit(X, lengths)
    np.testing.assert_allclose(ours.startprob_posterior_, ref.startprob_posterior_, rtol=1e-8)
    np.testing.assert_allclose(ours.transmat_posterior_, ref.transmat_posterior_, rtol=1e-8)
    np.testing.assert_allclose(ours.emissionprob_posterior_, ref.emissionprob_posterior_, rtol=1e-8)
    assert np.all(np.diff(ours.elbo_history_) >= -1e-8 * np.abs(ours.elbo_history_[1:]))


def test_hmmv_fits_scores_and_round_trips(data, tmp_path):
    seqs, _, _ = data
    model = HMMV(K, n_symbols=V, max_iter=8, seed=0).fit(seqs)
    assert np.all(np.diff(model.elbo_history_) >= -1e-8 * np.abs(model.elbo_history_[1:]))
    assert np.allclose(model.startprob_.sum(), 1) and np.allclose(model.emissionprob_.sum(1), 1)
    scores = model.score_samples(seqs[:10])
    assert np.all(np.isfinite(scores))
    log_p = model.log_marginal_is(seqs[:10], n_samples=64, seed=0)
    assert log_p.mean() >= scores.mean()
    model.save(tmp_path / "hmmv.json")
    again = HMMV.load(tmp_path / "hmmv.json")
    np.testing.assert_array_equal(again.score_samples(seqs[:10]), scores)
