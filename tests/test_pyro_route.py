"""The generic Pyro route: exact forward algorithm, ELBOs against brute force, gradients against
finite differences, model checks, fit/score, the harness, and the bound against the PF bound."""

import importlib.util
import itertools
import math
from pathlib import Path

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO, TraceEnum_ELBO
from torch.distributions import constraints

import ldhmm
from ldhmm.data import load_paper_subset
from ldhmm.experiments.pyro_variants import parse_args
from ldhmm.inference import (
    LDHMM_SHARING,
    Bucket,
    PFGuide,
    VariantParameters,
    VariationalEM,
    default_starts,
    kl_dirichlet,
)
from ldhmm.inference.copies import content_keys
from ldhmm.inference.monitor import ConvergenceMonitor, SmoothedPatience
from ldhmm.inference.ops.forward import chain_log_likelihood, gather_emissions
from ldhmm.inference.svi.dirichlet_guide import CONCENTRATION, DirichletMeanField
from ldhmm.inference.svi.hmm_distribution import MaskedCategoricalHMM
from ldhmm.inference.svi.log_weights import sequence_log_weights
from ldhmm.inference.svi.minibatch import auto_batch_size, length_batches, pad_batch
from ldhmm.inference.svi.model_check import ModelCheckError
from ldhmm.inference.svi.svi_fit import copy_param_state, fit_svi, set_param_values
from ldhmm.models import NotFittedError
from ldhmm.models.mixture import mixture_ldhmm_model
from ldhmm.models.pyro_model import ldhmm_init, ldhmm_pf_offsets, ldhmm_sequence_model
from ldhmm.models.pyro_sequence import PyroSequenceModel
from ldhmm.models.sticky import sticky_ldhmm

_SPEC = importlib.util.spec_from_file_location(
    "reference_chain", Path(__file__).with_name("reference_chain.py")
)
reference_chain = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(reference_chain)
forward_backward_log = reference_chain.forward_backward_log  # the log-space reference twin

TINY = [np.array([0, 2, 1, 1]), np.array([2]), np.array([1, 0, 2])]
K, V = 2, 3
HYPER = {
    "alpha_pi": torch.tensor([1.5, 0.7]),
    "alpha_A": torch.tensor([[3.0, 1.0], [0.8, 2.0]]),
    "beta": torch.tensor([[2.0, 0.5, 1.0], [0.6, 1.5, 2.5]]),
}
# a q(theta) per sequence that is not the prior
Q = {
    "q_pi": torch.tensor([[2.0, 1.0], [1.2, 0.9], [0.8, 2.2]]),
    "q_A": torch.tensor([[[4.0, 1.5], [1.0, 3.0]], [[3.0, 1.0], [0.9, 2.1]], [[2.5, 2.0], [1.0, 4.0]]]),
    "q_B": torch.tensor(
        [
            [[3.0, 1.0, 2.0], [1.0, 3.5, 2.5]],
            [[2.0, 0.6, 2.0], [0.7, 1.6, 3.5]],
            [[2.5, 1.5, 1.5], [1.6, 1.5, 3.0]],
        ]
    ),
}


def _all_paths_log_lik(log_pi, log_A, log_B, x):
    """log p(x | theta) by summing every hidden path, batched over leading dimensions."""
    terms = []
    for path in itertools.product(range(log_pi.shape[-1]), repeat=len(x)):
        t = log_pi[..., path[0]] + log_B[..., path[0], int(x[0])]
        for n in range(1, len(x)):
            t = t + log_A[..., path[n - 1], path[n]] + log_B[..., path[n], int(x[n])]
        terms.append(t)
    return torch.logsumexp(torch.stack(terms), 0)


def _brute_force_elbo(q, m, n_draws=20000):
    """E_q[log p(x_m | theta)] - KL(q || p): all paths, Monte Carlo over theta; (mean, stderr)."""
    g = {k: q[f"q_{k}"][m] for k in ("pi", "A", "B")}
    draws = {k: dist.Dirichlet(v).sample((n_draws,)) for k, v in g.items()}
    ll = _all_paths_log_lik(*(draws[k].log() for k in ("pi", "A", "B")), TINY[m])
    kl = (
        kl_dirichlet(g["pi"], HYPER["alpha_pi"])
        + kl_dirichlet(g["A"], HYPER["alpha_A"]).sum()
        + kl_dirichlet(g["B"], HYPER["beta"]).sum()
    )
    return float(ll.mean() - kl), float(ll.std() / math.sqrt(n_draws))


