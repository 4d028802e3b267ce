"""Identical sequences computed once (``identical_sequences="once"``, the default since v6):
the same numbers as computing every copy on its own with the same content-derived starts, in
any order, and one output row per input sequence."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ldhmm import LDHMM
from ldhmm.baselines.vbhmm import VBHMM
from ldhmm.inference import FFGuide, PFGuide, VariationalEM, init_parameters, make_buckets
from ldhmm.inference.copies import collapse_copies, content_keys
from ldhmm.inference.distributed.workers import LocalBackend, PartitionWorker
from ldhmm.inference.sharing import HMM_SHARING, LDHMM_SHARING
from ldhmm.models.fit_settings import EFFORT_PRESETS


def _database(seed=0, n_distinct=40, n=160, V=6):
    """Short sequences drawn with replacement from ``n_distinct`` ones: most have copies."""
    rng = np.random.default_rng(seed)
    distinct = [rng.integers(0, V, size=int(rng.integers(2, 9))).astype(np.int64) for _ in range(n_distinct)]
    return [distinct[i].copy() for i in rng.integers(0, n_distinct, size=n)]


def _each_with_content_keys(seqs, guide, V, sparse=False):
    """The reference: a worker with a row per sequence (no weights) whose random starts are
    hashed from each sequence's content, as ``"once"`` hashes them."""
    buckets = make_buckets(seqs, max_cells=64, sparse=sparse, n_symbols=V)
    keys = torch.from_numpy(content_keys(seqs))
    for b in buckets:
        b.start_keys = keys[b.index]
    return PartitionWorker(buckets, guide, V, sparse=sparse)


def test_collapse_copies_rebuilds_the_input_in_a_canonical_order():
    seqs = _database()
    copies = collapse_copies(seqs)
    assert len(copies.distinct) < len(seqs)
    assert all(np.array_equal(seqs[i], copies.distinct[r]) for i, r in enumerate(copies.inverse))
    assert copies.counts.sum() == len(seqs)
    assert np.array_equal(copies.keys, content_keys(copies.distinct))
    # the same distinct rows, in the same order, whatever the input order
    shuffled = collapse_copies([seqs[i] for i in np.random.default_rng(1).permutation(len(seqs))])
    assert all(np.array_equal(a, b) for a, b in zip(copies.distinct, shuffled.distinct))
    assert np.array_equal(copies.counts, shuffled.counts)
    # a sequence and its prefix, or two of one length, are not copies
    assert len(collapse_copies([np.array([1, 2]), np.array([1, 2, 2]), np.array([2, 1])]).distinct) == 3


