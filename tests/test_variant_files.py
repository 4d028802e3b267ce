"""A variant of the SVI route lives like the built-in model: ``save``/``load`` in the model-file
format (vocabulary included, the file naming its factory), and ``ldhmm score`` on it."""

from __future__ import annotations

import functools
import json

import numpy as np
import pandas as pd
import pytest

from ldhmm import LDHMM
from ldhmm.cli import main
from ldhmm.cli.outputs import read_table
from ldhmm.data import load_path
from ldhmm.modelfiles import load_model
from ldhmm.models.file_format import ModelFileError
from ldhmm.models.pyro_sequence import PyroSequenceModel
from ldhmm.models.sticky import sticky_ldhmm

FACTORY = "ldhmm.models.sticky:sticky_ldhmm"
SYMBOLS = ["home", "search", "buy"]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A sticky LDHMM fitted on a text log of named events, saved; the log and the file."""
    d = tmp_path_factory.mktemp("variant")
    truth = LDHMM.from_hyperparameters([1, 2], [[5, 1], [1, 5]], [[4, 1, 1], [1, 1, 4]])
    seqs = truth.sample(30, lengths=np.random.default_rng(0).integers(3, 10, 30), seed=1)
    log = d / "log.txt"
    log.write_text("".join(" ".join(SYMBOLS[t] for t in s) + "\n" for s in seqs))
    db = load_path(log)
    model = sticky_ldhmm(2, db.n_symbols, seed=0, max_epochs=3, score_epochs=2, score_draws=8).fit(db)
    model.save(d / "sticky.json")
    return model, db, log, d / "sticky.json"


def test_save_and_load_give_the_same_model(fitted):
    model, db, _, path = fitted
    doc = json.loads(path.read_text())
    assert doc["class"] == "PyroSequenceModel" and doc["factory"] == FACTORY
    assert doc["vocabulary"] == model.vocabulary_ and sorted(doc["vocabulary"]) == sorted(SYMBOLS)
    back = PyroSequenceModel.load(path, factory=FACTORY)
    assert back.get_config() == model.get_config() and back.vocabulary_ == model.vocabulary_
    for name, value in model.params_.items():
        np.testing.assert_allclose(back.params_[name], value, rtol=1e-13, atol=0)
    np.testing.assert_allclose(
        back.score_samples(db.sequences[:5]), model.score_samples(db.sequences[:5]), rtol=1e-9
    )
    assert back.score_family == model.score_family
    # what it was fitted on: the log's path, its size and the hash of its coded sequences
    assert (
        doc["training_data"]["source"] == str(db.meta["source"]) and doc["training_data"]["n_sequences"] == 30
    )
    assert back.training_data_ == model.training_data_ == doc["training_data"]
    # the front door's load_model rebuilds it by the class the file records
    assert isinstance(load_model(path, factory=sticky_ldhmm), PyroSequenceModel)


def test_a_file_never_runs_its_factory_by_itself(fitted, tmp_path):
    _, _, _, path = fitted
    with pytest.raises(ModelFileError, match=f"field 'factory'.*factory='{FACTORY}' in Python"):
        load_model(path)
    doc = json.loads(path.read_text())
    bad = tmp_path / "bad.json"
    for field, value, needle in (
        ("params", {"kappa": "x"}, "params.kappa"),
        ("factory", "no colon", "factory"),
        ("vocabulary", ["a"], "vocabulary"),
        ("config", {**doc["config"], "lr": "fast"}, "config.lr"),
    ):
        bad.write_text(json.dumps({**doc, field: value}))
        with pytest.raises(ModelFileError, match=needle):
            PyroSequenceModel.load(bad, factory=FACTORY)


def test_save_needs_an_import_path(fitted, tmp_path):
    model = fitted[0]
    with pytest.raises(ValueError, match="no import path"):
        model.save(tmp_path / "m.json", factory=functools.partial(sticky_ldhmm, max_epochs=2))


def test_ldhmm_score_on_a_variant(fitted, tmp_path, capsys):
    model, db, log, path = fitted
    out = tmp_path / "scores.csv"
    argv = ["score", str(path), str(log), "--factory", FACTORY, "--is-samples", "6", "--out", str(out)]
    assert main([*argv, "--quiet"]) == 0
    scores = pd.read_csv(out)
    np.testing.assert_allclose(scores["elbo"], model.score_samples(db), rtol=1e-9)
    # the importance-sampled log p(x) with its standard error and effective sample size
    assert scores["log_marginal_is_ess"].between(1 - 1e-9, 6 + 1e-9).all()
    assert (scores["log_marginal_is_se"] > 0).all() and np.isfinite(scores["log_marginal_is"]).all()
    # without --factory: one line
    assert main(["score", str(path), str(log), "--out", str(out)]) != 0
    assert "--factory" in capsys.readouterr().err


def test_posterior_predict_and_decode_commands_on_a_variant(fitted, tmp_path):
    """The per-sequence commands read the variant's methods, symbols by name (the reference: the
    model loaded from the file the commands read, whose parameters went through JSON)."""
    _, db, log, path = fitted
    model = PyroSequenceModel.load(path, factory=FACTORY)
    first = ["--factory", FACTORY, "--quiet"]
    tables = {}
    for command in ("posterior", "predict", "decode"):
        out = tmp_path / f"{command}.csv"
        assert main([command, str(path), str(log), *first, "--out", str(out)]) == 0
        tables[command] = read_table(out)
    post = model.posterior(db.sequences)
    np.testing.assert_allclose(tables["posterior"]["elbo"], post["elbo"], rtol=1e-12)
    for m in (0, len(db) - 1):
        np.testing.assert_allclose(tables["posterior"]["B_mean"][m], post["B_mean"][m].ravel(), rtol=1e-12)
        marginals = np.asarray(tables["posterior"]["state_marginals"][m])
        np.testing.assert_allclose(marginals, post["state_marginals"][m].ravel(), rtol=1e-12)
    proba = model.predict_next_proba(db.sequences)
    best = np.asarray(db.vocabulary, dtype=object)[np.argmax(proba, axis=1)]
    assert list(tables["predict"]["next_1"]) == list(best)
    np.testing.assert_allclose(tables["predict"]["p_1"], proba.max(axis=1), rtol=1e-12)
    paths = [" ".join(map(str, p)) for p in model.decode(db.sequences)]
    assert list(tables["decode"]["states"]) == paths