def _with_fixed_q(model, hyper, q, fn):
    """Run ``fn(guide, batch)`` with given hyper-parameters and a free (non-relative) guide at ``q``."""
    batch = pad_batch(TINY, range(len(TINY)), len(TINY), K, V, torch.float64)
    guide = DirichletMeanField(model, relative=False)
    with pyro.get_param_store().scope(), torch.random.fork_rng():
        torch.manual_seed(0)
        poutine.block(poutine.trace(model).get_trace)(batch)
        set_param_values(hyper)
        poutine.block(guide)(batch)
        assert set_param_values(q) == set(q)
        return fn(guide, batch)


# ---------------------------------------------------------------- forward algorithm
def test_forward_scan_matches_reference_and_all_paths():
    gen = torch.Generator().manual_seed(0)
    M, T = 5, 6
    log_pi = torch.randn(M, 3, generator=gen).log_softmax(-1)
    log_A = torch.randn(M, 3, 3, generator=gen).log_softmax(-1)
    log_B = torch.randn(M, 3, 4, generator=gen).log_softmax(-1)
    lengths = torch.tensor([6, 1, 3, 5, 2])
    mask = torch.arange(T)[None] < lengths[:, None]
    tokens = torch.randint(0, 4, (M, T), generator=gen)
    log_obs = gather_emissions(log_B, tokens)
    ours = chain_log_likelihood(log_pi, log_A, log_obs, mask)
    torch.testing.assert_close(ours, forward_backward_log(log_pi, log_A, log_obs, mask).log_normalizer)
    for m in range(M):
        n = int(lengths[m])
        brute = _all_paths_log_lik(log_pi[m], log_A[m], log_B[m], tokens[m, :n])
        torch.testing.assert_close(ours[m], brute)
    # leading sample dimensions broadcast; the distribution returns one number per sequence
    stacked = MaskedCategoricalHMM(log_pi.expand(2, M, 3), log_A, log_B, mask).log_prob(tokens)
    assert stacked.shape == (2, M)
    torch.testing.assert_close(stacked[1], ours)


def test_forward_scan_gradients_match_finite_differences():
    gen = torch.Generator().manual_seed(1)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    tokens = torch.randint(0, 3, (2, 5), generator=gen)
    inputs = (
        torch.randn(2, 2, generator=gen, requires_grad=True),
        torch.randn(2, 2, 2, generator=gen, requires_grad=True),
        torch.randn(2, 2, 3, generator=gen, requires_grad=True),
    )

    def log_lik(li, lt, le):
        return chain_log_likelihood(li, lt, gather_emissions(le, tokens), mask)

    assert torch.autograd.gradcheck(log_lik, inputs)


def test_sampled_sequences_have_the_model_frequencies():
    probs = (
        torch.tensor([0.7, 0.3]),
        torch.tensor([[0.9, 0.1], [0.2, 0.8]]),
        torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
    )
    mask = torch.ones(1, 3, dtype=torch.bool)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        x = MaskedCategoricalHMM.from_probs(*probs, mask).sample((20000,))
    assert x.shape == (20000, 1, 3)
    # emissions are the states here: P(x_1 = 0) = 0.7, P(x_2 = 0) = 0.7 * 0.9 + 0.3 * 0.2
    assert abs(float((x[:, 0, 0] == 0).double().mean()) - 0.7) < 0.015
    assert abs(float((x[:, 0, 1] == 0).double().mean()) - 0.69) < 0.015


# ---------------------------------------------------------------- ELBO against brute force
def _route(model, elbo, n_particles):
    """The route's per-sequence log weights and ``elbo``'s loss of ``model``, ``n_particles`` each."""

    def route(guide, batch):
        log_w = sequence_log_weights(model, guide, batch, n_particles)
        loss = elbo(num_particles=n_particles, vectorize_particles=True, max_plate_nesting=1).loss(
            model, guide, batch
        )
        return log_w, loss

    return route


