"""A variant of the SVI route has the per-sequence methods of the closed form: ``posterior``,
``predict_next_proba``, ``decode``, checked against brute force (every hidden path) under
independent draws of the same Dirichlet ``q(theta_m)``; its ``device=`` argument."""

from __future__ import annotations

import itertools

import numpy as np
import pyro
import pytest
import torch

from ldhmm import LDHMM
from ldhmm.experiments.svi_cross_check import ldhmm_route

K, V = 2, 3
DRAWS = 3000  # Monte Carlo draws of the model's means and of the brute-force route alike


@pytest.fixture(scope="module")
def fitted():
    """The route's LDHMM fitted briefly on a seeded database; two short held-out sequences."""
    truth = LDHMM.from_hyperparameters([1, 2], [[5, 1], [1, 5]], [[6, 1, 1], [1, 1, 6]])
    seqs = truth.sample(40, lengths=np.random.default_rng(0).integers(4, 8, 40), seed=1)
    model = ldhmm_route(K, V, seed=0, max_epochs=4, score_epochs=3, score_draws=DRAWS).fit(seqs)
    held = [np.array([0, 0, 2, 2, 2]), np.array([1, 0, 0, 2, 1, 0])]
    return model, held


def _q_concentrations(model, held) -> list[dict]:
    """Each held-out sequence's Dirichlet q(theta_m) after the local fit the methods run."""
    _, state, _ = model.fit_local(held)
    with pyro.get_param_store().scope(state):  # local rows in the order of the sequences
        offsets = {g: pyro.param(f"q_{g}").detach().numpy() for g in ("pi", "A", "B")}
    priors = {"pi": "alpha_pi", "A": "alpha_A", "B": "beta"}
    return [{g: offsets[g][m] + model.params_[priors[g]] for g in priors} for m in range(len(held))]


def _brute_force(x, conc, rng, n_draws=DRAWS):
    """Means over draws theta ~ q of p(z_n | x, theta) and p(x_(N+1) | x, theta), every path
    of length N + 1 enumerated (the last state and symbol summed or kept)."""
    N = len(x)
    paths = np.array(list(itertools.product(range(K), repeat=N + 1)))  # (P, N + 1)
    marginals, next_proba = np.zeros((N, K)), np.zeros(V)
    for _ in range(n_draws):
        pi = rng.dirichlet(conc["pi"])
        A = np.array([rng.dirichlet(row) for row in conc["A"]])
        B = np.array([rng.dirichlet(row) for row in conc["B"]])
        joint = pi[paths[:, 0]] * np.prod(A[paths[:, :-1], paths[:, 1:]], axis=1)  # p(z_1..z_(N+1))
        joint = joint * np.prod(B[paths[:, :N], x], axis=1)  # times p(x_1..x_N | z)
        post = joint / joint.sum()
        for n in range(N):
            marginals[n] += np.bincount(paths[:, n], weights=post, minlength=K)
        next_proba += post @ B[paths[:, N]]  # p(x_(N+1) = v | z_(N+1)) under p(z | x)
    return marginals / n_draws, next_proba / n_draws


def test_posterior_and_prediction_match_brute_force(fitted):
    model, held = fitted
    post = model.posterior(held)
    proba = model.predict_next_proba(held)
    rng = np.random.default_rng(7)
    for m, (x, conc) in enumerate(zip(held, _q_concentrations(model, held))):
        # posterior means of the chain: the Dirichlet means of q
        np.testing.assert_allclose(post["pi_mean"][m], conc["pi"] / conc["pi"].sum(), atol=0.03)
        np.testing.assert_allclose(post["A_mean"][m], conc["A"] / conc["A"].sum(-1, keepdims=True), atol=0.03)
        np.testing.assert_allclose(post["B_mean"][m], conc["B"] / conc["B"].sum(-1, keepdims=True), atol=0.03)
        marginals, next_proba = _brute_force(x, conc, rng)
        assert post["state_marginals"][m].shape == (len(x), K)
        np.testing.assert_allclose(post["state_marginals"][m], marginals, atol=0.05)
        np.testing.assert_allclose(proba[m], next_proba, atol=0.05)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-12)
    # the posterior's ELBO is score_samples' (the same pass, seeded alike), and the draws are seeded
    np.testing.assert_array_equal(post["elbo"], model.score_samples(held))
    np.testing.assert_array_equal(model.predict_next_proba(held), proba)


def test_decode_is_viterbi_under_the_posterior_means(fitted):
    model, held = fitted
    post = model.posterior(held)
    for m, (x, path) in enumerate(zip(held, model.decode(held))):
        candidates = np.array(list(itertools.product(range(K), repeat=len(x))))
        log_pi, log_A, log_B = (np.log(post[f"{g}_mean"][m]) for g in ("pi", "A", "B"))
        scores = (
            log_pi[candidates[:, 0]]
            + log_A[candidates[:, :-1], candidates[:, 1:]].sum(1)
            + log_B[candidates, x].sum(1)
        )
        assert path.dtype == np.int64
        np.testing.assert_array_equal(path, candidates[np.argmax(scores)])


def test_device_argument(fitted):
    model, held = fitted
    settings = dict(max_epochs=2, score_epochs=1, score_draws=4)
    data = held * 3
    default = ldhmm_route(K, V, seed=0, **settings).fit(data)
    for device in ("cpu", torch.device("cpu")):
        on_cpu = ldhmm_route(K, V, seed=0, device=device, **settings).fit(data)
        assert on_cpu.device == "cpu"
        for name, value in default.params_.items():
            np.testing.assert_array_equal(on_cpu.params_[name], value)
        np.testing.assert_array_equal(on_cpu.score_samples(held), default.score_samples(held))
    for bad, needle in (
        ("gpu7", "device must be a torch device such as 'cpu' or 'cuda:0', got 'gpu7'"),
        (3, "device must be a torch device"),
        ("meta", "device 'meta' holds no values"),
    ):
        with pytest.raises(ValueError, match=needle) as err:
            ldhmm_route(K, V, device=bad)
        assert "\n" not in str(err.value)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device 'cuda' cannot be used here") as err:
            ldhmm_route(K, V, device="cuda")
        assert "\n" not in str(err.value)
