"""The answers of a contextual LDHMM (issue 47, item 1): its posterior (the API, ``ldhmm
posterior`` and the file read back) and its description (``describe``, ``ldhmm report``),
each checked against an independent route: dense (K, C, V) arrays built by hand, the held-out
bound of ``score_samples`` and the next-event probabilities of ``predict_next_proba``."""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.special import digamma, gammaln

from ldhmm import LDHMM, VariantHMM
from ldhmm.cli import main
from ldhmm.cli.fit_path import holdout_split
from ldhmm.inference.cavi.context_vem import best_of_starts, context_batch, e_step
from ldhmm.inference.contexts import build_context_table, context_ids, context_labels
from ldhmm.inference.sharing import HMM_SHARING
from ldhmm.modelfiles import load_model
from ldhmm.models.contextual import ContextualLDHMM
from ldhmm.models.contextual_description import (
    TOP_CONTEXTS,
    context_weights,
    state_emissions,
    user_emission_means,
)
from ldhmm.models.contextual_hmm import ContextualHMM
from ldhmm.models.registry import get_spec
from ldhmm.output_files import read_posterior_file

# the contextual tests' generator: data drawn from the variant (one place)
_SPEC = importlib.util.spec_from_file_location(
    "contextual_tests", Path(__file__).with_name("test_contextual.py")
)
contextual_tests = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(contextual_tests)
EVENTS = ["home", "product", "cart", "pay"]


@pytest.fixture(scope="module")
def fitted():
    prior, table = contextual_tests._truth()
    rng = np.random.default_rng(5)
    train = contextual_tests._draw(rng, prior, table, 60, (2, 14), 4)
    held = contextual_tests._draw(rng, prior, table, 12, (1, 10), 4)
    model = ContextualLDHMM(2, n_symbols=4, emission_context=2, min_context_count=3, seed=0).fit(train)
    model.vocabulary_ = list(EVENTS)
    return model, train, held


def _dense_posterior_rows(model, post, m):
    """q(B_m)'s Dirichlet parameters, dense (K, C, V): the prior plus the pairs' counts."""
    g = model.beta_.copy()
    for c, v, n in zip(post["B_contexts"][m], post["B_symbols"][m], post["B_counts"][m].T):
        g[:, c, v] += n
    return g


def test_the_posterior_is_the_held_out_e_step(fitted):
    model, _, held = fitted
    post = model.posterior(held)
    M, K = len(held), model.n_states
    assert post["g_pi"].shape == (M, K) and post["g_A"].shape == (M, K, K)
    # the bound is score_samples'; q(pi) and q(A) add the expected counts of one chain
    np.testing.assert_array_equal(post["elbo"], model.score_samples(held))
    np.testing.assert_allclose((post["g_pi"] - model.alpha_pi_).sum(1), 1.0, atol=1e-9)
    for m, s in enumerate(held):
        assert post["state_marginals"][m].shape == (len(s), K)
        np.testing.assert_allclose(post["state_marginals"][m].sum(1), 1.0, atol=1e-9)
        np.testing.assert_allclose((post["g_A"][m] - model.alpha_A_).sum(), len(s) - 1, atol=1e-9)
        # the pairs are the sequence's own (context, symbol) pairs, sorted, their counts its events
        ctx = context_ids([s], model.context_table_)[0]
        pairs = sorted(set(zip(ctx.tolist(), s.tolist())))
        assert list(zip(post["B_contexts"][m].tolist(), post["B_symbols"][m].tolist())) == pairs
        np.testing.assert_allclose(post["B_counts"][m].sum(), len(s), atol=1e-9)
        np.testing.assert_allclose(
            post["B_counts"][m].sum(0), [np.sum((ctx == c) & (s == v)) for c, v in pairs]
        )
    assert post["context_labels"] == context_labels(model.context_table_, EVENTS)


