"""model.describe(data): the tables of ``ldhmm report``, checked against independent routes
(scipy's Dirichlet, score_samples, decode, argmax of the predictive distributions), and the
page's escaping of a user's strings."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ldhmm import LDHMM, ParameterSharing, VariantHMM
from ldhmm.baselines import SmoothedMarkovChain
from ldhmm.cli.main import main
from ldhmm.models.description import dirichlet_std, kmeans, state_names
from ldhmm.report_html import render_report

HOSTILE = ["home", '<script>alert("x")</script>', "Q&A", "it's"]


@pytest.fixture(scope="module")
def fitted():
    truth = LDHMM.from_hyperparameters([1, 2], [[5, 1], [1, 5]], [[4, 1, 1, 1], [1, 1, 4, 2]])
    lengths = np.random.default_rng(0).integers(3, 20, 40)
    data = truth.sample(40, lengths=lengths, seed=1)
    model = LDHMM(2, seed=0, max_iter=8, n_init=1).fit(data[:30])
    model.vocabulary_ = list(HOSTILE)
    return model, data[30:]


@pytest.fixture(scope="module")
def described(fitted):
    model, users = fitted
    return model.describe(users, baseline="MARKOV1", n_clusters=2, n_examples=2, seed=3)


def test_database_level_tables_match_the_dirichlets(fitted):
    model, _ = fitted
    d = model.describe()
    assert set(d.tables()) == {
        "summary",
        "states",
        "emissions",
        "initial",
        "transitions",
        "transition_spread",
        "history",
        "restarts",
        "starts",
    }
    K, V = model.beta_.shape
    for k in range(K):
        dist = stats.dirichlet(model.beta_[k])
        rows = d.emissions[d.emissions["state"] == k]
        np.testing.assert_allclose(rows["mean"], dist.mean(), rtol=1e-12)
        np.testing.assert_allclose(rows["spread"], np.sqrt(dist.var()), rtol=1e-10)
    np.testing.assert_allclose(d.initial["mean"], stats.dirichlet(model.alpha_pi_).mean(), rtol=1e-12)
    np.testing.assert_allclose(
        d.transitions.to_numpy(), model.alpha_A_ / model.alpha_A_.sum(1, keepdims=True), rtol=1e-12
    )
    np.testing.assert_allclose(d.history["elbo"], model.elbo_history_)
    # a state is named by its two most likely events
    for k, name in enumerate(d.states["name"]):
        top = np.argsort(-model.beta_[k])[:2]
        assert name == f"S{k}: " + " + ".join(HOSTILE[v] for v in top)


def test_users_bound_paths_and_next_event(fitted, described):
    model, users = fitted
    d = described
    lengths = np.array([len(s) for s in users])
    np.testing.assert_allclose(d.users["bound"], model.score_samples(users), rtol=1e-9)
    np.testing.assert_allclose(d.users["bound_per_token"], d.users["bound"] / lengths)
    assert d.users.loc[d.users["rank"] == 1, "bound_per_token"].item() == d.users["bound_per_token"].max()
    assert (
        sorted(d.clusters["users"], reverse=True) == list(d.clusters["users"])
        and d.clusters["users"].sum() == 10
    )
    # the examples' states are decode's, their events the users' own
    for sid, path in d.examples.groupby("sequence_id"):
        seq = users[int(sid)]
        assert list(path["state"]) == list(model.decode([seq])[0])
        assert list(path["event"]) == [HOSTILE[v] for v in seq]
    assert set(d.examples["role"]) == {"typical", "unusual"}
    # next-event hit@1 by argmax of each model's predictive distribution
    test = [s for s in users if len(s) >= 2]
    prefixes, targets = [s[:-1] for s in test], np.array([s[-1] for s in test])
    chain = SmoothedMarkovChain(1, n_symbols=4, order=1).fit(prefixes)
    want = {
        "LDHMM": np.mean(model.predict_next_proba(prefixes).argmax(1) == targets),
        "MARKOV1": np.mean(chain.predict_next_proba(prefixes).argmax(1) == targets),
    }
    got = dict(zip(d.next_event["model"], d.next_event["hit1"]))
    assert got == pytest.approx(want)
    assert (d.next_event["n_users"] == len(test)).all()


def test_description_is_seeded(fitted, described):
    model, users = fitted
    again = model.describe(users, baseline="MARKOV1", n_clusters=2, n_examples=2, seed=3)
    for name, table in described.tables().items():
        assert table.equals(again.tables()[name]), name


def test_kmeans_finds_separated_groups_largest_first():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 0.1, (5, 2)), rng.normal(5, 0.1, (9, 2))])
    labels = kmeans(x, 2, seed=1)
    assert list(labels) == [1] * 5 + [0] * 9
    np.testing.assert_array_equal(kmeans(x, 2, seed=1), labels)


def test_pure_helpers():
    np.testing.assert_allclose(dirichlet_std(np.array([2.0, 2.0])), [np.sqrt(1 / 20)] * 2)
    assert state_names(np.array([[0.1, 0.6, 0.3]]), ["a", "b", "c"]) == ["S0: b + c"]


def test_the_page_escapes_every_user_string(described):
    page = render_report(described, 'model <b>"x"</b>.json')
    assert "<script" not in page and "<b>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "Q&amp;A" in page and "Q&A" not in page
    assert page.count("<svg") >= 6 and page.count("<table") >= 8
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_a_point_estimated_emission_matrix_has_no_spread(fitted):
    _, users = fitted
    model = VariantHMM(2, sharing=ParameterSharing(B="point"), seed=0, max_iter=5).fit(users)
    d = model.describe(users, n_clusters=2)
    np.testing.assert_allclose(
        d.emissions["mean"], np.exp(model.params_.log_point["B"].double().numpy()).ravel()
    )
    assert (d.emissions["spread"] == 0).all() and "users_mean" not in d.emissions
    assert list(d.next_event["model"]) == ["VariantHMM"]  # no baseline asked for


def test_the_command_without_data_and_its_errors(fitted, tmp_path, capsys):
    model, _ = fitted
    model.save(tmp_path / "m.json")
    assert main(["report", str(tmp_path / "m.json"), "--out", str(tmp_path / "m.html"), "--quiet"]) == 0
    page = (tmp_path / "m.html").read_text(encoding="utf-8")
    assert "<h2>States</h2>" in page and "<h2>Users</h2>" not in page and "need data" in page
    assert main(["report", str(tmp_path / "m.json"), "--out", str(tmp_path / "m.txt")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "expected a file ending in .html" in err
    # what describes users, without users: one line naming it, no page (not a page without them)
    about_users = ["--clusters", "5", "--seed", "3", "--min-length", "2"]
    assert main(["report", str(tmp_path / "m.json"), *about_users, "--out", str(tmp_path / "u.html")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--min-length, --clusters, --seed: about the users of DATA" in err
    assert not (tmp_path / "u.html").exists()
