"""The Markov-chain baselines (MARKOV1, MARKOV3): exact scores against a count-by-count
reference, smoothing chosen on training data only, next-event rows, and their place in the
harness (no K: one row per fold)."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from ldhmm.baselines import SmoothedMarkovChain
from ldhmm.baselines.markov_smoothed import (
    CONCENTRATION_BOUNDS,
    context_keys,
    leave_one_out_counts,
    log_likelihood_and_gradient,
)
from ldhmm.data import SequenceDatabase
from ldhmm.experiments import compare as compare_mod
from ldhmm.experiments import harness as H
from ldhmm.experiments.along_k import has_states
from ldhmm.experiments.measures import with_log_px


def _database(seed=0, n=40, V=4, step=0, keep=0.6, extra=(0, 15)):
    """Seeded sequences of a first-order chain: the next symbol is ``(last + step) % V`` with
    probability ``keep``, uniform otherwise; ``extra`` bounds the symbols after the first.
    By default a sticky chain, so that the orders matter."""
    rng = np.random.default_rng(seed)
    seqs = []
    for _ in range(n):
        x = [int(rng.integers(V))]
        for _ in range(int(rng.integers(*extra))):
            x.append((x[-1] + step) % V if rng.random() < keep else int(rng.integers(V)))
        seqs.append(np.array(x, dtype=np.int64))
    return seqs


class Reference:
    """The interpolated chain computed count by count with dictionaries (no shared code)."""

    BOS = "<s>"

    def __init__(self, sequences, order, betas, V):
        self.order, self.betas, self.V = order, list(betas), V
        self.pair, self.ctx = Counter(), Counter()
        for s in sequences:
            for h, v in self.events(s):
                for k in range(order + 1):
                    self.pair[(h[len(h) - k :], v)] += 1
                    self.ctx[h[len(h) - k :]] += 1

    def events(self, s):
        padded = [self.BOS] * self.order + [int(x) for x in s]
        return [(tuple(padded[n : n + self.order]), padded[n + self.order]) for n in range(len(s))]

    def proba(self, h, v):
        p = 1.0 / self.V
        for k in range(self.order + 1):
            hk = h[len(h) - k :]
            p = (self.pair[(hk, v)] + self.betas[k] * p) / (self.ctx[hk] + self.betas[k])
        return p

    def log_lik(self, s):
        return sum(math.log(self.proba(h, v)) for h, v in self.events(s))


@pytest.mark.parametrize("order", [0, 1, 3])
def test_exact_log_likelihood_matches_counts(order):
    train, held = _database(0), _database(1, n=15)
    model = SmoothedMarkovChain(order=order, n_symbols=4).fit(train)
    ref = Reference(train, order, model.concentrations_, 4)
    np.testing.assert_allclose(model.score_samples(held), [ref.log_lik(s) for s in held], rtol=1e-12)
    assert model.score_kind == "exact"


def test_probabilities_over_all_sequences_sum_to_one():
    model = SmoothedMarkovChain(order=2, n_symbols=3).fit(_database(2, V=3))
    for length in (1, 3):
        every = [np.array(x) for x in itertools.product(range(3), repeat=length)]
        assert np.isclose(np.exp(model.score_samples(every)).sum(), 1.0, rtol=1e-12)


def test_next_event_probabilities_sum_to_one_and_agree_with_scores():
    model = SmoothedMarkovChain(order=3, n_symbols=4).fit(_database(3))
    prefixes = _database(4, n=10)
    proba = model.predict_next_proba(prefixes)
    assert proba.shape == (10, 4)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
    # p(v | prefix) = p(prefix + v) / p(prefix): the scores give the same numbers
    for i, x in enumerate(prefixes):
        whole = model.score_samples([np.append(x, v) for v in range(4)])
        np.testing.assert_allclose(proba[i], np.exp(whole - model.score_samples([x])[0]), rtol=1e-10)


def test_leave_one_out_objective_is_refitting_without_each_sequence():
    train, order, betas = _database(5, n=12), 2, np.array([0.7, 3.0, 0.4])
    keys = context_keys(train, order, 4)
    symbols = np.concatenate(train)
    owner = np.repeat(np.arange(len(train)), [len(s) for s in train])
    pairs, contexts = leave_one_out_counts(keys, symbols, owner, 4)
    value, gradient = log_likelihood_and_gradient(
        np.log(betas), pairs.T, contexts.T, np.ones(len(symbols)), 4
    )
    brute = 0.0
    for m, s in enumerate(train):
        others = [x for j, x in enumerate(train) if j != m]
        brute += SmoothedMarkovChain(order=order, n_symbols=4, concentrations=betas).fit(others).score([s])
    assert np.isclose(value, brute, rtol=1e-12)
    # the gradient in log beta against central differences
    for k in range(3):
        step = np.zeros(3)
        step[k] = 1e-6
        up = log_likelihood_and_gradient(np.log(betas) + step, pairs.T, contexts.T, np.ones(len(symbols)), 4)
        down = log_likelihood_and_gradient(
            np.log(betas) - step, pairs.T, contexts.T, np.ones(len(symbols)), 4
        )
        assert np.isclose(gradient[k], (up[0] - down[0]) / 2e-6, rtol=1e-5, atol=1e-7)


def test_chosen_smoothing_is_a_maximum_of_the_training_objective():
    train = _database(6, n=60)
    model = SmoothedMarkovChain(order=1, n_symbols=4).fit(train)
    keys = context_keys(train, 1, 4)
    owner = np.repeat(np.arange(len(train)), [len(s) for s in train])
    pairs, contexts = leave_one_out_counts(keys, np.concatenate(train), owner, 4)
    weight = np.ones(pairs.shape[0])

    def objective(betas):
        return log_likelihood_and_gradient(np.log(betas), pairs.T, contexts.T, weight, 4)[0]

    best = objective(model.concentrations_)
    assert np.isclose(best, model.loo_log_likelihood_, rtol=1e-10)
    for k in range(2):
        for factor in (0.5, 2.0):
            other = model.concentrations_.copy()
            other[k] *= factor
            if CONCENTRATION_BOUNDS[0] <= other[k] <= CONCENTRATION_BOUNDS[1]:  # the searched range
                assert objective(other) <= best + 1e-9


def _payload(db, folds):
    settings = {"seed": 0, "max_iter": None, "tol": None, "m_step": None, "restarts": None, "is_samples": 0}
    return {"db": db, "folds": folds, "settings": settings, "entries": {}}


@pytest.mark.parametrize("name", ["MARKOV1", "MARKOV3"])
def test_harness_fit_does_not_look_at_the_held_out_fold(name):
    seqs = _database(7, n=50)
    folds = [(np.arange(0, 40), np.arange(40, 50))]
    changed = [s.copy() for s in seqs]
    for i in range(40, 50):  # another held-out fold, the same training folds
        changed[i] = np.array([3, 3, 3, 0, 1], dtype=np.int64)
    fits = []
    for data in (seqs, changed):
        payload = _payload(SequenceDatabase.from_sequences(data, ["a", "b", "c", "d"]), folds)
        train, test, fitter = compare_mod._fold_fitter(payload, 0)
        assert len(train) == 40 and len(test) == 10
        model, _ = fitter.one(name, None)
        fits.append(model)
    np.testing.assert_array_equal(fits[0].concentrations_, fits[1].concentrations_)
    probe = _database(8, n=5)
    np.testing.assert_array_equal(fits[0].score_samples(probe), fits[1].score_samples(probe))


def test_registered_without_states():
    assert {"MARKOV1", "MARKOV3"} <= set(H.resolve_models(["all"]))
    for name, order in (("MARKOV1", 1), ("MARKOV3", 3)):
        assert not has_states(name) and H.model_score_kind(name) == "exact"
        model = H.make_model(name, None, 5, seed=2, max_iter=7)
        assert model.order == order and model.n_symbols == 5
    with pytest.raises(ValueError, match="concentrations must be 2"):
        SmoothedMarkovChain(order=1, concentrations=[1.0])


def test_compare_shows_a_chain_once_per_fold(tmp_path):
    res = compare_mod.compare(
        ["LDHMM-PF", "MARKOV1", "MARKOV3"], data="synthetic", states=[2, 3], folds=2, n_sequences=40,
        max_iter=2, restarts=1, is_samples=5, out=tmp_path / "o", quiet=True,
    )  # fmt: skip
    csv = pd.read_csv(tmp_path / "o" / "folds.csv", keep_default_na=False)
    chains = csv[csv["model"].str.startswith("MARKOV")]
    assert len(chains) == 4 and set(chains["K"]) == {""}  # one row per fold, no K
    assert set(csv[csv["model"] == "LDHMM-PF"]["K"]) == {"2", "3"}
    assert "MARKOV3 (no K)" in res.summary and "Markov chain: MARKOV" in res.summary
    # the t-tests pair the chain's fold rows with the hidden-state model's at every K
    tt = res.ttests[(res.ttests["model_b"] == "MARKOV1") & (res.ttests["measure"] == "log p(x)")]
    assert sorted(tt["K"]) == [2, 3] and (tt["kind_b"] == "log p(x), exact").all()
    one = res.folds[res.folds["model"] == "MARKOV1"].sort_values("fold")["heldout_elbo"].to_numpy()
    assert np.allclose(tt["mean_b"], one.mean())
    assert res.table().loc["MARKOV1", 2] == res.table().loc["MARKOV1", 3]


def test_classify_shows_a_chain_once_per_fold(tmp_path):
    from ldhmm.experiments.classify import classify

    res = classify(
        ["HMM", "MARKOV1"], data="synthetic", states=[2, 3], folds=2, max_iter=3, restarts=1,
        out=tmp_path / "k", quiet=True,
    )  # fmt: skip
    chain = res.folds[res.folds["model"] == "MARKOV1"]
    assert len(chain) == 2 and chain["K"].isna().all()  # one row per (task, fold)
    assert "MARKOV1 (no K)" in res.summary
    table = res.table()
    assert table.loc[("A-B", 2), "MARKOV1"] == table.loc[("A-B", 3), "MARKOV1"]
    # on this seeded database the chain wins (0.99 against 0.94 at best), and the summary says so
    assert table["MARKOV1"].max() > table["HMM"].max()
    assert "Markov chain: a chain without hidden states has the best AUC" in res.summary


def _rows(chain: float, bound: float, is_value: float) -> pd.DataFrame:
    """Fold rows of one chain (exact) and LDHMM-PF (a bound, with or without IS) at K = 2."""
    rows = []
    for fold in range(2):
        for model, kind, own, is_ in (
            ("MARKOV1", "exact", chain, np.nan),
            ("LDHMM-PF", "lower_bound", bound, is_value),
        ):
            row = {"model": model, "K": 2, "fold": fold, "score_kind": kind, "score_family": ""}
            for suffix in ("", "_per_seq", "_per_token"):
                row["heldout_elbo" + suffix], row["heldout_is" + suffix] = own, is_
            rows.append(row)
    return with_log_px(pd.DataFrame(rows))


@pytest.mark.parametrize(
    "chain, bound, is_value, verdict",
    [
        (-10.0, -12.0, -9.0, "loses"),  # by log p(x): the IS estimate is above the chain
        (-10.0, -12.0, -11.0, "wins"),
        (-10.0, -9.0, np.nan, "loses"),  # no IS: a bound above the chain decides
        (-10.0, -12.0, np.nan, "not decided"),  # no IS: a bound below the chain does not
    ],
)
def test_the_markov_line_decides_only_what_the_measures_decide(chain, bound, is_value, verdict):
    line = compare_mod.markov_line(_rows(chain, bound, is_value), ["MARKOV1", "LDHMM-PF"])
    assert line.startswith("Markov chain: MARKOV1") and verdict in line
    if verdict != "not decided":
        assert (
            "not decided" not in line
            and f"by {abs(chain - (bound if np.isnan(is_value) else is_value)):.2f}" in line
        )


def test_the_default_line_ups_run_the_chains():
    import inspect

    from ldhmm.cli.main import build_parser
    from ldhmm.experiments.classify import classify
    from ldhmm.experiments.plugins import resolve_lineup

    for function in (compare_mod.compare, classify):
        default = inspect.signature(function).parameters["models"].default
        assert {"MARKOV1", "MARKOV3"} <= {entry.name for entry in resolve_lineup(default)}
    for command in ("compare", "classify"):
        args = build_parser().parse_args([command])
        assert {"MARKOV1", "MARKOV3"} <= {entry.name for entry in resolve_lineup(args.models)}


def test_compare_summary_says_a_chain_wins_where_it_must(tmp_path):
    # a cycle 0 -> 1 -> ... -> 5 -> 0 (90%): a first-order chain knows the next symbol, two hidden
    # states cannot remember which of six symbols came last
    cycle = _database(V=6, step=1, keep=0.9, extra=(10, 20))
    res = compare_mod.compare(
        ["LDHMM-PF", "HMM", "MARKOV1"], data=cycle, states=[2], folds=2, max_iter=5, restarts=1,
        is_samples=5, out=tmp_path / "o", quiet=True,
    )  # fmt: skip
    f = with_log_px(res.folds)
    per_fold = f.pivot_table(index="fold", columns="model", values="log_px")
    # the independent route: fold by fold, the chain's exact log p(x) is above both hidden-state models'
    assert (per_fold["MARKOV1"] > per_fold[["LDHMM-PF", "HMM"]].max(axis=1)).all()
    assert "Best by log p(x)" in res.summary and "MARKOV1 (no K) (" in res.summary
    assert "Markov chain: MARKOV1 (no hidden states, exact) wins against" in res.summary
    assert "The per-sequence dynamics do not pay on this data." in res.summary