def test_the_posterior_predicts_the_next_event_as_predict_next_proba(fitted):
    model, _, held = fitted
    post = model.posterior(held)
    rows = context_ids([np.append(s, 0) for s in held], model.context_table_)
    expected = []
    for m in range(len(held)):
        q_next = post["state_marginals"][m][-1] @ (post["g_A"][m] / post["g_A"][m].sum(1, keepdims=True))
        g = _dense_posterior_rows(model, post, m)[:, rows[m][-1], :]
        p = q_next @ (g / g.sum(1, keepdims=True))
        expected.append(p / p.sum())
    np.testing.assert_allclose(model.predict_next_proba(held), np.array(expected), rtol=1e-9)


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_the_posterior_command_writes_the_pairs_and_reads_them_back(fitted, tmp_path, suffix):
    model, _, held = fitted
    model.save(tmp_path / "m.json", vocabulary=EVENTS)
    log = tmp_path / "held.txt"
    log.write_text("".join(" ".join(EVENTS[v] for v in s) + "\n" for s in held))
    out = tmp_path / f"post{suffix}"
    assert main(["posterior", str(tmp_path / "m.json"), str(log), "--out", str(out), "--quiet"]) == 0
    back = read_posterior_file(out, model=tmp_path / "m.json")
    post = model.posterior(held)
    np.testing.assert_allclose(back.arrays["A"], post["g_A"] / post["g_A"].sum(-1, keepdims=True), rtol=1e-12)
    for m in range(len(held)):
        g = _dense_posterior_rows(model, post, m)
        contexts, symbols = post["B_contexts"][m], post["B_symbols"][m]
        assert np.array_equal(back.B_contexts[m], contexts)
        got_symbols, mean, total = back.sparse_B[m]
        assert np.array_equal(got_symbols, symbols)
        np.testing.assert_allclose(mean, g[:, contexts, symbols] / g.sum(-1)[:, contexts], rtol=1e-12)
        np.testing.assert_allclose(total, g.sum(-1)[:, contexts], rtol=1e-12)
    if suffix == ".parquet":
        assert back.context_labels == context_labels(model.context_table_, EVENTS)


def test_the_states_emissions_are_their_rows_weighted_by_the_training_contexts(fitted):
    model, train, _ = fitted
    C = model.context_table_.n_contexts
    ctx = np.concatenate(context_ids(train, model.context_table_))
    assert np.array_equal(model.context_counts_, np.bincount(ctx, minlength=C))
    w = context_weights(model.context_counts_, C)
    mean, spread = state_emissions(model.beta_, w)
    by_hand = sum(w[c] * model.beta_[:, c] / model.beta_[:, c].sum(-1, keepdims=True) for c in range(C))
    np.testing.assert_allclose(mean, by_hand, rtol=1e-12)
    np.testing.assert_allclose(mean.sum(1), 1.0, atol=1e-12)
    assert np.all(spread > 0)
    np.testing.assert_allclose(context_weights(None, C), np.full(C, 1 / C))


def test_a_users_emission_means_are_its_posterior_rows_weighted_alike(fitted):
    model, _, held = fitted
    post = model.posterior(held)
    w = context_weights(model.context_counts_, model.context_table_.n_contexts)
    for m in range(len(held)):
        g = _dense_posterior_rows(model, post, m)
        expected = np.einsum("c,kcv->kv", w, g / g.sum(-1, keepdims=True))
        got = user_emission_means(
            model.beta_, w, post["B_contexts"][m], post["B_symbols"][m], post["B_counts"][m]
        )
        np.testing.assert_allclose(got, expected, rtol=1e-10)


def test_describe_names_states_by_their_weighted_rows_and_lists_the_contexts(fitted):
    model, _, held = fitted
    d = model.describe(held, baseline="MARKOV1")
    K, C = model.n_states, model.context_table_.n_contexts
    w = context_weights(model.context_counts_, C)
    mean, _ = state_emissions(model.beta_, w)
    assert np.allclose(
        d.emissions.pivot(index="state", columns="event", values="mean")[EVENTS].to_numpy(), mean
    )
    shown = min(TOP_CONTEXTS, C)
    assert len(d.contexts) == K * shown
    top = np.argsort(-w, kind="stable")[:shown]
    labels = context_labels(model.context_table_, EVENTS)
    assert list(d.contexts["context"][:shown]) == [labels[c] for c in top]
    np.testing.assert_allclose(d.contexts["concentration"][:shown], model.beta_[0, top].sum(-1))
    summary = dict(d.summary.itertuples(index=False))
    assert summary["emission context"].startswith("2 (order 2") and summary["context shares"] == (
        "from the training data"
    )
    assert len(d.users) == len(held) and set(d.next_event["model"]) == {"ContextualLDHMM", "MARKOV1"}
    np.testing.assert_array_equal(d.users["bound"], model.score_samples(held))


