"""The LDHMM estimator: recovery on synthetic data, scoring, persistence, bad input, custom guides."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from ldhmm.baselines.hmm import HMM
from ldhmm.baselines.lda import LDA
from ldhmm.data.seeds import MAX_SEED, derived_seeds
from ldhmm.inference.batch import validate_sequences
from ldhmm.models import LDHMM, NotFittedError

_SPEC = importlib.util.spec_from_file_location(
    "reference_chain", Path(__file__).with_name("reference_chain.py")
)
reference_chain = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(reference_chain)
LogSpacePFGuide = reference_chain.LogSpacePFGuide  # a user-written guide


@pytest.fixture(scope="module")
def synthetic(true_model):
    rng = np.random.default_rng(5)
    train = true_model.sample(2000, lengths=rng.integers(5, 30, 2000), seed=11)
    test = true_model.sample(200, lengths=rng.integers(5, 30, 200), seed=12)
    return train, test


@pytest.mark.parametrize("guide", ["pf", "ff"])
def test_fit_beats_true_hyperparameters_on_held_out_data(true_model, synthetic, guide):
    train, test = synthetic
    model = LDHMM(
        3, n_symbols=4, guide=guide, max_iter=60, tol=1e-5, e_step_max_iter=30, e_step_tol=1e-5, seed=0
    ).fit(train)
    assert model.n_iter_ >= 2
    assert np.all(np.diff(model.elbo_history_) >= -1e-8 * np.abs(model.elbo_history_[1:]))
    reference = LDHMM.from_hyperparameters(
        true_model.alpha_pi_,
        true_model.alpha_A_,
        true_model.beta_,
        guide=guide,
        e_step_max_iter=30,
        e_step_tol=1e-5,
    )
    fitted, truth = model.score(test), reference.score(test)
    n_tokens = sum(map(len, test))
    assert fitted >= truth - 0.02 * n_tokens, (fitted, truth)
    for attr in ("alpha_pi_", "alpha_A_", "beta_"):
        value = getattr(model, attr)
        assert value.dtype == np.float64 and np.all(np.isfinite(value)) and np.all(value > 0)


def test_importance_sampled_marginal_is_at_least_the_elbo(true_model, synthetic):
    _, test = synthetic
    elbo = true_model.score_samples(test[:60])
    log_p = true_model.log_marginal_is(test[:60], n_samples=64, seed=0)
    assert np.all(np.isfinite(log_p))
    assert log_p.mean() >= elbo.mean()
    # Reproducible given the seed; different seeds differ.
    assert np.array_equal(log_p, true_model.log_marginal_is(test[:60], n_samples=64, seed=0))
    assert not np.array_equal(log_p, true_model.log_marginal_is(test[:60], n_samples=64, seed=1))


def test_importance_sampling_matches_exact_marginal_for_tiny_case():
    # One sequence of length 1 under Dir priors: p(x) = E[pi . B[:, x]] has a closed form.
    model = LDHMM.from_hyperparameters([1.0, 3.0], [[1.0, 1.0], [1.0, 1.0]], [[2.0, 1.0], [1.0, 4.0]])
    # p(x=0) = sum_k E[pi_k] E[B_k0] = 0.25 * 2/3 + 0.75 * 1/5
    exact = np.log(0.25 * 2 / 3 + 0.75 * 1 / 5)
    estimate = model.log_marginal_is([np.array([0])], n_samples=20000, seed=0)[0]
    assert abs(estimate - exact) < 0.01
    assert model.score_samples([np.array([0])])[0] <= exact + 1e-12


@pytest.mark.parametrize("effort", ["standard", "thorough"])
def test_reproducible_given_seed(small_db, effort):
    a = LDHMM(2, seed=3, max_iter=5, effort=effort).fit(small_db)
    b = LDHMM(2, seed=3, max_iter=5, effort=effort).fit(small_db)
    c = LDHMM(2, seed=4, max_iter=5, effort=effort).fit(small_db)
    assert np.array_equal(a.beta_, b.beta_) and np.array_equal(a.elbo_history_, b.elbo_history_)
    if effort == "thorough":  # random restarts; v5's runs from the HMM and the seeded start need
        assert not np.array_equal(a.beta_, c.beta_)  # no seed unless an HMM restart wins
    s1 = a.sample(5, length=7, seed=9)
    s2 = a.sample(5, length=7, seed=9)
    assert all(np.array_equal(x, y) for x, y in zip(s1, s2))


def test_score_posterior_sample_and_persistence(tmp_path, small_db):
    model = LDHMM(3, guide="ff", max_iter=4, seed=0).fit(small_db)
    scores = model.score_samples(small_db[:10])
    assert scores.shape == (10,) and np.all(np.isfinite(scores)) and np.all(scores < 0)
    assert np.isclose(model.score(small_db[:10]), scores.sum())
    post = model.posterior(small_db[:10])
    assert (
        post["g_pi"].shape == (10, 3) and post["g_A"].shape == (10, 3, 3) and post["g_B"].shape == (10, 3, 4)
    )
    assert all(m.shape == (len(s), 3) for m, s in zip(post["state_marginals"], small_db[:10]))
    assert np.allclose([m.sum(1) for m in post["state_marginals"][0:1]], 1.0)
    seqs = model.sample(4, lengths=[1, 2, 3, 4], seed=0)
    assert [len(s) for s in seqs] == [1, 2, 3, 4] and all(s.max() < 4 for s in seqs)

    path = tmp_path / "model.json"
    model.save(path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "ldhmm" and doc["class"] == "LDHMM"
    loaded = LDHMM.load(path)
    assert np.array_equal(loaded.beta_, model.beta_) and np.array_equal(loaded.alpha_A_, model.alpha_A_)
    assert loaded.guide.name == "ff" and loaded.n_iter_ == model.n_iter_
    np.testing.assert_array_equal(loaded.score_samples(small_db[:10]), scores)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not an ldhmm model file"):
        LDHMM.load(path)


@pytest.mark.parametrize(
    "bad, message",
    [
        ([], "empty"),
        ([np.array([0, 1]), np.array([], dtype=int)], "sequence 1 is empty"),
        ([np.array([0, -1])], "negative"),
        ([np.array([0.5, 1.0])], "non-integer"),
        ([np.array(["a", "b"])], "non-integer"),
        (["abc"], "string"),
        ([np.array([[0, 1]])], "shape"),
        (None, "None"),
    ],
)
def test_bad_training_input_is_a_clear_error(bad, message):
    with pytest.raises(ValueError, match=message):
        LDHMM(2).fit(bad)


def test_bad_arguments_and_score_time_symbols(small_db):
    for k in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="n_states"):
            LDHMM(k)
    with pytest.raises(ValueError, match="guide"):
        LDHMM(2, guide="xx")
    model = LDHMM(2, max_iter=2).fit(small_db)
    with pytest.raises(ValueError, match="out of range"):
        model.score_samples([np.array([0, 4])])
    with pytest.raises(ValueError, match="negative"):
        model.score_samples([np.array([0, -2])])
    with pytest.raises(NotFittedError, match="not fitted"):
        LDHMM(2).score_samples(small_db)
    with pytest.raises(ValueError, match="shapes"):
        LDHMM.from_hyperparameters([1, 1], [[1, 1]], [[1, 1], [1, 1]])
    with pytest.raises(ValueError, match="> 0"):
        LDHMM.from_hyperparameters([1, 0], [[1, 1], [1, 1]], [[1, 1], [1, 1]])


def test_validation_of_int64_arrays_checks_by_chunk_and_names_the_bad_sequence():
    """int64 arrays are checked a chunk of sequences per numpy call: they come back as the same
    objects, and a bad symbol past the first chunk is still named by its sequence."""
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 5, size=n) for n in rng.integers(1, 6, 9000)]  # three chunks
    out = validate_sequences(seqs, n_symbols=5)
    assert len(out) == len(seqs) and all(a is b for a, b in zip(out, seqs))
    for value, message in (
        (-1, "sequence 8500 has a negative symbol -1"),
        (7, "sequence 8500 has symbol 7 out"),
    ):
        bad = list(seqs)
        bad[8500] = np.array([0, value])
        with pytest.raises(ValueError, match=message):
            validate_sequences(bad, n_symbols=5)
    # another dtype goes sequence by sequence, to the same arrays as int64
    as_int32 = validate_sequences([s.astype(np.int32) for s in seqs[:50]])
    assert all(a.dtype == np.int64 and np.array_equal(a, b) for a, b in zip(as_int32, seqs))


@pytest.mark.parametrize("m_step", ["collapsed", "paper"])
def test_user_written_guide_plugs_into_estimator(small_db, tmp_path, m_step):
    # effort "thorough": no start mid-fit, where a per-sequence tie between a start and the warm
    # run could go either way on the two implementations' last digits
    options = dict(max_iter=6, seed=1, m_step=m_step, n_init=1, effort="thorough")
    custom = LDHMM(2, guide=LogSpacePFGuide(), **options).fit(small_db)
    builtin = LDHMM(2, guide="pf", **options).fit(small_db)
    # The collapsed M-step moves some concentrations along directions where the ELBO is flat
    # to ~1e-12, so last-digit differences between the two E-step implementations shift where
    # Newton stops; the ELBOs still agree to 1e-6.
    np.testing.assert_allclose(
        custom.elbo_history_, builtin.elbo_history_, rtol=1e-8 if m_step == "paper" else 1e-6
    )
    if m_step == "paper":
        np.testing.assert_allclose(custom.beta_, builtin.beta_, rtol=1e-6)
    else:
        # Some rows of beta_ head for the cap along a direction where the objective is flat to
        # 1e-12: their scale is not determined, and an accept/reject decision of a Newton step
        # that flips on last-digit differences changes the path slightly; their mean agrees.
        np.testing.assert_allclose(
            custom.beta_ / custom.beta_.sum(-1, keepdims=True),
            builtin.beta_ / builtin.beta_.sum(-1, keepdims=True),
            rtol=1e-3,
        )
    custom.save(tmp_path / "m.json")
    with pytest.raises(ValueError, match="custom guide"):
        LDHMM.load(tmp_path / "m.json")
    again = LDHMM.load(tmp_path / "m.json", guide=LogSpacePFGuide())
    np.testing.assert_allclose(again.score_samples(small_db[:5]), custom.score_samples(small_db[:5]))


def test_restarts_keep_the_best_training_elbo(small_db):
    best = LDHMM(3, n_symbols=4, seed=0, max_iter=8, n_init=3).fit(small_db)
    seeds = best.restart_seeds()
    assert len(set(seeds)) == 3 and seeds[0] == 0
    single = [LDHMM(3, n_symbols=4, seed=s, max_iter=8, n_init=1).fit(small_db) for s in seeds]
    single = [model.elbo_history_[-1] for model in single]
    assert best.elbo_history_[-1] == max(single)
    with pytest.raises(ValueError, match="n_init"):
        LDHMM(2, n_init=0)


def test_every_restart_seed_is_a_seed_a_model_takes(small_db):
    """A restart's seed (up to 2**32 - 1) fits on its own, and so does the largest seed, for
    LDHMM and the baselines that take seeds (numpy's legacy generators take 32-bit seeds)."""
    assert max(max(derived_seeds(s, 8)) for s in range(50)) <= MAX_SEED == 2**32 - 1
    for model in (
        LDHMM(2, n_symbols=4, seed=MAX_SEED, max_iter=3, n_init=2),
        HMM(2, seed=MAX_SEED, n_init=2),
    ):
        assert np.isfinite(model.fit(small_db).score_samples(small_db[:3])).all()
    assert np.isfinite(LDA(2, seed=MAX_SEED).fit(small_db).score_samples(small_db[:3])).all()
    with pytest.raises(ValueError, match="seed must be <="):
        LDHMM(2, seed=MAX_SEED + 1)