def test_route_elbo_matches_brute_force():
    route = _route(ldhmm_sequence_model, Trace_ELBO, 4000)
    log_w, loss = _with_fixed_q(ldhmm_sequence_model, HYPER, Q, route)
    brute = [_brute_force_elbo(Q, m) for m in range(len(TINY))]
    for m, (value, se) in enumerate(brute):
        mean, se_route = float(log_w[:, m].mean()), float(log_w[:, m].std() / math.sqrt(4000))
        assert abs(mean - value) < 4 * math.hypot(se, se_route) + 1e-9, (m, mean, value)
    total = sum(v for v, _ in brute)
    spread = 4 * math.sqrt(sum(se**2 for _, se in brute)) + 4 * float(log_w.sum(1).std() / math.sqrt(4000))
    assert abs(-loss - total) < spread, (-loss, total)


def test_enumerated_type_is_summed_out_exactly():
    hyper = {
        "type_weights": torch.tensor([0.3, 0.7]),
        "alpha_pi": torch.stack([HYPER["alpha_pi"], HYPER["alpha_pi"].flip(0)]),
        "alpha_A": torch.stack([HYPER["alpha_A"], 2 * HYPER["alpha_A"].T]),
        "beta": torch.stack([HYPER["beta"], HYPER["beta"].flip(1)]),
    }
    route = _route(mixture_ldhmm_model, TraceEnum_ELBO, 3000)
    log_w, loss = _with_fixed_q(mixture_ldhmm_model, hyper, Q, route)
    total, var = 0.0, 0.0
    for m, x in enumerate(TINY):
        g = {k: Q[f"q_{k}"][m] for k in ("pi", "A", "B")}
        draws = {k: dist.Dirichlet(v).sample((20000,)) for k, v in g.items()}
        ll = _all_paths_log_lik(*(draws[k].log() for k in ("pi", "A", "B")), x)
        log_prior = torch.stack(
            [
                hyper["type_weights"][c].log()
                + dist.Dirichlet(hyper["alpha_pi"][c]).log_prob(draws["pi"])
                + dist.Dirichlet(hyper["alpha_A"][c]).log_prob(draws["A"]).sum(-1)
                + dist.Dirichlet(hyper["beta"][c]).log_prob(draws["B"]).sum(-1)
                for c in range(2)
            ]
        ).logsumexp(0)
        log_q = sum(dist.Dirichlet(g[k]).log_prob(draws[k]).reshape(20000, -1).sum(-1) for k in g)
        w = ll + log_prior - log_q
        value, se = float(w.mean()), float(w.std() / math.sqrt(20000))
        se_route = float(log_w[:, m].std() / math.sqrt(3000))
        assert abs(float(log_w[:, m].mean()) - value) < 4 * math.hypot(se, se_route), m
        total, var = total + value, var + se**2 + se_route**2
    assert abs(-loss - total) < 4 * math.sqrt(2 * var) + 0.05


def test_elbo_gradient_matches_finite_differences():
    """d(-ELBO)/du with alpha_A = 0.02 + exp(u) (the store's coordinates): autograd through the
    forward scan and the Dirichlet densities against central differences (fixed draws: the
    free guide does not depend on alpha)."""
    loss_fn = Trace_ELBO(num_particles=64, vectorize_particles=True, max_plate_nesting=1).differentiable_loss

    def run(guide, batch):
        store = pyro.get_param_store()

        def loss_at(alpha_A):
            set_param_values({"alpha_A": alpha_A})
            with torch.random.fork_rng():
                torch.manual_seed(7)
                return loss_fn(ldhmm_sequence_model, guide, batch)

        base = HYPER["alpha_A"]
        loss = loss_at(base)
        unconstrained = store["alpha_A"].unconstrained()
        (grad,) = torch.autograd.grad(loss, [unconstrained])
        to_alpha = torch.distributions.transform_to(CONCENTRATION)  # the store's coordinates
        u0, h = to_alpha.inv(base), 1e-5
        for i, j in itertools.product(range(K), range(K)):
            step = torch.zeros(K, K)
            step[i, j] = h
            fd = float((loss_at(to_alpha(u0 + step)) - loss_at(to_alpha(u0 - step))).detach()) / (2 * h)
            assert abs(fd - float(grad[i, j])) < 1e-6 * max(1.0, abs(fd)), (i, j)
        return grad

    grad = _with_fixed_q(ldhmm_sequence_model, HYPER, Q, run)
    assert torch.all(torch.isfinite(grad)) and float(grad.abs().max()) > 1e-3


