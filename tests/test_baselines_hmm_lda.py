"""Tests of the HMM and LDA baselines and of the shared protocol (ldhmm.models.base)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from gensim.models import LdaModel
from hmmlearn.hmm import CategoricalHMM
from scipy.special import digamma, gammaln, logsumexp

from ldhmm.baselines.hmm import (
    HMM,
    bucket_stats,
    forward_log_likelihood,
    training_buckets,
    training_log_likelihood,
)
from ldhmm.baselines.lda import LDA, _vectorized_inference, to_bow_corpus, to_bow_matrix
from ldhmm.data.seeds import derived_seeds
from ldhmm.experiments.plugins import check_protocol
from ldhmm.models.base import NotFittedError, SequenceModel


# ---------------------------------------------------------------- data helpers
def sample_hmm(rng, n_seq, k, v, min_len, max_len):
    pi = rng.dirichlet(np.ones(k))
    a = rng.dirichlet(np.ones(k) * 0.5, size=k)
    b = rng.dirichlet(np.ones(v) * 0.5, size=k)
    seqs = []
    for _ in range(n_seq):
        n = int(rng.integers(min_len, max_len + 1))
        z = rng.choice(k, p=pi)
        x = np.empty(n, dtype=np.int64)
        for t in range(n):
            x[t] = rng.choice(v, p=b[z])
            z = rng.choice(k, p=a[z])
        seqs.append(x)
    return seqs


def brute_force_loglik(startprob, transmat, emissionprob, x):
    """log p(x) by enumerating all K^N hidden paths (no forward algorithm, no hmmlearn)."""
    k = len(startprob)
    terms = []
    for path in itertools.product(range(k), repeat=len(x)):
        lp = np.log(startprob[path[0]]) + np.log(emissionprob[path[0], x[0]])
        for t in range(1, len(x)):
            lp += np.log(transmat[path[t - 1], path[t]]) + np.log(emissionprob[path[t], x[t]])
        terms.append(lp)
    return logsumexp(terms)


def two_topic_docs(rng, n_docs, v=10, min_len=20, max_len=40):
    """Documents from two topics on disjoint halves of the vocabulary, mostly one topic each."""
    half = v // 2
    topics = np.zeros((2, v))
    topics[0, :half] = rng.dirichlet(np.ones(half) * 2)
    topics[1, half:] = rng.dirichlet(np.ones(v - half) * 2)
    docs = []
    for _ in range(n_docs):
        theta = rng.dirichlet([0.1, 0.1])
        n = int(rng.integers(min_len, max_len + 1))
        z = rng.choice(2, size=n, p=theta)
        docs.append(np.array([rng.choice(v, p=topics[zi]) for zi in z], dtype=np.int64))
    return docs


@pytest.fixture(scope="module")
def hmm_data():
    rng = np.random.default_rng(1)
    return sample_hmm(rng, 60, k=3, v=5, min_len=1, max_len=30)


# ----------------------------------------------------------------- protocol
@pytest.mark.parametrize("cls, name, kind", [(HMM, "HMM", "exact"), (LDA, "LDA", "lower_bound")])
def test_protocol_attributes(cls, name, kind):
    assert cls.name == name
    assert cls.score_kind == kind
    model = cls(2, seed=3)
    assert model.n_states == 2 and model.seed == 3
    assert isinstance(model, SequenceModel)
    check_protocol(model, name)  # what the harness asks of a model that is not a SequenceModel


def test_subclass_with_bad_score_kind_is_rejected():
    with pytest.raises(TypeError, match="score_kind"):

        class Bad(SequenceModel):  # noqa: F841
            name = "Bad"
            score_kind = "exactish"

            def _fit(self, sequences, n_symbols):
                pass

            def _score_samples(self, sequences):
                return np.zeros(len(sequences))


# ---------------------------------------------------------------------- HMM
@pytest.mark.parametrize("k", [2, 3])
def test_hmm_score_samples_equals_brute_force_enumeration(k):
    rng = np.random.default_rng(10 + k)
    train = sample_hmm(rng, 40, k=k, v=4, min_len=1, max_len=12)
    model = HMM(k, n_symbols=4, max_iter=20, seed=k).fit(train)
    test = [rng.integers(0, 4, size=n) for n in (1, 2, 3, 4, 5, 5, 3)]
    got = model.score_samples(test)
    want = np.array(
        [brute_force_loglik(model.startprob_, model.transmat_, model.emissionprob_, x) for x in test]
    )
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)
    # and hmmlearn's own score of each sequence with the same parameters
    ref = np.array([model.model_.score(np.asarray(x).reshape(-1, 1)) for x in test])
    np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-11)


def test_forward_log_likelihood_matches_hmmlearn_across_chunks():
    rng = np.random.default_rng(2)
    k, v = 4, 6
    hl = CategoricalHMM(n_components=k, n_features=v)
    hl.startprob_ = rng.dirichlet(np.ones(k))
    hl.transmat_ = rng.dirichlet(np.ones(k), size=k)
    hl.emissionprob_ = rng.dirichlet(np.ones(v), size=k)
    seqs = [rng.integers(0, v, size=n) for n in rng.integers(1, 300, size=80)]
    ref = np.array([hl.score(s.reshape(-1, 1)) for s in seqs])
    for max_cells in (1, 500, 1 << 19):  # many tiny chunks ... one chunk
        got = forward_log_likelihood(hl.startprob_, hl.transmat_, hl.emissionprob_, seqs, max_cells)
        np.testing.assert_allclose(got, ref, rtol=1e-10)


def test_hmm_map_objective_and_ml_loglik_never_decrease(hmm_data):
    model = HMM(3, max_iter=40, tol=0.0, seed=0).fit(hmm_data)
    obj = np.array(model.objective_history_)
    assert len(obj) == 40 == model.n_iter_
    assert np.all(np.diff(obj) >= -1e-9 * np.abs(obj[1:])), np.diff(obj).min()
    assert obj[-1] > obj[0] + 1.0  # it actually learned something
    assert list(model.monitor_.history) == model.objective_history_

    ml = HMM(3, max_iter=40, tol=0.0, seed=0, emission_pseudocount=0, transition_pseudocount=0).fit(hmm_data)
    ll = np.array(ml.loglik_history_)
    assert np.all(np.diff(ll) >= -1e-9 * np.abs(ll[1:])), np.diff(ll).min()
    # with zero pseudocounts the monitored objective is the log-likelihood itself
    np.testing.assert_allclose(ml.objective_history_, ml.loglik_history_, rtol=1e-12)
    # the training log-likelihood at the final parameters beats every iterate's
    assert ml.train_log_likelihood_ >= ll.max() - 1e-9


def test_hmm_is_seeded_and_reproducible(hmm_data):
    a = HMM(3, max_iter=15, seed=7).fit(hmm_data)
    b = HMM(3, max_iter=15, seed=7).fit(hmm_data)
    c = HMM(3, max_iter=15, seed=8).fit(hmm_data)
    for attr in ("startprob_", "transmat_", "emissionprob_"):
        np.testing.assert_array_equal(getattr(a, attr), getattr(b, attr))
    assert not np.allclose(a.emissionprob_, c.emissionprob_)
    np.testing.assert_array_equal(a.score_samples(hmm_data), b.score_samples(hmm_data))


def test_hmm_scaling_and_log_implementations_agree(hmm_data):
    s = HMM(3, max_iter=25, tol=0.0, seed=1, implementation="scaling", fast_estep=False).fit(hmm_data)
    lg = HMM(3, max_iter=25, tol=0.0, seed=1, implementation="log", fast_estep=False).fit(hmm_data)
    for attr in ("startprob_", "transmat_", "emissionprob_"):
        np.testing.assert_allclose(getattr(s, attr), getattr(lg, attr), rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(s.objective_history_, lg.objective_history_, rtol=1e-10)


def test_hmm_n_init_keeps_the_best_run(hmm_data):
    one = HMM(3, max_iter=10, seed=4).fit(hmm_data)
    three = HMM(3, max_iter=10, seed=4, n_init=3).fit(hmm_data)

    # run 0 of n_init=3 is the n_init=1 run, so the kept objective cannot be lower
    def objective(m):
        return m.train_log_likelihood_ + m.model_._log_prior()

    assert objective(three) >= objective(one) - 1e-9


def test_hmm_screening_continues_the_best_screened_run_to_tol(hmm_data):
    """screen_tol: every run stops at the looser tolerance, the best by MAP objective goes on to
    tol from where it stopped: one monotone history, counted whole, judged under tol."""
    tol, screen = 1e-5, 1e-3
    n_tokens = sum(map(len, hmm_data))
    screened_alone = HMM(3, tol=screen, seed=2, n_init=3).fit(hmm_data)
    model = HMM(3, tol=tol, seed=2, n_init=3, screen_tol=screen).fit(hmm_data)
    obj = np.array(model.objective_history_)
    assert np.all(np.diff(obj) >= -1e-9 * np.abs(obj[1:]))
    # the kept screened run is the run the looser fit keeps, carried on from its last iterate
    head = np.array(screened_alone.objective_history_)
    np.testing.assert_allclose(obj[: len(head)], head, rtol=1e-12)
    assert len(obj) > len(head) and model.n_iter_ == len(obj) == len(model.loglik_history_)
    assert model.start_kind_ == screened_alone.start_kind_
    assert model.converged_ and obj[-1] - obj[-2] < tol * n_tokens
    assert obj[-1] >= head[-1]
    # a screen at or below tol is no screen: the fit of every run to tol
    plain = HMM(3, tol=1e-4, seed=2, n_init=3).fit(hmm_data)
    same = HMM(3, tol=1e-4, seed=2, n_init=3, screen_tol=1e-5).fit(hmm_data)
    np.testing.assert_array_equal(plain.objective_history_, same.objective_history_)
    with pytest.raises(ValueError, match="screen_tol must be None or a finite number >= 0"):
        HMM(3, screen_tol=-1.0)


def test_hmm_score_is_sum_of_score_samples(hmm_data):
    model = HMM(2, max_iter=10).fit(hmm_data)
    s = model.score_samples(hmm_data[:25])
    assert s.shape == (25,) and s.dtype == np.float64
    assert np.all(np.isfinite(s)) and np.all(s < 0)
    assert model.score(hmm_data[:25]) == pytest.approx(s.sum(), rel=1e-12)


def test_hmm_symbol_unseen_in_training_scores_finitely():
    rng = np.random.default_rng(5)
    train = [rng.integers(0, 5, size=20) for _ in range(30)]  # symbols 0..4 only
    model = HMM(2, n_symbols=6, max_iter=10).fit(train)
    assert model.n_symbols_ == 6 and model.emissionprob_.shape == (2, 6)
    assert np.all(model.emissionprob_[:, 5] > 0)
    s = model.score_samples([np.array([0, 5, 1]), np.array([5])])
    assert np.all(np.isfinite(s))
    # a symbol costs more when it was never seen
    assert s[1] < model.score_samples([np.array([0])])[0]
    # pure maximum likelihood is honest about it: probability zero
    ml = HMM(2, n_symbols=6, max_iter=10, emission_pseudocount=0).fit(train)
    assert ml.score_samples([np.array([0, 5, 1])])[0] == -np.inf


def test_hmm_vocabulary_defaults_to_max_symbol_plus_one(hmm_data):
    model = HMM(2, max_iter=3).fit(hmm_data)
    assert model.n_symbols_ == int(max(s.max() for s in hmm_data)) + 1


# --------------------------------------------------------------- bad input
@pytest.mark.parametrize("cls", [HMM, LDA])
def test_bad_input_raises_clear_value_errors(cls):
    good = [np.array([0, 1, 2, 1]), np.array([2, 2, 0])]
    with pytest.raises(ValueError, match="n_states"):
        cls(0)
    with pytest.raises(ValueError, match="n_states"):
        cls(2.5)
    with pytest.raises(ValueError, match="seed"):
        cls(2, seed=-1)
    with pytest.raises(ValueError, match="empty"):
        cls(2).fit([])
    with pytest.raises(ValueError, match="sequence 1 is empty"):
        cls(2).fit([np.array([0, 1]), np.array([], dtype=int)])
    with pytest.raises(ValueError, match="negative"):
        cls(2).fit([np.array([0, -1, 2])])
    with pytest.raises(ValueError, match="string"):
        cls(2).fit(["abc", "bca"])
    with pytest.raises(ValueError, match="n_symbols"):
        cls(2, n_symbols=0).fit(good)
    with pytest.raises(ValueError, match="out of range"):
        cls(2, n_symbols=2).fit(good)
    with pytest.raises(NotFittedError):
        cls(2).score_samples(good)
    model = cls(2, seed=0).fit(good)
    assert model.n_symbols_ == 3
    with pytest.raises(ValueError, match="symbol 3 out of range"):
        model.score_samples([np.array([0, 3])])
    with pytest.raises(ValueError, match="sequence 0 is empty"):
        model.score([np.array([], dtype=int)])
    with pytest.raises(ValueError):
        model.score_samples(["ab"])


# ---------------------------------------------------------------------- LDA
@pytest.fixture(scope="module")
def lda_fitted():
    rng = np.random.default_rng(3)
    train = two_topic_docs(rng, 150)
    test = two_topic_docs(rng, 40)
    model = LDA(2, passes=20, seed=0).fit(train)
    return model, train, test


def dirichlet_kl(a, b):
    """KL(Dir(a) || Dir(b)) row-wise, from the textbook formula."""
    a0, b0 = a.sum(-1), b.sum(-1)
    return (
        gammaln(a0)
        - gammaln(a).sum(-1)
        - gammaln(b0)
        + gammaln(b).sum(-1)
        + ((a - b) * (digamma(a) - digamma(a0)[..., None])).sum(-1)
    )


def test_lda_per_document_bounds_sum_to_gensim_bound_minus_topic_term(lda_fitted):
    model, _, test = lda_fitted
    bows = to_bow_corpus(to_bow_matrix(test, model.n_symbols_))
    gamma = model.variational_gamma(test)
    assert gamma.shape == (len(test), 2)
    # gensim's bound wants gamma[d] 2-D (its Cython logsumexp takes 2-D input only)
    gensim_total = model.model_.bound(bows, gamma=gamma[:, None, :])
    lam = model.model_.state.get_lambda()
    eta = np.broadcast_to(model.model_.eta, lam.shape)
    topic_term = -dirichlet_kl(lam, eta).sum()
    assert model.topic_term() == pytest.approx(topic_term, rel=1e-10)
    scores = model.score_samples(test)
    assert scores.sum() == pytest.approx(gensim_total - topic_term, rel=1e-10)
    # and document by document
    for d in (0, 7, 21):
        one = model.model_.bound([bows[d]], gamma=gamma[d : d + 1, None, :]) - topic_term
        assert scores[d] == pytest.approx(one, rel=1e-10)
    # a bound on a log-probability of discrete data is negative
    assert np.all(scores < 0)


def test_lda_vectorized_inference_matches_gensim_inference(lda_fitted):
    model, train, test = lda_fitted
    bows = to_bow_corpus(to_bow_matrix(test + train[:30], model.n_symbols_))
    gm = model.model_
    gm.random_state = np.random.RandomState(11)
    g_ref, s_ref = LdaModel.inference(gm, bows, collect_sstats=True)
    gm.random_state = np.random.RandomState(11)
    g_vec, s_vec = _vectorized_inference(gm, bows, collect_sstats=True)
    np.testing.assert_allclose(g_vec, g_ref, rtol=1e-9)
    np.testing.assert_allclose(s_vec, s_ref, rtol=1e-9)


def test_lda_fast_and_gensim_inference_fit_the_same_model(lda_fitted):
    _, train, test = lda_fitted
    fast = LDA(2, passes=2, seed=5).fit(train[:60])
    slow = LDA(2, passes=2, seed=5, fast_inference=False).fit(train[:60])
    np.testing.assert_allclose(fast.lambda_, slow.lambda_, rtol=1e-8)
    np.testing.assert_allclose(fast.alpha_, slow.alpha_, rtol=1e-8)
    np.testing.assert_allclose(fast.score_samples(test), slow.score_samples(test), rtol=1e-8)


def test_lda_is_reproducible_and_scores_deterministically(lda_fitted):
    model, train, test = lda_fitted
    again = LDA(2, passes=20, seed=0).fit(train)
    np.testing.assert_array_equal(model.lambda_, again.lambda_)
    np.testing.assert_array_equal(model.alpha_, again.alpha_)
    np.testing.assert_array_equal(model.score_samples(test), again.score_samples(test))
    np.testing.assert_array_equal(model.score_samples(test), model.score_samples(test))
    other = LDA(2, passes=20, seed=1).fit(train)
    assert not np.array_equal(model.lambda_, other.lambda_)


def test_lda_restarts_use_the_derived_seeds(lda_fitted):
    _, train, _ = lda_fitted
    model = LDA(2, passes=2, seed=7, n_init=3).fit(train[:60])
    seeds = derived_seeds(7, 3)
    assert seeds == [7, 369571992, 1009178997] and model.fit_seed_ in seeds
    # the kept restart is that seed's own fit
    alone = LDA(2, passes=2, seed=model.fit_seed_).fit(train[:60])
    np.testing.assert_array_equal(model.topic_word_, alone.topic_word_)
    np.testing.assert_array_equal(model.alpha_, alone.alpha_)


def test_lda_learned_attributes(lda_fitted):
    model, _, _ = lda_fitted
    assert model.topic_word_.shape == (2, 10) and model.topic_word_.dtype == np.float64
    np.testing.assert_allclose(model.topic_word_.sum(axis=1), 1.0)
    assert model.alpha_.shape == (2,) and np.all(model.alpha_ > 0)
    assert not np.allclose(model.alpha_, 0.5)  # alpha was learned, not left at 1/K
    # the two topics found live on the two halves of the vocabulary
    halves = np.stack([model.topic_word_[:, :5].sum(1), model.topic_word_[:, 5:].sum(1)], axis=1)
    assert sorted(halves.max(axis=1)) > [0.9, 0.9]


def test_lda_score_is_sum_and_two_topics_beat_one(lda_fitted):
    model, train, test = lda_fitted
    s = model.score_samples(test)
    assert s.shape == (len(test),)
    assert model.score(test) == pytest.approx(s.sum(), rel=1e-12)
    one = LDA(1, passes=20, seed=0).fit(train)
    per_token = sum(len(x) for x in test)
    gain = (model.score(test) - one.score(test)) / per_token
    assert gain > 0.3, gain  # nats per symbol: two disjoint topics are easy to tell apart


def test_lda_symbol_unseen_in_training_scores_finitely(lda_fitted):
    _, train, _ = lda_fitted
    small = [np.asarray(x) % 5 for x in train[:40]]  # only symbols 0..4
    model = LDA(2, n_symbols=10, passes=2).fit(small)
    assert model.topic_word_.shape == (2, 10)
    s = model.score_samples([np.array([0, 9, 9, 1]), np.array([0, 1, 1, 0])])
    assert np.all(np.isfinite(s)) and s[0] < s[1]


def test_hmm_vectorized_estep_reproduces_hmmlearn_em_trajectory(hmm_data):
    fast = HMM(3, max_iter=25, tol=0.0, seed=2, fast_estep=True).fit(hmm_data)
    ref = HMM(3, max_iter=25, tol=0.0, seed=2, fast_estep=False).fit(hmm_data)
    np.testing.assert_allclose(fast.loglik_history_, ref.loglik_history_, rtol=1e-11)
    for attr in ("startprob_", "transmat_", "emissionprob_"):
        np.testing.assert_allclose(getattr(fast, attr), getattr(ref, attr), rtol=1e-8, atol=1e-12)


def test_bucket_stats_match_hmmlearn_estep_across_chunks():
    rng = np.random.default_rng(4)
    seqs = sample_hmm(rng, 50, k=3, v=5, min_len=1, max_len=60)
    model = HMM(3, max_iter=3, seed=0, fast_estep=False).fit(seqs)
    X = np.concatenate(seqs).reshape(-1, 1)
    stats, lp = model.model_._do_estep(X, np.array([len(s) for s in seqs]))
    for max_cells in (1, 300, 1 << 18):
        lp2, start, trans, obs = bucket_stats(
            model.startprob_, model.transmat_, model.emissionprob_, training_buckets(seqs, max_cells)
        )
        assert lp2 == pytest.approx(lp, rel=1e-12)
        np.testing.assert_allclose(start, stats["start"], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(trans, stats["trans"], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(obs, stats["obs"], rtol=1e-10, atol=1e-12)


def test_hmm_computes_identical_sequences_once_and_ignores_their_order():
    """A log of many copies: the E-step's buckets hold each distinct sequence once, weighed by
    its copies, and give hmmlearn's own per-sequence statistics (every copy computed); the fit
    and its scores are bit for bit the same for any order of the input, one row per input."""
    rng = np.random.default_rng(9)
    distinct = sample_hmm(rng, 12, k=3, v=4, min_len=1, max_len=9)
    seqs = [distinct[i] for i in rng.integers(0, len(distinct), size=90)]
    n_distinct = len({s.tobytes() for s in seqs})
    training = training_buckets(seqs, 40)
    assert sum(b.n_sequences for b in training.buckets) == n_distinct < len(seqs)
    assert sum(float(b.weights.sum()) for b in training.buckets) == len(seqs)
    assert training.n_tokens == sum(len(s) for s in seqs)
    model = HMM(3, max_iter=3, seed=0, fast_estep=False).fit(seqs)
    stats, lp = model.model_._do_estep(np.concatenate(seqs).reshape(-1, 1), np.array([len(s) for s in seqs]))
    lp2, start, trans, obs = bucket_stats(model.startprob_, model.transmat_, model.emissionprob_, training)
    assert lp2 == pytest.approx(lp, rel=1e-12)
    for got, want in ((start, stats["start"]), (trans, stats["trans"]), (obs, stats["obs"])):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)

    order = rng.permutation(len(seqs))
    fit = HMM(3, max_iter=30, tol=0.0, n_init=2, seed=1).fit(seqs)
    shuffled = HMM(3, max_iter=30, tol=0.0, n_init=2, seed=1).fit([seqs[i] for i in order])
    assert fit.objective_history_ == shuffled.objective_history_
    for attr in ("startprob_", "transmat_", "emissionprob_"):
        np.testing.assert_array_equal(getattr(fit, attr), getattr(shuffled, attr))
    scores = fit.score_samples(seqs)
    assert scores.shape == (len(seqs),)
    # the training log-likelihood read from the buckets: every copy counted, any input order
    assert fit.train_log_likelihood_ == shuffled.train_log_likelihood_
    assert fit.train_log_likelihood_ == pytest.approx(float(scores.sum()), rel=1e-13)
    assert training_log_likelihood(
        fit.startprob_, fit.transmat_, fit.emissionprob_, training
    ) == pytest.approx(float(scores.sum()), rel=1e-13)
    np.testing.assert_array_equal(shuffled.score_samples([seqs[i] for i in order]), scores[order])
    one_by_one = np.array([fit.score_samples([s])[0] for s in seqs])
    np.testing.assert_allclose(scores, one_by_one, rtol=1e-13)
    proba, paths = fit.predict_next_proba(seqs), fit.decode(seqs)
    assert proba.shape == (len(seqs), 4) and len(paths) == len(seqs)
    for i in range(0, len(seqs), 7):
        np.testing.assert_allclose(proba[i], fit.predict_next_proba([seqs[i]])[0], rtol=1e-13)
        np.testing.assert_array_equal(paths[i], fit.decode([seqs[i]])[0])
    paths[0][:] = -1  # each copy its own array
    assert all((p >= 0).all() for p in paths[1:])
