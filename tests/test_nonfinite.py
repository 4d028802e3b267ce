"""Nothing escapes as a NaN: a fit whose ELBO turns non-finite stops with a named error and keeps
its last finite parameters; ``score_samples`` of a valid model and valid sequences is finite."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldhmm import LDHMM
from ldhmm.experiments.datasets import synthetic_database
from ldhmm.inference import em as em_module
from ldhmm.inference.em import NonFiniteELBOError


@pytest.mark.parametrize("group", ["pi", "A", "B"])
def test_fit_stops_naming_iteration_and_group(monkeypatch, group):
    db = synthetic_database(30, seed=1)
    real = em_module.m_step
    calls = []

    def poisoned(params, totals, **kw):
        new, elbo, capped = real(params, totals, **kw)
        if group not in new.prior:  # the database-level HMM fitted first (effort "standard")
            return new, elbo, capped
        calls.append(1)
        if len(calls) == 3:
            new.prior[group] = new.prior[group].clone()
            new.prior[group].view(-1)[0] = float("nan")
            return new, float("nan"), capped
        return new, elbo, capped

    monkeypatch.setattr(em_module, "m_step", poisoned)
    model = LDHMM(2, seed=0, n_init=1, max_iter=10)
    with pytest.raises(NonFiniteELBOError) as info:
        model.fit(db.sequences)
    err = info.value
    assert err.iteration == 3 and err.group == group and err.step == "M"
    assert "iteration 3" in str(err) and f"group {group}" in str(err)
    # the stop is reported as every other stop: reason, iterations (the failed one counts)
    assert err.convergence.reason == "non_finite" and err.convergence.n_iter == 3
    assert model.convergence_ is err.convergence and model.n_iter_ == 3 and not model.converged_
    for g in ("pi", "A", "B"):
        assert np.isfinite(model.params_.prior[g].numpy()).all()
    assert np.isfinite(model.score_samples(db.sequences)).all()


@settings(max_examples=60, deadline=None)
@given(
    K=st.integers(1, 4),
    V=st.integers(1, 7),
    log_conc=st.lists(st.floats(-6, 6), min_size=1, max_size=200),
    lengths=st.lists(st.integers(1, 60), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
)
def test_score_samples_is_finite_for_any_valid_model(K, V, log_conc, lengths, seed):
    """Priors anywhere in the M-step's box [1e-6, 1e6] (its edges included), any sequences."""
    rng = np.random.default_rng(seed)
    pool = np.asarray(log_conc)
    draw = lambda *shape: 10.0 ** rng.choice(pool, size=shape)  # noqa: E731
    model = LDHMM.from_hyperparameters(draw(K), draw(K, K), draw(K, V))
    seqs = [rng.integers(0, V, size=n) for n in lengths]
    scores = model.score_samples(seqs)
    assert np.all(np.isfinite(scores)), scores
    assert np.all(scores <= 1e-9)  # a bound on a log-probability