# ---------------------------------------------------------------- a user's mistakes
def _missing_event(batch):
    alpha_A = pyro.param(
        "alpha_A", lambda: torch.ones(batch.n_states, batch.n_states), constraint=constraints.positive
    )
    with batch.plate():
        pi = pyro.sample("pi", dist.Dirichlet(torch.ones(batch.n_states)))
        A = pyro.sample("A", dist.Dirichlet(alpha_A))  # forgot .to_event(1)
        B = pyro.sample("B", dist.Dirichlet(torch.ones(batch.n_states, batch.n_symbols)).to_event(1))
        pyro.sample("x", MaskedCategoricalHMM.from_probs(pi, A, B, batch.mask), obs=batch.tokens)


def _unsummed_factor(batch):
    with batch.plate():
        pyro.factor("x", torch.zeros(batch.batch_size, 1))


def _unguided(batch):
    with batch.plate():
        pyro.sample("pi", dist.Dirichlet(torch.ones(batch.n_states)))
        pyro.sample(
            "x",
            dist.Categorical(logits=torch.zeros(batch.n_symbols)).expand([batch.batch_size, 1]).to_event(1),
            obs=batch.tokens[:, :1],
        )


def _pi_only_guide(batch):
    pass


@pytest.mark.parametrize(
    "model, guide, message",
    [
        (_missing_event, "dirichlet", r"site A\b"),
        (_unsummed_factor, "dirichlet", r"site 'x': log-density of shape \(5, 5\), expected \(5,\)"),
        (_unguided, _pi_only_guide, r"model site 'pi' is latent but the guide does not sample it"),
    ],
    ids=["missing-to_event", "unsummed-factor", "unguided-site"],
)
def test_model_errors_name_the_site(small_db, model, guide, message):
    with pytest.raises(ModelCheckError, match=message):
        PyroSequenceModel(model, guide, 3, n_symbols=4, batch_size=5).fit(small_db[:5])


# ---------------------------------------------------------------- fit, score, harness
def test_convergence_rule_stops_after_patience():
    monitor = ConvergenceMonitor(SmoothedPatience(tol=0.0, patience=3, smoothing=0.0), 100)
    stops = [monitor.record(v) for v in [-3.0, -2.0, -1.0, -1.5, -1.2, -1.1]]
    assert stops == [False] * 5 + [True] and monitor.converged and monitor.reason == "converged"
    with pytest.raises(ValueError, match="patience"):
        SmoothedPatience(patience=0)


def test_fit_and_score(small_db):
    train, test = small_db[:60], small_db[100:110]
    model = sticky_ldhmm(2, 4, seed=0, max_epochs=12, batch_size=16, score_epochs=3, score_draws=16)
    with pytest.raises(NotFittedError):
        model.score_samples(test)
    assert model.fit(train) is model
    assert 1 <= model.n_iter_ <= 12 and len(model.elbo_history_) == model.n_iter_
    assert np.all(np.isfinite(model.elbo_history_)) and model.elbo_history_[-1] > model.elbo_history_[0]
    assert set(model.params_) == {"alpha_pi", "trans_base", "kappa", "beta"} and model.params_["kappa"] > 0
    assert set(model.local_params_) == {"q_pi", "q_A", "q_B"}
    assert "model" not in model.get_config() and model.score_kind == "lower_bound"
    bound = model.score_samples(test)
    assert bound.shape == (10,) and np.all(np.isfinite(bound)) and np.all(bound < 0)
    np.testing.assert_array_equal(bound, model.score_samples(test))  # seeded
    is_ = model.log_marginal_is(test, n_samples=32, seed=1)
    assert is_.shape == (10,) and np.mean(is_ - bound) > -0.05


