"""Contextual emissions under any ParameterSharing (ContextualLDHMM(sharing=...), and the
``emission_context=`` switch of VariantHMM, HMMV and VBHMM): pi, A and B each per sequence (a
learned or fixed prior), shared by the database's q (VB) or point estimates (MAP).

Checked against an independent route: the exact held-out ``log p(x)`` by brute force over every
hidden path, each path's groups integrated in closed form (a Dirichlet-multinomial for a group
per sequence under its prior, or shared under its q(theta); ``n . log theta`` for a point
group). The bound never exceeds it, equals it where every group is a point, FF's never exceeds
PF's, the training objective never falls, re-scoring the training set gives the training bound.
"""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest
from scipy.special import gammaln, logsumexp

from ldhmm import VariantHMM
from ldhmm.baselines.hmmv import HMMV
from ldhmm.baselines.vbhmm import VBHMM
from ldhmm.inference.contexts import context_ids
from ldhmm.inference.sharing import (
    HMM_SHARING,
    HMMV_SHARING,
    LDHMM_SHARING,
    POINT,
    SEQUENCE,
    VBHMM_SHARING,
    ParameterSharing,
)
from ldhmm.modelfiles import load_model
from ldhmm.models.contextual import ContextualLDHMM
from ldhmm.models.file_format import ModelFileError

V = 3

SHARINGS = {
    "vbhmm": VBHMM_SHARING,
    "hmmv": HMMV_SHARING,
    "chain-point": ParameterSharing(pi=POINT, A=POINT, B=SEQUENCE),
    "fixed-priors": ParameterSharing(learn_prior=False),
    "mixed": ParameterSharing(pi="shared", A=SEQUENCE, B=POINT, pseudocount=0.05),
    "all-point": HMM_SHARING,
}


def _data(seed: int, n: int, high: int = 7):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = [int(rng.integers(V))]
        for _ in range(int(rng.integers(1, high))):
            x.append((x[-1] + 1) % V if rng.random() < 0.7 else int(rng.integers(V)))
        out.append(np.array(x))
    return out


def _log_dm(a: np.ndarray, n: np.ndarray) -> float:
    """``sum_rows log B(a + n) - log B(a)``: the Dirichlet-multinomial of counts ``n`` (rows last)."""
    return float(
        (gammaln(a + n).sum(-1) - gammaln(a).sum(-1) - gammaln((a + n).sum(-1)) + gammaln(a.sum(-1))).sum()
    )


def exact_log_marginal(model, x) -> float:
    """``log p(x)`` under the fitted model by brute force over every hidden path."""
    K, C = model.n_states, model.context_table_.n_contexts
    contexts = context_ids([x], model.context_table_)[0]
    sharing = model.parameter_sharing
    held = {"pi": model.alpha_pi_, "A": model.alpha_A_, "B": model.beta_, **model.shared_posterior_}
    terms = []
    for z in itertools.product(range(K), repeat=len(x)):
        n = {"pi": np.zeros(K), "A": np.zeros((K, K)), "B": np.zeros((K, C, V))}
        n["pi"][z[0]] = 1
        for a, b in zip(z, z[1:]):
            n["A"][a, b] += 1
        for k, c, v in zip(z, contexts, x):
            n["B"][k, c, v] += 1
        lp = 0.0
        for g in ("pi", "A", "B"):
            if sharing.kind(g) == POINT:
                p = model.point_probabilities_[g]
                lp += float(np.where(n[g] > 0, n[g] * np.log(np.where(n[g] > 0, p, 1.0)), 0.0).sum())
            else:
                lp += _log_dm(held[g], n[g])
        terms.append(lp)
    return float(logsumexp(terms))


@pytest.fixture(scope="module", params=list(SHARINGS))
def fitted(request):
    name = request.param
    train = _data(1, 60)
    model = ContextualLDHMM(2, n_symbols=V, seed=0, sharing=SHARINGS[name]).fit(train)
    return name, model, train


def test_the_bound_never_exceeds_the_exact_log_marginal(fitted):
    name, model, _ = fitted
    held = _data(9, 12, high=5)
    bound = model.score_samples(held)
    exact = np.array([exact_log_marginal(model, x) for x in held])
    assert np.all(bound <= exact + 1e-9), (bound - exact).max()
    if name == "all-point":  # nothing per sequence but the chain: the bound is log p(x)
        np.testing.assert_allclose(bound, exact, rtol=1e-10)
    ff = ContextualLDHMM(**{**model.get_params(), "guide": "ff"})
    for attr in ("alpha_pi_", "alpha_A_", "beta_", "shared_posterior_", "point_probabilities_"):
        setattr(ff, attr, getattr(model, attr))
    ff.context_table_, ff.n_symbols_ = model.context_table_, model.n_symbols_
    ff.context_counts_, ff.n_features_in_ = model.context_counts_, model.n_symbols_
    assert np.all(ff.score_samples(held) <= bound + 1e-9)