@pytest.mark.parametrize("guide_cls,sparse", [(PFGuide, False), (FFGuide, False), (PFGuide, True)])
def test_weighted_sums_equal_every_copy_computed(guide_cls, sparse):
    """One E-step with every start, then the collapsed M-step's sums: the distinct rows
    weighted by their copies give the sums of the database (to rounding)."""
    seqs, V, K = _database(), 6, 3
    params = init_parameters(LDHMM_SHARING, K, V, seed=2)
    once = PartitionWorker(seqs, guide_cls(), V, sparse=sparse, bucket_cells=64, identical_sequences="once")
    each = _each_with_content_keys(seqs, guide_cls(), V, sparse)
    starts = ("prior", "mean", "random:0", "random:1")
    a, b = once.e_step(params, starts), each.e_step(params, starts)
    assert a.n_sequences == b.n_sequences == len(seqs)
    assert a.local_elbo == pytest.approx(b.local_elbo, rel=1e-12)
    for g in ("pi", "A", "B"):
        np.testing.assert_allclose(a.total_counts[g], b.total_counts[g], rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(a.sum_expected_log[g], b.sum_expected_log[g], rtol=1e-11)
    alphas = {
        g: params.prior[g].reshape(-1, params.prior[g].shape[-1]).numpy() * 1.7 for g in ("pi", "A", "B")
    }
    rows = {g: np.ones(a.shape[0], dtype=bool) for g, a in alphas.items()}
    sums_a, sums_b = once.count_sums(alphas, rows), each.count_sums(alphas, rows)
    for g in alphas:
        for x, y in zip(sums_a[g], sums_b[g]):
            np.testing.assert_allclose(x, y, rtol=1e-11, atol=1e-9)
    # per-sequence scores after the E-step: one per input, copies alike, as computed one by one
    keys_a, elbo_a = once.scores()
    keys_b, elbo_b = each.scores()
    np.testing.assert_allclose(elbo_a[np.argsort(keys_a)], elbo_b[np.argsort(keys_b)], rtol=1e-12)


@pytest.mark.parametrize("sharing", [LDHMM_SHARING, HMM_SHARING])
def test_a_fit_computing_copies_once_is_the_fit_computing_each(sharing):
    """The two routes add the same terms in other orders (weights against copies): one EM
    iteration agrees to rounding. Over more iterations the discrete decisions of a fit (each
    sequence's stopping sweep, its choice among starts, the Newton passes of the M-step) can
    turn rounding into a little more, so the whole fit is compared loosely; an error of the
    weights would be of the order of the ELBO itself."""
    seqs, V, K = _database(seed=3), 6, 3
    params = init_parameters(sharing, K, V, seed=0)

    def fit(once: bool, max_iter: int):
        if once:
            worker = PartitionWorker(seqs, PFGuide(), V, bucket_cells=64, identical_sequences="once")
        else:
            worker = _each_with_content_keys(seqs, PFGuide(), V)
        engine = VariationalEM(PFGuide(), max_iter=max_iter, tol=1e-9, start_every=1)
        return engine.fit_backend(LocalBackend([worker]), params)

    a, b = fit(True, 1), fit(False, 1)
    np.testing.assert_allclose(a.elbo_history, b.elbo_history, rtol=1e-12)
    for table in ("prior", "posterior", "log_point"):
        for g, value in getattr(a.params, table).items():
            np.testing.assert_allclose(value, getattr(b.params, table)[g], rtol=1e-9, atol=1e-12)
    a, b = fit(True, 10), fit(False, 10)
    assert len(a.elbo_history) == len(b.elbo_history)
    np.testing.assert_allclose(a.elbo_history, b.elbo_history, rtol=1e-6)
    assert all(y - x >= -1e-9 * abs(x) for x, y in zip(a.elbo_history, a.elbo_history[1:]))


def test_the_default_fit_does_not_depend_on_the_order_of_the_database():
    seqs = _database(seed=4, n=120)
    perm = np.random.default_rng(0).permutation(len(seqs))
    a = LDHMM(3, seed=0, max_iter=6).fit(seqs)
    b = LDHMM(3, seed=0, max_iter=6).fit([seqs[i] for i in perm])
    assert np.array_equal(a.elbo_history_, b.elbo_history_)  # bit for bit: the same distinct rows
    for name in ("alpha_pi_", "alpha_A_", "beta_"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    scores = a.score_samples(seqs)
    assert scores.shape == (len(seqs),)
    # copies score alike; a sequence scores the same alone as among the others
    first = {}
    for s, value in zip(seqs, scores):
        first.setdefault(s.tobytes(), value)
        assert value == first[s.tobytes()]
    assert a.score_samples([seqs[7]])[0] == pytest.approx(scores[7], rel=1e-12)
    np.testing.assert_allclose(a.score_samples([seqs[i] for i in perm]), scores[perm], rtol=1e-12)


def test_per_sequence_outputs_are_one_row_per_input():
    seqs = _database(seed=5, n=60)
    model = VBHMM(2, seed=0, max_iter=4).fit(seqs)
    assert model.identical_sequences is None and EFFORT_PRESETS["standard"]["identical_sequences"] == "once"
    paths = model.decode(seqs)
    proba = model.predict_next_proba(seqs)
    post = model.posterior(seqs)
    assert len(paths) == len(seqs) == proba.shape[0] == len(post["elbo"])
    twin = next(j for j in range(1, len(seqs)) if np.array_equal(seqs[j], seqs[0]))
    assert np.array_equal(paths[0], paths[twin]) and np.array_equal(proba[0], proba[twin])
    assert post["elbo"][0] == post["elbo"][twin]
    assert all(len(p) == len(s) for p, s in zip(paths, seqs))


def test_thorough_keeps_every_sequence_and_a_bad_setting_is_one_line():
    assert EFFORT_PRESETS["thorough"]["identical_sequences"] == "each"
    with pytest.raises(ValueError, match="identical_sequences must be None or one of"):
        LDHMM(2, identical_sequences="twice")
    with pytest.raises(ValueError, match="identical_sequences must be one of"):
        PartitionWorker([np.array([0, 1])], PFGuide(), 2, identical_sequences="twice")