def small_sticky(n_states, n_symbols, seed):
    """A module-level factory, as the harness records it."""
    return sticky_ldhmm(n_states, n_symbols, seed, max_epochs=4, batch_size=16, score_epochs=2, score_draws=8)


def test_the_harness_runs_a_pyro_variant(small_db, tmp_path):
    result = ldhmm.compare(
        {"sticky": small_sticky, "LDHMM-PF": None},
        small_db[:40],
        states=[2],
        folds=2,
        out=tmp_path / "run",
        restarts=1,
        max_iter=5,
        is_samples=8,
        quiet=True,
    )
    assert result.errors == []
    rows = result.folds[result.folds.model == "sticky"]
    assert len(rows) == 2 and set(rows.score_kind) == {"lower_bound"}
    assert np.all(np.isfinite(rows.heldout_elbo)) and np.all(np.isfinite(rows.heldout_is))


# ---------------------------------------------------------------- against the closed form
def test_route_bound_is_at_least_the_pf_bound(true_model, small_db):
    """Hidden states summed out: at the PF fit's own q(theta), the route's bound of every
    sequence is at least its PF bound (within Monte Carlo error), and so is the total of the
    route's scorer started there."""
    seqs = small_db[:12]
    pf = true_model.score_samples(seqs)
    hyper = {"alpha_pi": true_model.alpha_pi_, "alpha_A": true_model.alpha_A_, "beta": true_model.beta_}
    # the held-out local fit's start (ldhmm_pf_offsets.held_out, as score_samples runs it)
    guide = DirichletMeanField(ldhmm_sequence_model, init_offsets=ldhmm_pf_offsets.held_out)
    route = PyroSequenceModel.from_parameters(
        ldhmm_sequence_model,
        DirichletMeanField(ldhmm_sequence_model, init_offsets=ldhmm_pf_offsets),
        3,
        4,
        hyper,
        score_epochs=0,
        score_draws=2000,
    )
    posterior = true_model.posterior(seqs)
    batches = length_batches(seqs, 64, 3, 4)
    with pyro.get_param_store().scope(copy_param_state(route.param_state_)), torch.random.fork_rng():
        torch.manual_seed(0)
        guide.initialize(batches)
        store = pyro.get_param_store()
        for g in ("pi", "A", "B"):  # the route's q(theta) is the PF fit's
            np.testing.assert_allclose(
                (
                    store[f"q_{g}"]
                    + torch.as_tensor(
                        getattr(true_model, {"pi": "alpha_pi_", "A": "alpha_A_", "B": "beta_"}[g])
                    )
                )
                .detach()
                .numpy(),
                posterior[f"g_{g}"],
                rtol=1e-4,
            )
        (batch,) = batches
        log_w = sequence_log_weights(ldhmm_sequence_model, guide, batch, 2000).numpy()
    mean, se = log_w.mean(0), log_w.std(0) / math.sqrt(2000)
    assert np.all(mean + 4 * se >= pf[batch.index.numpy()]), (mean - pf[batch.index.numpy()]) / se
    scores = route.score_samples(seqs)
    assert scores.sum() >= pf.sum() - 4 * math.sqrt(np.sum(se**2))


@pytest.mark.parametrize("refresh", [True, False])
def test_refreshed_local_rows_are_the_guides_start(refresh):
    """With the globals frozen, a refreshing fit leaves every row at ``local_start`` (the PF
    E-step's counts under the priors); without refreshing, the rows move from there."""
    guide = DirichletMeanField(ldhmm_sequence_model, init_offsets=ldhmm_pf_offsets)
    rule = SmoothedPatience(patience=5)
    result = fit_svi(
        ldhmm_sequence_model,
        guide,
        TINY,
        K,
        V,
        init=HYPER,
        frozen=list(HYPER),
        batch_size=2,
        rule=rule,
        max_epochs=3,
        refresh_locals=refresh,
    )
    batch = pad_batch(TINY, range(len(TINY)), len(TINY), K, V, torch.float64)
    prior = {"pi": HYPER["alpha_pi"][None], "A": HYPER["alpha_A"][None], "B": HYPER["beta"][None]}
    want = ldhmm_pf_offsets(batch, prior)
    state = result.param_state
    for site in ("pi", "A", "B"):
        got = torch.distributions.transform_to(state["constraints"][f"q_{site}"])(
            state["params"][f"q_{site}"]
        )
        if refresh:
            torch.testing.assert_close(got.detach(), want[site].clamp_min(torch.finfo(torch.float64).tiny))
        else:
            assert not torch.allclose(got.detach(), want[site])
    assert result.n_epochs == 3


