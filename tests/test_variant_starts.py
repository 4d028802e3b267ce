"""A start written for LDHMM's sites names the site a variant lacks (``ModelCheckError``), never
a ``KeyError`` from inside it (``ldhmm.inference.svi.dirichlet_guide.check_offset_sites``)."""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import pytest

from ldhmm import LDHMM
from ldhmm.inference.svi.dirichlet_guide import DirichletMeanField
from ldhmm.inference.svi.model_check import ModelCheckError
from ldhmm.models.pyro_model import ldhmm_pf_offsets, ldhmm_priors, observe_hmm
from ldhmm.models.pyro_sequence import PyroSequenceModel


@pytest.fixture(scope="module")
def train():
    truth = LDHMM.from_hyperparameters([1, 2], [[5, 1], [1, 5]], [[4, 1, 1], [1, 1, 4]])
    return truth.sample(12, lengths=np.random.default_rng(0).integers(3, 8, 12), seed=1)


def renamed_model(batch):
    """LDHMM with its transition site called ``trans``."""
    alpha_pi, alpha_A, beta = ldhmm_priors(batch)
    with batch.plate():
        pi = pyro.sample("pi", dist.Dirichlet(alpha_pi))
        A = pyro.sample("trans", dist.Dirichlet(alpha_A).to_event(1))
        B = pyro.sample("B", dist.Dirichlet(beta).to_event(1))
        observe_hmm(batch, pi, A, B)


def one_state_emissions_model(batch):
    """Emissions of a single shared row: site ``B`` of event shape (V,) where LDHMM's is (K, V)."""
    alpha_pi, alpha_A, beta = ldhmm_priors(batch)
    with batch.plate():
        pi = pyro.sample("pi", dist.Dirichlet(alpha_pi))
        A = pyro.sample("A", dist.Dirichlet(alpha_A).to_event(1))
        row = pyro.sample("B", dist.Dirichlet(beta[0]))
        observe_hmm(batch, pi, A, row[..., None, :].expand(row.shape[:-1] + (batch.n_states, row.shape[-1])))


def _fit(model, init_offsets, data):
    guide = DirichletMeanField(model, init_offsets=init_offsets)
    return PyroSequenceModel(model, guide, 2, n_symbols=3, max_epochs=1).fit(data)


def test_a_missing_site_is_named(train):
    with pytest.raises(ModelCheckError, match=r"needs the model's Dirichlet sites 'pi', 'A', 'B'.*no 'A'"):
        _fit(renamed_model, ldhmm_pf_offsets, train)


def test_a_site_of_another_shape_is_named(train):
    with pytest.raises(ModelCheckError, match=r"site 'B' of event shape \(2, 3\); the model's is \(3,\)"):
        _fit(one_state_emissions_model, ldhmm_pf_offsets, train)


def test_an_undeclared_start_that_reads_a_missing_site_is_named(train):
    def my_offsets(batch, priors):
        return {"A": priors["A"][0].expand((batch.batch_size,) + priors["A"].shape[1:]) * 0}

    with pytest.raises(ModelCheckError, match=r"asked for site 'A'.*those are: pi, trans, B"):
        _fit(renamed_model, my_offsets, train)


def test_the_start_runs_on_the_sites_it_needs(train):
    model = _fit(renamed_model, None, train)  # no start: the renamed model itself is fine
    assert np.isfinite(model.score_samples(train[:2])).all()