def test_a_model_file_keeps_the_context_counts_and_an_older_one_is_described(fitted, tmp_path):
    model, _, held = fitted
    model.save(tmp_path / "m.json", vocabulary=EVENTS)
    again = load_model(tmp_path / "m.json")
    assert np.array_equal(again.context_counts_, model.context_counts_)
    doc = json.loads((tmp_path / "m.json").read_text())
    older = {k: v for k, v in doc.items() if k != "context_counts"}
    (tmp_path / "old.json").write_text(json.dumps(older))
    old = load_model(tmp_path / "old.json")
    assert old.context_counts_ is None
    summary = dict(old.describe().summary.itertuples(index=False))
    assert summary["context shares"].startswith("not recorded")
    for bad in ([1, 2], [-1] * len(doc["context_counts"]), "many"):
        (tmp_path / "bad.json").write_text(json.dumps({**doc, "context_counts": bad}))
        with pytest.raises(ValueError, match="field 'context_counts'") as err:
            load_model(tmp_path / "bad.json")
        assert "\n" not in str(err.value)


def test_the_report_command_renders_a_contextual_model(fitted, tmp_path):
    model, _, held = fitted
    model.save(tmp_path / "m.json", vocabulary=EVENTS)
    log = tmp_path / "held.txt"
    log.write_text("".join(" ".join(EVENTS[v] for v in s) + "\n" for s in held))
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "m.json"), str(log), "--out", str(out), "--quiet"]) == 0
    page = out.read_text()
    assert "<h2>Contexts</h2>" in page and "<td>home &gt; product</td>" in page


def test_context_labels_read_histories_oldest_first():
    table = build_context_table([np.array([0, 1, 0, 1, 0, 1])], 2, 2, min_count=2)
    labels = context_labels(table, ["a", "b"])
    assert labels[:3] == ["a", "b", "BEGIN"]
    assert "a > b" in labels and "b > a" in labels
    with pytest.raises(ValueError, match="3 symbol names for a table of 2 symbols"):
        context_labels(table, ["a", "b", "c"])


# ------------------------------------------------------------------ the emission_context= switch
def test_emission_context_on_ldhmm_and_variant_hmm_is_the_contextual_model(fitted):
    _, train, held = fitted
    switched = LDHMM(2, n_symbols=4, emission_context=2, min_context_count=3, max_iter=30, seed=1).fit(train)
    direct = ContextualLDHMM(2, n_symbols=4, emission_context=2, min_context_count=3, max_iter=30, seed=1)
    direct.fit(train)
    assert type(switched) is ContextualLDHMM and switched.get_params() == direct.get_params()
    assert switched.elbo_history_ == direct.elbo_history_
    np.testing.assert_array_equal(switched.score_samples(held), direct.score_samples(held))
    hmm = VariantHMM(2, 4, HMM_SHARING, emission_context="previous", n_init=2, transition_pseudocount=0.1)
    assert type(hmm) is ContextualHMM and hmm.n_init == 2 and hmm.transition_pseudocount == 0.1
    hmm.fit(train)
    same = ContextualHMM(2, 4, emission_context="previous", n_init=2, transition_pseudocount=0.1).fit(train)
    np.testing.assert_array_equal(hmm.score_samples(held), same.score_samples(held))


def test_emission_context_none_is_the_plain_model_bit_for_bit(fitted):
    _, train, held = fitted
    plain = LDHMM(2, n_symbols=4, effort="quick", seed=3)
    switched = LDHMM(2, n_symbols=4, effort="quick", seed=3, emission_context=None)
    assert type(switched) is LDHMM and switched.get_config() == plain.get_config()
    assert "emission_context" not in plain.get_config() and plain.get_params()["emission_context"] is None
    np.testing.assert_array_equal(
        plain.fit(train).score_samples(held), switched.fit(train).score_samples(held)
    )


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ContextualLDHMM(2, guide="chain"), "guide must be 'pf' or 'ff'"),
        (lambda: LDHMM(2, optimizer="svi", emission_context=1), "optimizer 'svi' is the Pyro route"),
        (lambda: LDHMM(2, effort="quick", emission_context=1), "ContextualLDHMM takes no effort"),
        (lambda: LDHMM(2, emission_context=1, emission_pseudocount=0.1), "takes no 'emission_pseudocount'"),
        (
            lambda: VariantHMM(2, sharing=HMM_SHARING, prior_concentration=2.0, emission_context=1),
            "no prior_conc",
        ),
        (lambda: LDHMM(2, emission_context="next"), "emission_context must be None, 'previous' or an order"),
        (lambda: LDHMM(2, min_context_count=3), "unexpected keyword argument 'min_context_count'"),
    ],
)
def test_what_the_contextual_model_would_ignore_is_refused_in_one_line(make, message):
    with pytest.raises((ValueError, TypeError), match=re.escape(message)) as err:
        make()
    assert "\n" not in str(err.value)