def test_the_local_start_is_a_fits_e_step_not_the_held_out_one(data_dir):
    """``ldhmm_pf_offsets`` is the closed form's E-step from a fit's starts (prior, means,
    random draws): the held-out E-step's extra starts (factorized, constant, smoothed) win
    corner solutions at the route's first priors, which the SVI steps did not leave (sticky on
    Entree, fold 0, K = 2: held-out -697.23 with them, -688.67 without)."""
    engine = VariationalEM(PFGuide())
    assert (
        engine.fit_starts()
        == default_starts(PFGuide())
        == ("prior", "mean", "random:0", "random:1", "random:2")
    )
    seqs = list(load_paper_subset("entree", data_dir).sequences[:40])
    K_, V_ = 2, max(int(s.max()) for s in seqs) + 1
    batch = pad_batch(seqs, range(len(seqs)), len(seqs), K_, V_, torch.float64)
    init = ldhmm_init(seqs, K_, V_)
    prior = {"pi": init["alpha_pi"][None], "A": init["alpha_A"][None], "B": init["beta"][None]}
    got = ldhmm_pf_offsets(batch, prior)
    bucket = Bucket(torch.arange(len(seqs)), batch.tokens, batch.lengths, batch.mask)
    bucket.start_keys = torch.from_numpy(content_keys(seqs))  # the random draws hashed from content
    params = VariantParameters(LDHMM_SHARING, prior={g: prior[g][0].double() for g in ("pi", "A", "B")})
    (fit_state,) = engine.score([bucket], params, starts=engine.fit_starts())
    (held_state,) = engine.score([bucket], params)
    held = ldhmm_pf_offsets.held_out(batch, prior)  # where a held-out local fit starts
    for g in ("pi", "A", "B"):
        assert torch.equal(got[g], fit_state.counts[g])
        assert torch.equal(held[g], held_state.counts[g])
    # the two start sets do differ here: the test would see a return to the held-out E-step
    assert bool((held_state.elbo > fit_state.elbo + 1e-9).any())


def test_auto_batch_size_and_its_checks():
    assert auto_batch_size(380) == 64 and auto_batch_size(8192) == 64 and auto_batch_size(31071) == 243
    assert sticky_ldhmm(2, 3).batch_size == "auto"
    for bad in ("big", 0, 2.5, True):
        with pytest.raises(ValueError, match="batch_size"):
            sticky_ldhmm(2, 3, batch_size=bad)
    with pytest.raises(ValueError, match="score_lr"):
        sticky_ldhmm(2, 3, score_lr=0.0)


def test_an_autoguide_has_its_local_rows_served_and_fitted(small_db):
    """AutoNormal's per-sequence locs and scales are local rows too (PyroModule parameters go
    through the same ``pyro.param`` messages); its fit climbs and its scores are finite."""
    model = PyroSequenceModel(
        ldhmm_sequence_model,
        "normal",
        2,
        n_symbols=4,
        max_epochs=6,
        batch_size=16,
        score_epochs=2,
        score_draws=8,
    )
    model.fit(small_db[:48])
    assert {"AutoNormal.locs.pi", "AutoNormal.scales.B"} <= set(model.local_params_)
    locs = model.param_state_["params"]["AutoNormal.locs.pi"]
    assert locs.shape[0] == 48 and bool(torch.isfinite(locs).all())
    assert model.elbo_history_[-1] > model.elbo_history_[0]
    assert np.all(np.isfinite(model.score_samples(small_db[100:105])))


def test_pyro_variants_command_line():
    args = parse_args(["--measure"])
    assert args.states is None and args.batch_size == "auto"
    assert parse_args(["--data", "msnbc", "--states", "4", "--batch-size", "256"]).batch_size == 256
    with pytest.raises(SystemExit):
        parse_args(["--batch-size", "many"])