def test_importance_sampling_reaches_the_exact_log_marginal(fitted):
    """The sequence groups drawn from q(theta_m), the shared ones from their q(theta), the point
    ones held: the estimate converges to the brute force (exactly it where all are points)."""
    name, model, _ = fitted
    held = _data(11, 6, high=4)
    exact = np.array([exact_log_marginal(model, x) for x in held])
    estimate = model.log_marginal_is(held, n_samples=3000, seed=1)
    if name == "all-point":
        np.testing.assert_allclose(estimate, exact, rtol=1e-10)
    # Monte Carlo error: up to ~0.06 nats at 3000 draws where q(theta_m) is broad (flat fixed
    # priors); a missing p / q term would be off by nats
    np.testing.assert_allclose(estimate, exact, atol=0.15)
    assert np.all(model.score_samples(held) <= estimate + 0.15)


def test_the_objective_never_falls_and_rescoring_gives_the_training_bound(fitted):
    _, model, train = fitted
    h = np.asarray(model.elbo_history_)
    assert np.all(np.diff(h) >= -1e-9 * np.abs(h[1:]))
    assert model.converged_
    tokens = sum(len(x) for x in train)
    assert abs(model.score(train) - model.elbo_) / tokens < 0.005


def test_the_groups_the_database_shares_are_the_models(fitted):
    name, model, train = fitted
    sharing = SHARINGS[name]
    assert sorted(model.shared_posterior_) == sorted(sharing.groups("shared"))
    assert sorted(model.point_probabilities_) == sorted(sharing.groups(POINT))
    for p in model.point_probabilities_.values():
        assert np.all(p >= 0) and np.allclose(p.sum(-1), 1.0)
    post = model.posterior(train[:4])
    per_sequence = sharing.groups(SEQUENCE)
    assert ("g_pi" in post) == ("pi" in per_sequence) and ("g_A" in post) == ("A" in per_sequence)
    assert ("B_counts" in post) == ("B" in per_sequence)
    proba = model.predict_next_proba(train[:4])
    assert proba.shape == (4, V) and np.allclose(proba.sum(1), 1.0)
    assert [len(p) for p in model.decode(train[:4])] == [len(x) for x in train[:4]]
    description = model.describe(train[:20])
    assert len(description.contexts) > 0
    row = description.summary.set_index("field").loc["sharing (pi, A, B)", "value"]
    assert row.startswith(", ".join(sharing.kind(g) for g in ("pi", "A", "B")))


def test_a_model_file_keeps_the_sharing(fitted, tmp_path):
    name, model, train = fitted
    path = tmp_path / "m.json"
    model.save(path)
    back = load_model(path)
    assert back.parameter_sharing == SHARINGS[name]
    np.testing.assert_array_equal(back.score_samples(train[:5]), model.score_samples(train[:5]))
    doc = json.loads(path.read_text())
    if model.point_probabilities_:
        doc["point"] = {}
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(doc))
        with pytest.raises(ModelFileError, match=re.escape("point")) as err:
            load_model(bad)
        assert "\n" not in str(err.value)


def test_ldhmm_sharing_writes_the_files_of_before():
    model = ContextualLDHMM(2, n_symbols=V, max_iter=3).fit(_data(2, 20))
    assert "sharing" not in model.get_config() and "prior_concentration" not in model.get_config()
    assert model.parameter_sharing == LDHMM_SHARING
    assert model.shared_posterior_ == {} and model.point_probabilities_ == {}


@pytest.mark.parametrize(
    "make, sharing",
    [
        (lambda: VariantHMM(2, sharing=VBHMM_SHARING, emission_context=1), VBHMM_SHARING),
        (lambda: HMMV(2, emission_context="previous"), None),
        (lambda: VBHMM(2, emission_context="previous"), None),
        (
            lambda: VariantHMM(2, sharing=HMMV_SHARING, prior_concentration=2.0, emission_context=1),
            HMMV_SHARING,
        ),
    ],
)
def test_the_switch_gives_the_contextual_model_of_any_sharing(make, sharing):
    model = make()
    assert type(model) is ContextualLDHMM
    if sharing is not None:
        assert model.parameter_sharing == sharing
    assert model.parameter_sharing != LDHMM_SHARING
    model.set_params(max_iter=3) if hasattr(model, "set_params") else None
    model.fit(_data(4, 20))
    assert np.isfinite(model.elbo_)


def test_bad_sharing_is_one_line():
    with pytest.raises(ValueError, match="sharing must be a ParameterSharing") as err:
        ContextualLDHMM(2, sharing="vb")
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="sharing: sharing of pi must be one of"):
        ContextualLDHMM(2, sharing={"pi": "global"})
    with pytest.raises(ValueError, match="prior_concentration must be a finite number > 0"):
        ContextualLDHMM(2, prior_concentration=0)
