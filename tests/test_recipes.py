"""The code of the docs runs as written: every ``python`` block of the "Recipes" section of
docs/architecture.md, in order, in one namespace; every ``python`` block of
docs/writing-a-variant.md on its own (each is complete, imports included)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyro
import pytest
import torch
from pyro import poutine

from ldhmm.inference.svi.minibatch import pad_batch
from ldhmm.models.mixture import mixture_ldhmm_model
from ldhmm.models.pyro_model import ldhmm_sequence_model
from ldhmm.models.pyro_sequence import PyroSequenceModel
from ldhmm.models.sticky import sticky_ldhmm_model

DOCS = Path(__file__).resolve().parents[1] / "docs"
DOC = DOCS / "architecture.md"
VARIANT_DOC = DOCS / "writing-a-variant.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def recipe_blocks() -> list[str]:
    text = DOC.read_text()
    return python_blocks(text[text.index("## Recipes") :])


def test_architecture_recipes_run():
    blocks = recipe_blocks()
    assert len(blocks) == 4
    namespace: dict = {"__name__": "recipes"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 - our own documentation
    # the modified guide ran its own update, told the EM iteration and the sweep
    assert max(i for i, _ in namespace["tempered"].calls if i is not None) == 6
    assert "UNIGRAM" not in namespace["harness"].resolve_models(["all"])  # the recipe cleaned up


def _sites(model, batch) -> list:
    """Every param and sample site of one seeded run of ``model(batch)``: name, type (with a
    param's constraint), value, log-density (in a parameter-store scope of its own, so runs do
    not share parameters)."""
    with pyro.get_param_store().scope(), torch.random.fork_rng():
        torch.manual_seed(0)
        trace = poutine.trace(model).get_trace(batch)
        trace.compute_log_prob()
    return [
        (
            name,
            (site["type"], str(site["kwargs"].get("constraint"))),
            site["value"].detach(),
            site.get("log_prob"),
        )
        for name, site in trace.nodes.items()
        if site["type"] in ("param", "sample")
    ]


def _assert_same_model(doc_model, shipped, batch):
    got, want = _sites(doc_model, batch), _sites(shipped, batch)
    assert [s[:2] for s in got] == [s[:2] for s in want]
    for (name, _, value, log_prob), (_, _, value_0, log_prob_0) in zip(got, want):
        assert torch.equal(value, value_0), name
        assert (log_prob is None) == (log_prob_0 is None), name
        assert log_prob is None or torch.equal(log_prob, log_prob_0), name


@pytest.fixture
def variant_doc_namespaces(tmp_path, monkeypatch):
    """Each block of docs/writing-a-variant.md run in a fresh namespace, in a scratch directory
    (the comparison writes ``results/``), with Pyro's parameter store and torch's random state
    as they were afterwards."""
    monkeypatch.chdir(tmp_path)
    spaces = []
    for block in python_blocks(VARIANT_DOC.read_text()):
        namespace: dict = {"__name__": "writing_a_variant"}
        with pyro.get_param_store().scope(), torch.random.fork_rng():
            torch.manual_seed(0)
            exec(compile(block, str(VARIANT_DOC), "exec"), namespace)  # noqa: S102 - our own documentation
        spaces.append(namespace)
    return spaces


def test_writing_a_variant_blocks_run(variant_doc_namespaces):
    # the stock model, sticky, mixture, a fit, a comparison, a saved and loaded fit, predictive draws
    assert len(variant_doc_namespaces) == 7
    stock, sticky, mixture, fit, compared, saved, predictive = variant_doc_namespaces
    # Steps 1 and 2: the doc's models, written with the blocks, are the shipped ones.
    seqs = [np.array([0, 2, 1, 1, 3]), np.array([2]), np.array([1, 0, 3])]
    batch = pad_batch(seqs, range(3), 3, 2, 4, torch.float64)
    assert [s[0] for s in _sites(stock["ldhmm_sequence_model"], batch)] == [
        "alpha_pi",
        "alpha_A",
        "beta",
        "sequences",
        "pi",
        "A",
        "B",
        "x",
    ]
    _assert_same_model(stock["ldhmm_sequence_model"], ldhmm_sequence_model, batch)
    _assert_same_model(sticky["sticky_ldhmm_model"], sticky_ldhmm_model, batch)
    _assert_same_model(mixture["mixture_ldhmm_model"], mixture_ldhmm_model, batch)
    # Step 3: a fitted sticky model whose scores are finite bounds.
    model = fit["model"]
    assert isinstance(model, PyroSequenceModel) and 1 <= model.n_iter_ <= 40
    assert model.params_["kappa"] > 0 and model.elbo_history_[-1] > model.elbo_history_[0]
    assert np.all(np.isfinite(model.score_samples(fit["test"])))
    # Step 5: the comparison ran every model on every fold.
    folds = compared["result"].folds
    assert compared["result"].errors == []
    assert sorted(set(folds.model)) == ["HMM", "LDHMM-PF", "sticky"] and len(folds) == 6
    assert np.all(np.isfinite(folds.heldout_elbo_per_token))
    # ... each score labelled with its kind and family; the best named by log p(x)
    labels = compared["result"].table()["score"]
    assert labels["sticky"] == "lower bound (z-summed, Dirichlet mean field family)"
    assert labels["LDHMM-PF"] == "lower bound (PF family)" and labels["HMM"] == "exact log-lik"
    # Step 6: the loaded model is the saved one.
    assert saved["back"].params_.keys() == saved["model"].params_.keys()
    # Step 7: unconditioned, Predictive draws replicates (each held-out sequence its own)
    draws = predictive["draws"]
    assert tuple(draws.shape) == (4000, 2, 12)
    zeros = [(draws[:, m] == 0).float().mean().item() for m in range(2)]
    assert zeros[0] > 0.5 > zeros[1]
