"""LDHMM with contextual emissions (issue 47): the context table, the bound against brute force
over all hidden paths, log p(x) exactly, monotone EM, re-scoring, recovery, next-event."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from scipy.special import gammaln, logsumexp

from ldhmm.baselines.markov_smoothed import SmoothedMarkovChain
from ldhmm.cli import main
from ldhmm.experiments.lineup import resolve_models
from ldhmm.inference.cavi.context_vem import (
    best_of_starts,
    context_batch,
    count_table,
    e_step,
    expected_logs,
    log_hyperprior,
    m_step,
    position_potentials,
    prior_at_pairs,
)
from ldhmm.inference.cavi.kernels.dirichlet_multinomial import table_sums
from ldhmm.inference.contexts import (
    ContextTable,
    backoff_pseudocounts,
    build_context_table,
    chain_pseudocounts,
    check_emission_context,
    context_ids,
)
from ldhmm.inference.ops.dirichlet import MAX_CONCENTRATION, MIN_CONCENTRATION
from ldhmm.modelfiles import load_model
from ldhmm.models import LDHMM
from ldhmm.models.contextual import ContextualLDHMM
from ldhmm.models.contextual_hmm import ContextualHMM
from ldhmm.models.registry import get_spec

torch.set_default_dtype(torch.float64)


# ------------------------------------------------------------------ the context table
def test_previous_event_contexts_are_the_previous_symbol_and_begin():
    seqs = [np.array([2, 0, 1, 1]), np.array([1])]
    table = build_context_table(seqs, 1, 3)
    assert table.n_contexts == 4
    ids = context_ids(seqs, table)
    assert ids[0].tolist() == [3, 2, 0, 1] and ids[1].tolist() == [3]


def _longest_kept_suffix(seq, t, order, V, kept_by_order):
    history = [V] * order + list(seq[:t])
    best = ("1", history[-1])
    for n in range(2, order + 1):
        h = tuple(history[-n:])
        if h in kept_by_order[n]:
            best = (str(n), h)
    return best


@pytest.mark.parametrize("order, min_count", [(2, 1), (3, 2), (3, 5)])
def test_backed_off_contexts_match_a_direct_count(order, min_count):
    rng = np.random.default_rng(order * 10 + min_count)
    V = 3
    seqs = [rng.integers(0, V, size=rng.integers(1, 9)) for _ in range(30)]
    counts = {n: {} for n in range(2, order + 1)}
    for s in seqs:
        history = [V] * order + list(s)
        for t in range(len(s)):
            for n in range(2, order + 1):
                h = tuple(history[order + t - n : order + t])
                counts[n][h] = counts[n].get(h, 0) + 1
    kept = {n: {h for h, c in counts[n].items() if c >= min_count} for n in counts}
    table = build_context_table(seqs, order, V, min_count)
    assert table.n_contexts == V + 1 + sum(len(k) for k in kept.values())
    ids = context_ids(seqs, table)
    # two positions share a row exactly when their longest kept suffixes are the same
    rows = {}
    for s, row_ids in zip(seqs, ids):
        for t in range(len(s)):
            key = _longest_kept_suffix(s, t, order, V, kept)
            assert rows.setdefault(key, int(row_ids[t])) == int(row_ids[t])
    assert len(set(rows.values())) == len(rows)
    again = ContextTable.from_json(table.to_json(), V)
    assert [k.tolist() for k in again.keys] == [k.tolist() for k in table.keys]


@pytest.mark.parametrize("bad", ["next", 0, 9, True, 1.5])
def test_bad_emission_context_is_one_line(bad):
    with pytest.raises(ValueError, match="emission_context must be None, 'previous' or an order"):
        check_emission_context(bad)
    with pytest.raises(ValueError, match="emission_context"):
        ContextualLDHMM(2, emission_context=bad)


def test_a_context_table_from_a_file_is_checked():
    table = build_context_table([np.array([0, 1, 1])], 2, 2, 1)
    record = table.to_json()
    with pytest.raises(ValueError, match="order-1 keys must be 0..V"):
        ContextTable.from_json({**record, "keys": [[0, 1], *record["keys"][1:]]}, 2)
    with pytest.raises(ValueError, match="order-2 keys not sorted"):
        ContextTable.from_json({**record, "keys": [record["keys"][0], [5, 3]]}, 2)


# ------------------------------------------------------------------ brute force
def _paths(K, T):
    return itertools.product(range(K), repeat=T)


def _dense_counts(path, seq, ctx, K, C, V):
    n_pi, n_A, n_B = np.zeros(K), np.zeros((K, K)), np.zeros((K, C, V))
    n_pi[path[0]] += 1
    for t in range(1, len(seq)):
        n_A[path[t - 1], path[t]] += 1
    for t, (x, c) in enumerate(zip(seq, ctx)):
        n_B[path[t], c, x] += 1
    return n_pi, n_A, n_B


def _log_beta_gain(a, n):
    g = a + n
    return float((gammaln(g).sum(-1) - gammaln(a).sum(-1) - gammaln(g.sum(-1)) + gammaln(a.sum(-1))).sum())


def _random_prior(rng, K, C, V):
    return {
        "pi": rng.gamma(2.0, 1.0, K) + 0.2,
        "A": rng.gamma(2.0, 1.0, (K, K)) + 0.2,
        "B": rng.gamma(2.0, 1.0, (K, C, V)) + 0.2,
    }


def _torch(prior):
    return {g: torch.from_numpy(v) for g, v in prior.items()}


@pytest.mark.parametrize("K, T, seed", [(2, 1, 0), (2, 5, 1), (3, 4, 2), (3, 6, 3), (2, 6, 4)])
def test_bound_and_marginals_equal_brute_force_over_all_hidden_paths(K, T, seed):
    """At any q(theta): the chain's log Z, marginals and the collapsed bound of the counts it
    gives, against enumeration of all K^T paths with dense (K, C, V) rows."""
    rng = np.random.default_rng(seed)
    V = 3
    seq = rng.integers(0, V, size=T)
    table = build_context_table([seq], 1, V)
    ctx = context_ids([seq], table)[0]
    C = table.n_contexts
    prior = _random_prior(rng, K, C, V)
    batch = context_batch([seq], [ctx], [0], V)
    # an arbitrary q(theta): the counts of a random soft path
    start = e_step(_torch(prior), batch, None, 1, 0.0).counts
    start = {g: v * float(rng.uniform(0.5, 2.0)) for g, v in start.items()}
    res = e_step(_torch(prior), batch, start, 1, 0.0)
    # brute force: q(z) over all paths under E log theta of q(theta) = Dir(prior + start)
    elog = expected_logs(_torch(prior), start, batch, prior_at_pairs(_torch(prior)["B"], batch))
    pot = position_potentials(elog["B"], batch)[0].numpy()  # (T, K)
    e_pi, e_A = elog["pi"][0].numpy(), elog["A"][0].numpy()
    paths = list(_paths(K, T))
    scores = np.array(
        [
            e_pi[p[0]] + sum(e_A[p[t - 1], p[t]] for t in range(1, T)) + sum(pot[t, p[t]] for t in range(T))
            for p in paths
        ]
    )
    q = np.exp(scores - logsumexp(scores))
    marg = np.zeros((T, K))
    n = [np.zeros(K), np.zeros((K, K)), np.zeros((K, C, V))]
    for w, p in zip(q, paths):
        for t in range(T):
            marg[t, p[t]] += w
        for acc, c in zip(n, _dense_counts(p, seq, ctx, K, C, V)):
            acc += w * c
    entropy = -float((q * np.log(q)).sum())
    bound = entropy + sum(_log_beta_gain(prior[g], c) for g, c in zip(("pi", "A", "B"), n))
    np.testing.assert_allclose(res.marginals[0].numpy(), marg, atol=1e-10)
    np.testing.assert_allclose(res.bounds.item(), bound, rtol=1e-10, atol=1e-10)


def _exact_log_marginal(seq, ctx, prior, K, C, V) -> float:
    """``log p(x) = log sum_z prod_rows B(a + n(z)) / B(a)``: theta integrated exactly per path."""
    terms = []
    for p in _paths(K, len(seq)):
        counts = _dense_counts(p, seq, ctx, K, C, V)
        terms.append(sum(_log_beta_gain(prior[g], c) for g, c in zip(("pi", "A", "B"), counts)))
    return float(logsumexp(terms))


@pytest.mark.parametrize("seed", range(4))
def test_the_score_never_exceeds_log_p_x(seed):
    rng = np.random.default_rng(100 + seed)
    V, K = 3, int(rng.integers(2, 4))
    train = [rng.integers(0, V, size=rng.integers(2, 7)) for _ in range(25)]
    model = ContextualLDHMM(K, n_symbols=V, seed=seed, max_iter=15).fit(train)
    held = [rng.integers(0, V, size=rng.integers(1, 6)) for _ in range(6)]
    scores = model.score_samples(held)
    prior = {"pi": model.alpha_pi_, "A": model.alpha_A_, "B": model.beta_}
    ids = context_ids(held, model.context_table_)
    for s, c, score in zip(held, ids, scores):
        exact = _exact_log_marginal(s, c, prior, K, model.context_table_.n_contexts, V)
        assert score <= exact + 1e-9
        assert score >= exact - 5.0  # a bound, not a wild number


# ------------------------------------------------------------------ fits
def _draw(rng, prior, table, n, lengths, V):
    """Sequences from the contextual model with priors ``prior`` (pi, A, B per sequence)."""
    K = prior["pi"].shape[0]
    out = []
    for _ in range(n):
        pi = rng.dirichlet(prior["pi"])
        A = np.array([rng.dirichlet(r) for r in prior["A"]])
        B = np.array([[rng.dirichlet(r) for r in rows] for rows in prior["B"]])
        seq, z = [], rng.choice(K, p=pi)
        for _t in range(int(rng.integers(*lengths))):
            c = context_ids([np.array([*seq, 0])], table)[0][-1]
            seq.append(int(rng.choice(V, p=B[z, c])))
            z = rng.choice(K, p=A[z])
        out.append(np.array(seq))
    return out


def _truth(V=4, K=2):
    table = build_context_table([np.arange(V)], 1, V)
    C = table.n_contexts
    # each (state, previous event) row prefers one symbol; the states differ
    B = np.full((K, C, V), 0.3)
    for k in range(K):
        for c in range(C):
            B[k, c, (c + k) % V] += 6.0
    prior = {"pi": np.full(K, 2.0), "A": np.full((K, K), 1.0) + 6.0 * np.eye(K), "B": B * 3.0}
    return prior, table


@pytest.mark.parametrize("seed", range(3))
def test_em_never_lowers_the_bound_and_rescoring_gives_the_training_elbo(seed):
    prior, table = _truth()
    rng = np.random.default_rng(seed)
    train = _draw(rng, prior, table, 80, (3, 20), 4)
    model = ContextualLDHMM(
        2, n_symbols=4, seed=seed, tol=1e-6, context_smoothing=[0.0, 1.0, "chain"][seed]
    ).fit(train)
    h = np.asarray(model.elbo_history_)
    assert np.all(np.diff(h) >= -1e-9 * np.abs(h[1:]))
    tokens = sum(len(s) for s in train)
    assert abs(model.score(train) - model.elbo_) / tokens < 0.005


# ------------------------------------------------------------------ the context smoothing
def test_backoff_pseudocounts_are_mackay_petos_interpolation_by_a_direct_count():
    rng = np.random.default_rng(3)
    V, s = 3, 2.5
    seqs = [rng.integers(0, V, size=rng.integers(1, 12)) for _ in range(60)]
    table = build_context_table(seqs, 2, V, min_count=8)
    pseudo = backoff_pseudocounts(seqs, table, s)
    assert pseudo.shape == (table.n_contexts, V) and np.all(pseudo > 0)
    np.testing.assert_allclose(pseudo.sum(1), s)
    # by hand: order 1 -> the add-one unigram; a kept pair (a, b) ("b then a", a the most recent)
    # -> the interpolated distribution after a: (n_av + s u_v) / (n_a + s)
    flat = np.concatenate(seqs)
    u = (np.bincount(flat, minlength=V) + 1.0) / (flat.size + V)
    np.testing.assert_allclose(pseudo[: V + 1], s * np.tile(u, (V + 1, 1)))
    after = np.zeros((V + 1, V))  # after[a, v]: v right after a (a = V: at the start)
    for q in seqs:
        for t, v in enumerate(q):
            after[q[t - 1] if t else V, v] += 1
    for j, key in enumerate(table.keys[1]):
        a = key % (V + 1)
        want = (after[a] + s * u) / (after[a].sum() + s)
        np.testing.assert_allclose(pseudo[table.offsets[1] + j], s * want)
    assert not backoff_pseudocounts(seqs, table, 0.0).any()


def test_chain_pseudocounts_are_the_markov_baselines_interpolation():
    rng = np.random.default_rng(8)
    V = 4
    seqs = [rng.integers(0, V, size=rng.integers(1, 15)) for _ in range(80)]
    table = build_context_table(seqs, 2, V, min_count=10)
    assert table.keys[1].size > 3
    pseudo, betas = chain_pseudocounts(seqs, table)
    # the strengths: the order-2 chain's, chosen on the same data
    np.testing.assert_allclose(betas, SmoothedMarkovChain(order=2, n_symbols=V).fit(seqs).concentrations_)
    # order-1 rows: beta_1 times the order-0 chain's distribution (the unigram towards uniform)
    p0 = SmoothedMarkovChain(order=0, n_symbols=V, concentrations=betas[:1]).fit(seqs)
    np.testing.assert_allclose(pseudo[: V + 1], betas[1] * p0.predict_next_proba([np.array([0])] * (V + 1)))
    # order-2 rows (b, a), a the last event: beta_2 times the order-1 chain's row after a
    p1 = SmoothedMarkovChain(order=1, n_symbols=V, concentrations=betas[:2]).fit(seqs)
    last = table.keys[1] % (V + 1)
    events = last < V  # (BEGIN, BEGIN), the first position's history, has no prefix to predict from
    assert events.sum() > 3
    want = betas[2] * p1.predict_next_proba([np.array([a]) for a in last[events]])
    np.testing.assert_allclose(pseudo[V + 1 :][events], want)
    # as a model setting: one state with its rows tied by the chain predicts near the chain (not
    # equal: a backed-off row counts only the positions no longer row took, and rows need not sit
    # at the cap), and its objective never decreases
    one = ContextualLDHMM(1, n_symbols=V, emission_context=2, min_context_count=10, context_smoothing="chain")
    chain = SmoothedMarkovChain(order=2, n_symbols=V).fit(seqs)
    prefixes = [np.array([1, 2]), np.array([3]), np.array([0, 0, 1])]
    close = np.abs(one.fit(seqs).predict_next_proba(prefixes) - chain.predict_next_proba(prefixes)).max()
    assert close < 0.15, close
    assert np.all(np.diff(one.elbo_history_) >= -1e-9 * np.abs(one.elbo_history_[1:]))


def test_the_smoothed_m_step_maximizes_the_bound_plus_the_log_hyperprior():
    rng = np.random.default_rng(0)
    V, K = 3, 2
    seqs = [rng.integers(0, V, size=rng.integers(2, 9)) for _ in range(25)]
    table = build_context_table(seqs, 1, V)
    batch = context_batch(seqs, context_ids(seqs, table), np.arange(len(seqs)), V)
    C = table.n_contexts
    prior = {"pi": torch.full((K,), 1.0), "A": torch.full((K, K), 1.0), "B": torch.full((K, C, V), 0.7)}
    res = e_step(prior, batch, None, 3, 1e-9)
    pseudo = backoff_pseudocounts(seqs, table, 1.5)
    counts = count_table([res.counts], [batch], (K, C, V), pseudo)
    plain = count_table([res.counts], [batch], (K, C, V))

    def objective(B):  # the B part of the collapsed bound plus the log hyperprior, from the tables
        sums = table_sums(plain, {"B": B.reshape(K * C, V)})["B"]
        return sums[0][0].sum() - sums[1][0].sum() + log_hyperprior(torch.from_numpy(B), pseudo)

    # the table with the pseudo-sequence holds exactly the hyperprior's terms
    B0 = prior["B"].numpy()
    with_pseudo = table_sums(counts, {"B": B0.reshape(K * C, V)})["B"]
    np.testing.assert_allclose(with_pseudo[0][0].sum() - with_pseudo[1][0].sum(), objective(B0), rtol=1e-12)
    # by scipy's gammaln: log B(b + s) - log B(b) summed over rows
    b, sc = B0, pseudo[None]
    direct = (
        gammaln(b + sc).sum(-1) - gammaln(b).sum(-1) - gammaln((b + sc).sum(-1)) + gammaln(b.sum(-1))
    ).sum()
    assert log_hyperprior(prior["B"], pseudo) == pytest.approx(direct, rel=1e-12)
    # M-steps from there (the optimum of rows with little data is at the cap): each one at
    # least as high, higher than the unsmoothed M-step's priors, and scipy's bounded L-BFGS
    # started there finds nothing higher
    current, values = prior, [objective(B0)]
    for _ in range(8):
        current, _ = m_step(current, counts)
        values.append(objective(current["B"].numpy()))
    assert np.all(np.diff(values) >= -1e-12 * abs(values[-1]))
    unsmoothed = prior
    for _ in range(8):
        unsmoothed, _ = m_step(unsmoothed, plain)
    assert values[-1] > objective(unsmoothed["B"].numpy()) + 1e-3
    B1 = current["B"].numpy()
    bounds = [(np.log(MIN_CONCENTRATION), np.log(MAX_CONCENTRATION))] * B1.size
    best = minimize(lambda x: -objective(np.exp(x).reshape(B1.shape)), np.log(B1).ravel(), bounds=bounds)
    assert -best.fun <= values[-1] + 1e-6 * abs(values[-1])


def test_the_smoothing_keeps_an_event_never_seen_after_a_context_possible():
    rng = np.random.default_rng(1)
    V = 3
    # symbol 2 never follows symbol 0 in training (0 is always followed by 1)
    train = []
    for _ in range(120):
        q = [int(rng.integers(0, V))]
        while len(q) < 10:
            q.append(1 if q[-1] == 0 else int(rng.integers(0, V)))
        train.append(np.array(q))
    prefix = [np.array([1, 2, 0])]
    plain = ContextualLDHMM(2, n_symbols=V, context_smoothing=0.0, seed=0).fit(train)
    smoothed = ContextualLDHMM(2, n_symbols=V, context_smoothing=1.0, seed=0).fit(train)
    n_after_0 = sum(int(np.sum(q[:-1] == 0)) for q in train)
    u2 = (sum(int(np.sum(q == 2)) for q in train) + 1.0) / (sum(len(q) for q in train) + V)
    floor = smoothed.context_smoothing * u2 / (n_after_0 + smoothed.context_smoothing)
    p_smoothed = smoothed.predict_next_proba(prefix)[0, 2]
    p_plain = plain.predict_next_proba(prefix)[0, 2]
    assert p_smoothed > 0.1 * floor and p_plain < 0.01 * floor
    # the point variant (Baum-Welch, MAP) the same way
    for smoothing, holds in ((0.0, lambda p: p < 0.01 * floor), (1.0, lambda p: p > 0.1 * floor)):
        point = ContextualHMM(2, n_symbols=V, emission_pseudocount=0.0, context_smoothing=smoothing, seed=0)
        assert holds(point.fit(train).predict_next_proba(prefix)[0, 2]), smoothing
    assert np.all(np.diff(point.objective_history_) >= -1e-9 * np.abs(point.objective_history_[1:]))
    # and the training bound is still what re-scoring gives
    tokens = sum(len(q) for q in train)
    assert abs(smoothed.score(train) - smoothed.elbo_) / tokens < 0.005


def test_data_from_the_variant_is_recovered():
    prior, table = _truth()
    rng = np.random.default_rng(5)
    train = _draw(rng, prior, table, 300, (5, 30), 4)
    held = _draw(rng, prior, table, 100, (5, 30), 4)
    model = ContextualLDHMM(2, n_symbols=4, seed=0).fit(train)
    truth = ContextualLDHMM(2, n_symbols=4).fit(train[:2])  # a fitted shell, then the true priors
    truth.context_table_ = table
    truth.alpha_pi_, truth.alpha_A_, truth.beta_ = prior["pi"], prior["A"], prior["B"]
    tokens = sum(len(s) for s in held)
    gap = (truth.score(held) - model.score(held)) / tokens
    assert gap < 0.02, gap
    # and the context matters: LDHMM-PF, whose emissions ignore it, scores lower on the same data
    plain = LDHMM(2, n_symbols=4, seed=0).fit(train)
    assert (model.score(held) - plain.score(held)) / tokens > 0.1
    # an order-3 table that keeps no longer history is the order-1 model (with a smoothing of
    # its own: "chain" takes the strengths of the chain of the table's order)
    backed_off = ContextualLDHMM(
        2, n_symbols=4, seed=0, emission_context=3, min_context_count=10**9, context_smoothing=1.0
    ).fit(train)
    assert backed_off.context_table_.n_contexts == 5
    order_one = ContextualLDHMM(2, n_symbols=4, seed=0, context_smoothing=1.0).fit(train)
    assert backed_off.elbo_history_ == order_one.elbo_history_


def test_next_event_probabilities_are_the_posterior_means():
    prior, table = _truth()
    rng = np.random.default_rng(7)
    train = _draw(rng, prior, table, 60, (3, 15), 4)
    model = ContextualLDHMM(2, n_symbols=4, seed=0).fit(train)
    prefixes = [s[:-1] for s in train[:5] if len(s) > 1]
    p = model.predict_next_proba(prefixes)
    assert p.shape == (len(prefixes), 4) and np.allclose(p.sum(1), 1.0)
    # one prefix by hand: q(z_n) A-mean, then the B-mean row of its last event
    s = prefixes[0]
    ids = context_ids([s], model.context_table_)[0]
    batch = context_batch([s], [ids], [0], 4)
    pri = {
        "pi": torch.from_numpy(model.alpha_pi_),
        "A": torch.from_numpy(model.alpha_A_),
        "B": torch.from_numpy(model.beta_),
    }
    res = e_step(pri, batch, None, 200, 1e-9)
    gA = model.alpha_A_ + res.counts["A"][0].numpy()
    q_next = res.marginals[0, len(s) - 1].numpy() @ (gA / gA.sum(1, keepdims=True))
    B = model.beta_[:, int(s[-1]), :].copy()
    for slot in range(batch.pair_context.shape[1]):
        if int(batch.pair_context[0, slot]) == int(s[-1]):
            B[:, int(batch.pair_symbol[0, slot])] += res.counts["B"][0, :, slot].numpy()
    expected = q_next @ (B / B.sum(1, keepdims=True))
    np.testing.assert_allclose(p[0], expected / expected.sum(), rtol=1e-9)


def test_importance_sampled_log_p_x_reaches_the_exact_value():
    rng = np.random.default_rng(3)
    V, K = 3, 2
    model = ContextualLDHMM(K, n_symbols=V).fit([np.array([0, 1, 2])])  # a fitted shell
    C = model.context_table_.n_contexts
    prior = _random_prior(rng, K, C, V)  # a prior far from collapse: the bound is loose
    model.alpha_pi_, model.alpha_A_, model.beta_ = prior["pi"], prior["A"], prior["B"]
    held = [np.array([0, 2, 2, 1]), np.array([1]), np.array([2, 2, 0])]
    ids = context_ids(held, model.context_table_)
    exact = np.array([_exact_log_marginal(s, c, prior, K, C, V) for s, c in zip(held, ids)])
    bound = model.score_samples(held)
    assert np.all(bound <= exact + 1e-9) and np.all(exact - bound > 0.05)
    estimate = model.log_marginal_is(held, n_samples=200_000, seed=1)
    np.testing.assert_allclose(estimate, exact, atol=0.03)
    assert np.array_equal(estimate, model.log_marginal_is(held, n_samples=200_000, seed=1))


def test_a_saved_model_scores_the_same_and_bad_files_are_one_line(tmp_path):
    prior, table = _truth()
    train = _draw(np.random.default_rng(11), prior, table, 40, (3, 12), 4)
    model = ContextualLDHMM(2, n_symbols=4, emission_context=2, min_context_count=3, seed=0).fit(train)
    path = tmp_path / "ctx.json"
    model.save(path, vocabulary=["a", "b", "c", "d"])
    again = load_model(path)
    assert isinstance(again, ContextualLDHMM) and again.vocabulary_ == ["a", "b", "c", "d"]
    assert np.array_equal(again.score_samples(train), model.score_samples(train))
    assert np.array_equal(again.predict_next_proba(train[:3]), model.predict_next_proba(train[:3]))
    doc = json.loads(path.read_text())
    for field, value, message in [
        ("prior", {**doc["prior"], "B": doc["prior"]["A"]}, "field 'prior.B': shape"),
        ("prior", {**doc["prior"], "pi": [float("nan"), 1.0]}, "field 'prior.pi': concentrations"),
        ("contexts", {**doc["contexts"], "order": 9}, "field 'contexts'"),
        ("config", {**doc["config"], "emission_context": "next"}, "field 'config': emission_context"),
        ("vocabulary", ["a", "a", "c", "d"], "field 'vocabulary'"),
    ]:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({**doc, field: value}))
        with pytest.raises(ValueError, match=message) as err:
            load_model(bad)
        assert "\n" not in str(err.value)


def test_fit_command_writes_a_contextual_model_and_refuses_what_it_lacks(tmp_path, capsys):
    prior, table = _truth()
    train = _draw(np.random.default_rng(12), prior, table, 40, (3, 12), 4)
    log = tmp_path / "log.txt"
    log.write_text("\n".join(" ".join("abcd"[i] for i in s) for s in train) + "\n")
    out = tmp_path / "ctx.json"
    argv = ["fit", str(log), "--states", "2", "--emission-context", "previous", "--restarts", "1"]
    assert main([*argv, "--out", str(out), "--quiet"]) == 0
    model = load_model(out)
    assert model.emission_context == "previous" and model.vocabulary_ == ["a", "b", "c", "d"]
    direct = ContextualLDHMM(2, n_symbols=4, n_init=1, seed=0).fit(train)
    assert model.elbo_history_ == direct.elbo_history_ and model.elbo_ == direct.elbo_
    smoothed = tmp_path / "ctx-s.json"
    assert main([*argv, "--context-smoothing", "0", "--out", str(smoothed), "--quiet"]) == 0
    unsmoothed = ContextualLDHMM(2, n_symbols=4, n_init=1, seed=0, context_smoothing=0.0).fit(train)
    assert load_model(smoothed).context_smoothing == 0.0
    assert load_model(smoothed).elbo_history_ == unsmoothed.elbo_history_ != direct.elbo_history_
    partitioned = tmp_path / "ctx-p.json"  # over partitions: the model's fit on the same partitions
    assert main([*argv, "--partitions", "2", "--out", str(partitioned), "--quiet"]) == 0
    two = ContextualLDHMM(2, n_symbols=4, n_init=1, seed=0).fit(train, n_partitions=2)
    assert load_model(partitioned).elbo_history_ == two.elbo_history_
    capsys.readouterr()
    for extra, message in [
        (["--emission-context", "next"], "--emission-context: expected 'previous' or an order 1..8"),
        (["--checkpoint", str(tmp_path / "ck")], "an --emission-context fit takes no --checkpoint"),
        (["--states", "2..3", "--partitions", "2"], "along K fits in this process: takes no --partitions"),
        (["--context-smoothing", "-1"], "context_smoothing must be 'chain' or a finite number >= 0"),
        # LDHMM's search settings: refused, not dropped (the fit would be another than asked)
        (["--effort", "quick"], "an --emission-context fit takes no --effort"),
        (["--seeded-start", "none", "--m-step", "paper"], "takes no --seeded-start, --m-step"),
        (["--states", "2..3", "--path-restarts", "1"], "in this process: takes no --path-restarts"),
    ]:
        assert main([*argv, *extra, "--out", str(tmp_path / "x.json")]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err


def test_the_contextual_variants_run_when_named_not_in_the_default_line_up():
    assert not {"LDHMM-PF-ctx1", "LDHMM-PF-ctx3"} & set(resolve_models(None))
    assert resolve_models(["ldhmm-pf-ctx1", "MARKOV3"]) == ["MARKOV3", "LDHMM-PF-ctx1"]
    assert get_spec("LDHMM-PF-ctx3").make(4, 17).emission_context == 3


# ------------------------------------------------------------------ the point variant
@pytest.mark.parametrize("seed", range(3))
def test_the_contextual_hmm_scores_log_p_x_exactly_and_predicts_by_it(seed):
    rng = np.random.default_rng(200 + seed)
    V, K = 3, int(rng.integers(2, 4))
    train = [rng.integers(0, V, size=rng.integers(2, 9)) for _ in range(40)]
    model = ContextualHMM(K, n_symbols=V, seed=seed, emission_context=2, min_context_count=2).fit(train)
    h = np.asarray(model.objective_history_)
    assert np.all(np.diff(h) >= -1e-9 * np.abs(h[1:]))  # Baum-Welch never lowers the MAP objective
    ids = context_ids(train[:5], model.context_table_)
    log = {"pi": np.log(model.startprob_), "A": np.log(model.transmat_), "B": np.log(model.emissionprob_)}
    for s, c, score in zip(train[:5], ids, model.score_samples(train[:5])):
        paths = [
            log["pi"][p[0]]
            + sum(log["A"][p[t - 1], p[t]] for t in range(1, len(s)))
            + sum(log["B"][p[t], c[t], s[t]] for t in range(len(s)))
            for p in _paths(K, len(s))
        ]
        assert score == pytest.approx(logsumexp(paths), abs=1e-10)
    # the next event's probability is p(prefix, v) / p(prefix)
    prefix = train[0]
    p = model.predict_next_proba([prefix])[0]
    joint = model.score_samples([np.append(prefix, v) for v in range(V)])
    np.testing.assert_allclose(p, np.exp(joint - model.score_samples([prefix])[0]), rtol=1e-9)
    assert p.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("point", [False, True])
def test_decoding_is_the_best_path_by_brute_force(point):
    rng = np.random.default_rng(31)
    V, K = 3, 3
    train = [rng.integers(0, V, size=rng.integers(2, 7)) for _ in range(30)]
    cls = ContextualHMM if point else ContextualLDHMM
    model = cls(K, n_symbols=V, seed=0, max_iter=10).fit(train)
    held = train[:4]
    paths = model.decode(held)
    ids = context_ids(held, model.context_table_)
    if point:
        logs = [
            {"pi": np.log(model.startprob_), "A": np.log(model.transmat_), "B": np.log(model.emissionprob_)}
        ] * 4
    else:
        prior = {"pi": model.alpha_pi_, "A": model.alpha_A_, "B": model.beta_}
        logs = []
        for s, c in zip(held, ids):  # posterior means of q(theta_m) after the held-out E-step
            batch = context_batch([s], [c], [0], V)
            res = best_of_starts(_torch(prior), batch, 200, 1e-9)
            n_B = np.zeros_like(model.beta_)
            for slot in range(batch.pair_context.shape[1]):
                n_B[:, int(batch.pair_context[0, slot]), int(batch.pair_symbol[0, slot])] += res.counts["B"][
                    0, :, slot
                ].numpy()
            g = {
                "pi": prior["pi"] + res.counts["pi"][0].numpy(),
                "A": prior["A"] + res.counts["A"][0].numpy(),
                "B": prior["B"] + n_B,
            }
            logs.append({k: np.log(v / v.sum(-1, keepdims=True)) for k, v in g.items()})
    for s, c, path, lg in zip(held, ids, paths, logs):
        scores = {
            p: lg["pi"][p[0]]
            + sum(lg["A"][p[t - 1], p[t]] for t in range(1, len(s)))
            + sum(lg["B"][p[t], c[t], s[t]] for t in range(len(s)))
            for p in _paths(K, len(s))
        }
        best = max(scores.values())
        assert path.dtype == np.int64 and scores[tuple(path)] == pytest.approx(best, abs=1e-9)
