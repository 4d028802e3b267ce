"""Per-sequence results of a fitted model (score_samples, posterior, log_marginal_is,
predict_next_proba, decode) run one route: the held-out E-step on partition workers, one
partition in this process by default. They equal the E-step run here on the model's own buckets,
the partitioned route on one partition (bitwise), and other partitionings to the last bits. A
sequence holding a symbol a point-estimated B forbids scores -inf, is left out of the E-step,
and has no posterior."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from ldhmm import ParameterSharing, VariantHMM
from ldhmm.baselines import VBHMM
from ldhmm.inference import make_buckets
from ldhmm.inference.cavi.e_step_totals import e_step
from ldhmm.inference.cavi.posterior import (
    bucket_posterior,
    log_marginal_is,
    next_symbol_proba,
    stack_posterior,
    viterbi_paths,
)
from ldhmm.inference.cavi.sequence_starts import held_out_starts
from ldhmm.inference.copies import collapse_copies
from ldhmm.inference.distributed import workers
from ldhmm.models import LDHMM


def _data(seed, n, V, top=None):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, V if top is None else top, size=int(rng.integers(1, 20))) for _ in range(n)]


TRAIN, HELD = _data(0, 60, 6), _data(1, 35, 6)
MODELS = {
    "pf-dense": lambda: LDHMM(3, seed=0, max_iter=3, n_init=1),
    "ff-sparse": lambda: LDHMM(3, guide="ff", seed=0, max_iter=3, n_init=1, emission_layout="sparse"),
    "vbhmm": lambda: VBHMM(2, seed=0, max_iter=3, n_init=1),
    "float32-small-buckets": lambda: LDHMM(2, seed=1, max_iter=3, n_init=1, dtype="float32", bucket_cells=50),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def fitted(request):
    return MODELS[request.param]().fit(TRAIN)


def _e_step_here(model, seqs, positions=None):
    """The held-out E-step (its starts: ``held_out_starts``) on the model's buckets of ``seqs``,
    in this test: what the estimator computed itself before scoring moved to the partition
    workers. Where the model computes identical sequences once (its default since v6), the
    buckets hold the distinct sequences in their canonical order, random starts hashed from
    their content; else every sequence, its random starts hashed from its input position
    (``positions``; default 0..M-1).

    Returns (buckets, states, take): the buckets' ``index`` names rows, ``take`` (M,) is each
    input sequence's row."""
    once = model.fit_settings.resolved().identical_sequences == "once"
    copies = collapse_copies(seqs) if once else None
    rows = copies.distinct if once else seqs
    buckets = make_buckets(
        rows, max_cells=model.bucket_cells, sparse=model.sparse_emissions, n_symbols=model.n_symbols_
    )
    take = np.arange(len(seqs)) if positions is None else np.asarray(positions, dtype=np.int64)
    if once:
        take = copies.inverse
        for b in buckets:
            b.start_keys = torch.from_numpy(copies.keys)[b.index]
    elif positions is not None:
        for b in buckets:
            b.index = torch.as_tensor(take[b.index.numpy()])
    states, _ = e_step(
        buckets,
        model.params_,
        model.guide,
        None,
        max_iter=model.e_step_max_iter,
        tol=model.e_step_tol,
        starts=held_out_starts(model.guide, model.random_starts),
    )
    return buckets, states, take


def _same_posterior(got, expected):
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(got[name], value, err_msg=name)
        else:
            for a, b in zip(got[name], value, strict=True):
                np.testing.assert_array_equal(a, b, err_msg=name)


def test_every_result_is_the_e_step_on_the_models_buckets(fitted):
    model, seqs = fitted, HELD
    buckets, states, take = _e_step_here(model, seqs)
    n = len(seqs) + 1  # rows are at most the inputs
    score, nxt = np.empty(n), np.empty((n, model.n_symbols_))
    rows, paths = [None] * n, [None] * n
    for b, st in zip(buckets, states):
        index = b.index.numpy()
        score[index] = st.elbo.double().numpy()
        nxt[index] = next_symbol_proba(model.params_, model.guide, b, st)
        for row, values in bucket_posterior(model.params_, model.guide, b, st):
            rows[index[row]] = values
        for i, path in zip(index, viterbi_paths(model.params_, b, st)):
            paths[i] = path
    with torch.random.fork_rng():
        torch.manual_seed(4)
        values = log_marginal_is(model.params_, buckets, states, 6, model.bucket_cells)
    sampled = np.empty(n)
    for b, v in zip(buckets, values):
        sampled[b.index.numpy()] = v
    score, nxt, sampled = score[take], nxt[take], sampled[take]
    rows, paths = [rows[t] for t in take], [paths[t] for t in take]

    np.testing.assert_array_equal(model.score_samples(seqs), score)
    _same_posterior(model.posterior(seqs), stack_posterior(rows, model.params_, model.sparse_emissions))
    np.testing.assert_array_equal(model.log_marginal_is(seqs, n_samples=6, seed=4), sampled)
    np.testing.assert_array_equal(model.predict_next_proba(seqs), nxt)
    for a, b in zip(model.decode(seqs), paths, strict=True):
        np.testing.assert_array_equal(a, b)
    assert np.isfinite(score).all() and np.allclose(nxt.sum(1), 1.0)