def test_the_constructors_still_show_their_arguments():
    """The switch is a ``__new__``; ``inspect`` (``help()``, editors) still shows ``__init__``'s arguments."""
    assert {"sharing", "prior_concentration", "emission_context"} <= set(
        inspect.signature(VariantHMM).parameters
    )
    assert {"optimizer", "emission_context", "n_init"} <= set(inspect.signature(LDHMM).parameters)
    assert "self" not in inspect.signature(LDHMM).parameters


# ------------------------------------------------------------------ the point variant answers too
def test_the_contextual_hmm_saves_answers_and_reports(fitted, tmp_path):
    _, train, held = fitted
    model = VariantHMM(2, 4, HMM_SHARING, emission_context="previous", n_init=2).fit(train)
    model.save(tmp_path / "hmm.json", vocabulary=EVENTS)
    again = load_model(tmp_path / "hmm.json")
    assert type(again) is ContextualHMM and again.vocabulary_ == EVENTS
    np.testing.assert_array_equal(again.score_samples(held), model.score_samples(held))
    np.testing.assert_array_equal(again.predict_next_proba(held), model.predict_next_proba(held))
    assert (
        str(model.convergence_) == dict(again.describe().summary.itertuples(index=False))["stopped because"]
    )
    # the posterior: exact log p(x), and marginals that are the chain's smoothing marginals
    post = again.posterior(held)
    np.testing.assert_array_equal(post["elbo"], model.score_samples(held))
    for m, s in enumerate(held):
        np.testing.assert_allclose(post["state_marginals"][m].sum(1), 1.0, atol=1e-12)
        paths = again.decode([s])[0]
        assert paths.shape == (len(s),)
    d = again.describe(held)
    w = context_weights(model.context_counts_, model.context_table_.n_contexts)
    B = d.emissions.pivot(index="state", columns="event", values="mean")[EVENTS].to_numpy()
    np.testing.assert_allclose(B, np.einsum("c,kcv->kv", w, model.emissionprob_), rtol=1e-12)
    assert (d.emissions["spread"] == 0).all() and "concentration" not in d.contexts
    out = tmp_path / "r.html"
    log = tmp_path / "held.txt"
    log.write_text("".join(" ".join(EVENTS[v] for v in s) + "\n" for s in held))
    assert main(["report", str(tmp_path / "hmm.json"), str(log), "--out", str(out), "--quiet"]) == 0
    assert "<h2>Contexts</h2>" in out.read_text()
    doc = json.loads((tmp_path / "hmm.json").read_text())
    bad = {**doc, "parameters": {**doc["parameters"], "A": [[0.5, 0.6], [0.5, 0.5]]}}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="field 'parameters.A': expected probabilities") as err:
        load_model(tmp_path / "bad.json")
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ fit along K
def test_fit_along_k_with_an_emission_context_writes_each_k_and_resumes(fitted, tmp_path, capsys):
    _, train, _ = fitted
    log = tmp_path / "log.txt"
    log.write_text("".join(" ".join(EVENTS[v] for v in s) + "\n" for s in train))
    out = tmp_path / "path"
    argv = ["fit", str(log), "--states", "2..3", "--emission-context", "previous", "--restarts", "1"]
    argv += ["--holdout", "0.25", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    table = pd.read_csv(out / "path.csv")
    assert list(table["K"]) == [2, 3] and set(table["start"]) == {"restart"}
    # each K is the model fitted on the training part alone, from its own starts
    keep, held = holdout_split(len(train), 0.25, 0)
    names = sorted(EVENTS)  # the log's vocabulary: its symbols in sorted order
    recode = {EVENTS.index(n): i for i, n in enumerate(names)}
    part = [np.array([recode[int(v)] for v in train[i]]) for i in keep]
    for K in (2, 3):
        saved = load_model(out / f"K{K}.json")
        direct = ContextualLDHMM(K, n_symbols=4, n_init=1, seed=0).fit(part)
        assert type(saved) is ContextualLDHMM and saved.elbo_history_ == direct.elbo_history_
    # a stopped run resumes at the first K without a model file, to the same file
    first = (out / "K3.json").read_text()
    (out / "K3.json").unlink()
    assert main(argv) == 0
    assert (out / "K3.json").read_text() == first
    # another emission context in the same directory: one line
    capsys.readouterr()
    other = [a if a != "previous" else "2" for a in argv]
    assert main(other) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "emission_context 'previous' there, 2 here" in err


# ------------------------------------------------------------------ the FF family
def _mean_field_elbo(seq, ctx, prior, phi, K, C, V):
    """The FF ELBO by its definition, dense: ``E_q[log p(x, z | theta)] + H[q(z)] - KL(q(theta) ||
    p(theta))`` with ``q(theta) = Dir(prior + n)``, ``n`` the expected counts of the factors ``phi``
    (independent positions), each term from scipy's digamma and gammaln."""
    n_pi, n_A, n_B = phi[0], np.zeros((K, K)), np.zeros((K, C, V))
    for t in range(1, len(seq)):
        n_A += np.outer(phi[t - 1], phi[t])
    for t, (x, c) in enumerate(zip(seq, ctx)):
        n_B[:, c, x] += phi[t]
    total = -(phi * np.log(np.where(phi > 0, phi, 1.0))).sum()
    for a, n in zip((prior["pi"], prior["A"], prior["B"]), (n_pi, n_A, n_B)):
        g = a + n
        elog = digamma(g) - digamma(g.sum(-1, keepdims=True))
        total += (n * elog).sum()
        kl = gammaln(g.sum(-1)) - gammaln(g).sum(-1) - gammaln(a.sum(-1)) + gammaln(a).sum(-1)
        kl += ((g - a) * elog).sum(-1)
        total -= kl.sum()
    return total


@pytest.mark.parametrize("seed", range(3))
def test_the_ff_bound_is_the_mean_field_elbo_and_at_most_pf_and_log_p_x(seed):
    rng = np.random.default_rng(200 + seed)
    V, K = 3, 2 + seed % 2
    table = build_context_table([np.arange(V)], 1, V)
    C = table.n_contexts
    prior = contextual_tests._random_prior(rng, K, C, V)
    held = [rng.integers(0, V, size=n) for n in (1, 3, 5, 6)]
    ids = context_ids(held, table)
    batch = context_batch(held, ids, range(len(held)), V)
    torch_prior = {g: torch.from_numpy(v) for g, v in prior.items()}
    ff = e_step(torch_prior, batch, None, 300, 1e-12, "ff")
    pf = best_of_starts(torch_prior, batch, 300, 1e-12, "pf")
    best_ff = best_of_starts(torch_prior, batch, 300, 1e-12, "ff")
    for m, (s, c) in enumerate(zip(held, ids)):
        phi = ff.marginals[m, : len(s)].numpy()
        np.testing.assert_allclose(
            ff.bounds[m].item(), _mean_field_elbo(s, c, prior, phi, K, C, V), rtol=1e-9
        )
        exact = contextual_tests._exact_log_marginal(s, c, prior, K, C, V)
        assert best_ff.bounds[m].item() <= pf.bounds[m].item() + 1e-9 <= exact + 2e-9
    # the sweeps never lower the FF bound
    bounds = [e_step(torch_prior, batch, None, n, 0.0, "ff").bounds for n in (1, 2, 3, 5, 8)]
    assert all(bool((b >= a - 1e-9).all()) for a, b in zip(bounds, bounds[1:]))


def test_an_ff_fit_rises_rescores_and_stays_below_pf_at_its_priors(fitted):
    _, train, held = fitted
    ff = LDHMM(2, n_symbols=4, guide="ff", emission_context="previous", max_iter=40, tol=1e-6).fit(train)
    assert type(ff) is ContextualLDHMM and ff.guide == "ff" and ff.score_family == "ff"
    h = np.asarray(ff.elbo_history_)
    assert np.all(np.diff(h) >= -1e-9 * np.abs(h[1:]))
    tokens = sum(len(s) for s in train)
    assert abs(ff.score(train) - ff.elbo_) / tokens < 0.005
    pf = ContextualLDHMM(2, n_symbols=4, emission_context="previous")
    for name in ("alpha_pi_", "alpha_A_", "beta_", "context_table_", "context_counts_", "n_symbols_"):
        setattr(pf, name, getattr(ff, name))
    pf.elbo_history_, pf.elbo_ = ff.elbo_history_, ff.elbo_
    assert np.all(ff.score_samples(held) <= pf.score_samples(held) + 1e-9)
    assert get_spec("LDHMM-FF-ctx1").make(2, 4, seed=0).guide == "ff"


def test_the_fit_command_fits_the_ff_family_with_an_emission_context(fitted, tmp_path):
    _, train, _ = fitted
    log = tmp_path / "log.txt"
    log.write_text("".join(" ".join("abcd"[v] for v in s) + "\n" for s in train))
    argv = ["fit", str(log), "--states", "2", "--emission-context", "previous", "--guide", "ff"]
    assert main([*argv, "--restarts", "1", "--out", str(tmp_path / "ff.json"), "--quiet"]) == 0
    saved = load_model(tmp_path / "ff.json")
    direct = ContextualLDHMM(2, n_symbols=4, n_init=1, seed=0, guide="ff").fit(train)
    assert saved.guide == "ff" and saved.elbo_history_ == direct.elbo_history_