def test_one_partition_is_the_default_route_bitwise(fitted):
    model, seqs = fitted, HELD
    np.testing.assert_array_equal(model.score_samples(seqs, n_partitions=1), model.score_samples(seqs))
    _same_posterior(model.posterior(seqs, n_partitions=1), model.posterior(seqs))
    np.testing.assert_array_equal(
        model.log_marginal_is(seqs, n_samples=5, seed=2, n_partitions=1),
        model.log_marginal_is(seqs, n_samples=5, seed=2),
    )


@pytest.mark.parametrize("n_partitions", [2, 5])
def test_partitioning_changes_nothing_beyond_rounding(fitted, n_partitions):
    model, seqs = fitted, HELD
    rtol = 1e-5 if model.dtype == "float32" else 1e-12
    one, many = model.posterior(seqs), model.posterior(seqs, n_partitions=n_partitions)
    np.testing.assert_allclose(model.score_samples(seqs, n_partitions=n_partitions), one["elbo"], rtol=rtol)
    for name, value in one.items():
        for a, b in zip(many[name], value, strict=True):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-300, err_msg=name)


# ---- a symbol the model forbids --------------------------------------------------------------


@pytest.fixture(scope="module")
def point_B():
    """Point-estimated B fitted on symbols 0..2 of 4: symbol 3 has probability 0 in every state."""
    model = VariantHMM(2, n_symbols=4, sharing=ParameterSharing(B="point"), seed=0, max_iter=4, n_init=1)
    model.fit(_data(2, 40, 4, top=3))
    assert torch.isneginf(model.params_.log_point["B"][:, 3]).all()
    return model


def _mixed():
    """Held-out sequences over 0..2, with symbol 3 in sequence 1 (long) and 4 (short: first in
    bucket order)."""
    seqs = _data(3, 24, 4, top=3)
    seqs[1] = np.array([0, 1, 2, 0, 1, 3, 0, 1, 2, 2, 1, 0, 0, 1])
    seqs[4] = np.array([3, 2])
    return seqs


def test_a_forbidden_symbol_scores_minus_inf_outside_the_e_step(point_B, monkeypatch):
    model, seqs = point_B, _mixed()
    bad = np.zeros(len(seqs), dtype=bool)
    bad[[1, 4]] = True
    ran = []

    def recording_e_step(buckets, *args, **kwargs):
        ran.extend(int(n) for b in buckets for n in b.lengths)
        return e_step(buckets, *args, **kwargs)

    monkeypatch.setattr(workers, "e_step", recording_e_step)
    scores = model.score_samples(seqs)
    possible = [seqs[i] for i in np.flatnonzero(~bad)]
    if model.fit_settings.resolved().identical_sequences == "once":
        possible = collapse_copies(possible).distinct  # each computed once
    assert sorted(ran) == sorted(len(s) for s in possible)  # only the possible ones
    monkeypatch.undo()
    assert np.isneginf(scores[bad]).all() and np.isfinite(scores[~bad]).all()
    # the others: the E-step of their own buckets (without the impossible ones), each at its
    # input position
    kept = np.flatnonzero(~bad)
    buckets, states, take = _e_step_here(model, [seqs[i] for i in kept], positions=kept)
    expected = np.empty(len(seqs))
    for b, st in zip(buckets, states):
        expected[b.index.numpy()] = st.elbo.double().numpy()
    np.testing.assert_array_equal(scores[kept], expected[take])
    np.testing.assert_array_equal(model.score_samples(seqs, n_partitions=1), scores)
    three = model.score_samples(seqs, n_partitions=3)
    assert np.isneginf(three[bad]).all()
    np.testing.assert_allclose(three[~bad], scores[~bad], rtol=1e-12)
    np.testing.assert_array_equal(model.score_samples([seqs[1], np.array([3])]), [-np.inf, -np.inf])


@pytest.mark.parametrize("n_partitions", [None, 1])
def test_a_forbidden_symbol_has_no_posterior(point_B, n_partitions):
    """The first such sequence in the input order is named, with its first such symbol."""
    model, seqs = point_B, _mixed()
    message = (
        "sequence 1 holds symbol 3 (event 6), to which the model's point-estimated B gives probability 0 in "
        "every state (unseen in training; fit with a pseudocount > 0): it has no posterior"
    )
    calls = [
        lambda: model.posterior(seqs, n_partitions=n_partitions),
        lambda: model.log_marginal_is(seqs, n_samples=3, n_partitions=n_partitions),
    ]
    if n_partitions is None:
        calls += [lambda: model.predict_next_proba(seqs), lambda: model.decode(seqs)]
    for call in calls:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            call()
