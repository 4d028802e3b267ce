"""LDHMM with contextual emissions in Pyro (issue 47, item 2): the blocks of models/pyro_model.py
with the context passed, against the closed form of inference/cavi/context_vem.py.

* The Pyro ELBO (``Trace_ELBO`` of ``ldhmm_model(..., contexts=)``, hidden states sampled from the
  guide's chain) at the closed form's ``q`` equals the closed-form bound ``SweepResult.bounds``,
  within Monte Carlo error; with the contexts dropped it does not.
* With one context row the contextual blocks are LDHMM's, to rounding; with order-1 contexts the
  likelihood is the sum over all hidden paths with each position's row ``B[z_t, c_t]``.
* The SVI route's model (hidden states summed out) at the closed form's ``q(theta)``: its bound is
  ``E_q log p(x | theta) - KL`` (against all paths) and at least the PF bound of every sequence.
* The route fits the variant by SVI (a few epochs, finite and rising ELBO)."""

import itertools
import math

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO

from ldhmm.inference import kl_dirichlet
from ldhmm.inference.cavi.context_vem import context_batch, e_step
from ldhmm.inference.contexts import build_context_table, context_ids
from ldhmm.inference.svi.dirichlet_guide import DirichletMeanField
from ldhmm.inference.svi.hmm_distribution import MaskedCategoricalHMM
from ldhmm.inference.svi.log_weights import sequence_log_weights
from ldhmm.inference.svi.minibatch import pad_batch
from ldhmm.inference.svi.svi_fit import set_param_values
from ldhmm.models.pyro_contextual import (
    ContextualCategoricalHMM,
    ContextualChainGuide,
    ContextualSequenceModel,
    context_batch_positions,
    contextual_guide_init,
    dense_emission_counts,
    observe_contextual_hmm,
)
from ldhmm.models.pyro_model import ldhmm_model, ldhmm_priors, ldhmm_sequence_model, sequence_parameters
from ldhmm.models.pyro_sequence import PyroSequenceModel

V = 3
LENGTHS = (6, 3, 5, 1)


def _case(K: int, seed: int):
    """A tiny database with order-1 contexts (C = V + 1), random priors, and the closed form's
    PF E-step run to its fixed point (30 sweeps) from the prior."""
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(0, V, size=n) for n in LENGTHS]
    table = build_context_table(seqs, 1, V)
    C = table.n_contexts
    assert C == V + 1
    ctx = context_ids(seqs, table)
    batch = context_batch(seqs, ctx, range(len(seqs)), V)
    prior = {
        "pi": torch.from_numpy(rng.gamma(2.0, 1.0, K) + 0.5),
        "A": torch.from_numpy(rng.gamma(2.0, 1.0, (K, K)) + 0.5),
        "B": torch.from_numpy(rng.gamma(2.0, 1.0, (K, C, V)) + 0.5),
    }
    warm = e_step(prior, batch, None, 30, 0.0)
    return seqs, table, ctx, batch, prior, warm


def _pyro_elbo(prior, batch, init, contexts, copies: int = 100, repeats: int = 20, seed: int = 0):
    """``repeats`` Trace_ELBO estimates of the database's ELBO, each the mean of ``copies``
    independent draws (the database copied ``copies`` times along the plate: one call draws
    them side by side); (mean, standard error)."""
    tokens, _, lengths = context_batch_positions(batch)

    def tile(v):
        return v.repeat(copies, *([1] * (v.dim() - 1)))

    init = {k: tile(v) for k, v in init.items()}
    guide = ContextualChainGuide()
    args = (tile(tokens), tile(lengths), prior["pi"], prior["A"], prior["B"])
    estimates = []
    pyro.set_rng_seed(seed)
    for _ in range(repeats):
        pyro.clear_param_store()
        loss = Trace_ELBO().loss(
            ldhmm_model, lambda *a, **k: guide(*a, init=init), *args, contexts=tile(contexts)
        )
        estimates.append(-loss / copies)
    estimates = np.array(estimates)
    return float(estimates.mean()), float(estimates.std(ddof=1) / math.sqrt(repeats))


# ---------------------------------------------------------------- Pyro ELBO = closed form
@pytest.mark.parametrize("K, seed", [(2, 2), (3, 3)])
def test_pyro_elbo_equals_the_closed_form_bound(K, seed):
    """At the closed form's q (q(z) the chain under E log theta, q(theta) = Dir(prior + its
    counts): one more E-step sweep), Pyro's Trace_ELBO of the contextual model equals
    ``SweepResult.bounds`` summed over the sequences, within 4 standard errors of 2,000 draws
    (measured: K = 2, -17.5705 against -17.5449, -0.51 se of 0.051; K = 3, -19.2471 against
    -19.2027, -0.68 se of 0.065). With every position's context replaced by row 0 the same q
    scores far off (measured -36 and -22 se: the comparison sees the gathered rows)."""
    _, _, _, batch, prior, warm = _case(K, seed)
    init, result = contextual_guide_init(prior, batch, warm.counts)
    closed_form = float(result.bounds.sum())
    # the guide's q(theta) is the closed form's Dir(prior + counts), dense over (K, C, V)
    C = prior["B"].shape[1]
    torch.testing.assert_close(
        init["g_B"].sum((-2, -1)), prior["B"].sum((-2, -1)) + result.counts["B"].sum(-1), rtol=1e-12, atol=0
    )
    assert init["g_B"].shape == (len(LENGTHS), K, C, V)
    _, contexts, _ = context_batch_positions(batch)
    mean, stderr = _pyro_elbo(prior, batch, init, contexts)
    assert abs(mean - closed_form) < 4 * stderr, (mean, stderr, closed_form)
    assert stderr < 0.15  # resolves differences of ~0.5 nat
    wrong, wrong_se = _pyro_elbo(prior, batch, init, torch.zeros_like(contexts), repeats=5)
    assert abs(wrong - closed_form) > 10 * math.hypot(stderr, wrong_se), (wrong, closed_form)


def test_the_guide_reproduces_the_sweeps_state_marginals():
    """The guide's chain (free log-potentials set by ``contextual_guide_init``) samples q(z): its
    empirical marginals over 4,000 draws match the sweep's ``marginals`` (within 0.03, about 4
    binomial standard errors; measured 0.0098)."""
    _, _, _, batch, prior, warm = _case(2, 5)
    init, result = contextual_guide_init(prior, batch, warm.counts)
    tokens, contexts, lengths = context_batch_positions(batch)
    S = 4000
    tiled = {k: v.repeat(S, *([1] * (v.dim() - 1))) for k, v in init.items()}
    pyro.set_rng_seed(1)
    with pyro.get_param_store().scope():
        trace = poutine.trace(ContextualChainGuide()).get_trace(
            tokens.repeat(S, 1), lengths.repeat(S), prior["pi"], prior["A"], prior["B"], init=tiled
        )
    M, T = tokens.shape
    z = torch.stack([trace.nodes[f"z_{n}"]["value"] for n in range(T)], -1).reshape(S, M, T)
    freq = torch.nn.functional.one_hot(z, 2).double().mean(0)  # (M, T, K)
    live = batch.mask
    assert float((freq - result.marginals).abs()[live].max()) < 0.03


# ---------------------------------------------------------------- the blocks with a context
def test_one_context_row_is_ldhmm():
    """C = 1 (every position in row 0): the contextual blocks give LDHMM's log-densities at the
    same theta and z, to rounding (both Pyro models: hidden states sampled, and summed out)."""
    pyro.set_rng_seed(0)
    gen = torch.Generator().manual_seed(0)
    K, M, T = 2, 3, 5
    lengths = torch.tensor([5, 2, 4])
    mask = torch.arange(T)[None] < lengths[:, None]
    tokens = torch.randint(0, V, (M, T), generator=gen)
    prior = {"pi": torch.rand(K, generator=gen) + 0.5, "A": torch.rand(K, K, generator=gen) + 0.5}
    beta = torch.rand(K, V, generator=gen) + 0.5
    theta = {
        "pi": dist.Dirichlet(torch.ones(M, K)).sample(),
        "A": dist.Dirichlet(torch.ones(M, K, K)).sample(),
        "B": dist.Dirichlet(torch.ones(M, K, V)).sample(),
    }
    path = {f"z_{n}": torch.randint(0, K, (M,), generator=gen) for n in range(T)}
    zeros = torch.zeros(M, T, dtype=torch.long)

    def log_joint(model, *args, **kwargs):
        traced = poutine.trace(poutine.condition(model, data=kwargs.pop("data"))).get_trace(*args, **kwargs)
        return traced.log_prob_sum()

    plain = log_joint(ldhmm_model, tokens, lengths, prior["pi"], prior["A"], beta, data={**theta, **path})
    ctx_theta = {**theta, "B": theta["B"][:, :, None, :]}
    contextual = log_joint(
        ldhmm_model,
        *(tokens, lengths, prior["pi"], prior["A"], beta[:, None, :]),
        contexts=zeros,
        data={**ctx_theta, **path},
    )
    torch.testing.assert_close(contextual, plain, rtol=1e-12, atol=1e-12)

    # the SVI route's blocks: priors with n_contexts=1, B of event (K, 1, V), the contextual observed site
    batch = pad_batch([t[:n].numpy() for t, n in zip(tokens, lengths)], range(M), M, K, V, torch.float64)

    def one_context_model(batch):
        priors = ldhmm_priors(batch, n_contexts=1)
        with batch.plate():
            observe_contextual_hmm(batch, *sequence_parameters(*priors, contextual=True), zeros)

    values = {"alpha_pi": prior["pi"], "alpha_A": prior["A"]}
    with pyro.get_param_store().scope():
        poutine.trace(ldhmm_sequence_model).get_trace(batch)
        set_param_values({**values, "beta": beta})
        route_plain = poutine.trace(poutine.condition(ldhmm_sequence_model, data=theta)).get_trace(batch)
    with pyro.get_param_store().scope():
        poutine.trace(one_context_model).get_trace(batch)
        set_param_values({**values, "beta": beta[:, None, :]})
        route_ctx = poutine.trace(poutine.condition(one_context_model, data=ctx_theta)).get_trace(batch)
    assert route_ctx.nodes["beta"]["value"].shape == (K, 1, V)
    assert route_ctx.nodes["B"]["fn"].event_shape == (K, 1, V)
    torch.testing.assert_close(route_ctx.log_prob_sum(), route_plain.log_prob_sum(), rtol=1e-12, atol=1e-12)
    contextual_chain = ContextualCategoricalHMM.from_probs(
        theta["pi"], theta["A"], ctx_theta["B"], zeros, mask
    )
    plain_chain = MaskedCategoricalHMM.from_probs(theta["pi"], theta["A"], theta["B"], mask)
    torch.testing.assert_close(
        contextual_chain.log_prob(tokens), plain_chain.log_prob(tokens), rtol=1e-12, atol=1e-12
    )


def _all_paths(log_pi, log_A, log_B, seq, ctx):
    """log p(x | theta) of one sequence by every hidden path, each position emitting from
    ``B[z_t, c_t]``; batched over leading dimensions of the parameters."""
    K = log_pi.shape[-1]
    terms = []
    for p in itertools.product(range(K), repeat=len(seq)):
        t = log_pi[..., p[0]] + log_B[..., p[0], int(ctx[0]), int(seq[0])]
        for n in range(1, len(seq)):
            t = t + log_A[..., p[n - 1], p[n]] + log_B[..., p[n], int(ctx[n]), int(seq[n])]
        terms.append(t)
    return torch.logsumexp(torch.stack(terms), 0)


def test_the_context_chooses_each_positions_emission_row():
    """Order-1 contexts: ``log p(x | theta)`` of the contextual observed site is the sum over all
    hidden paths with row ``B[z_t, c_t]`` at position t; it moves when a used context row moves,
    not when an unused one does, and, for a sequence with more than one context, differs from
    LDHMM's with any single row for every position."""
    seqs, table, ctx, batch, _, _ = _case(2, 7)
    K, C, M = 2, table.n_contexts, len(seqs)
    tokens, contexts, lengths = context_batch_positions(batch)
    pyro.set_rng_seed(3)
    pi = dist.Dirichlet(torch.ones(M, K)).sample()
    A = dist.Dirichlet(torch.ones(M, K, K)).sample()
    B = dist.Dirichlet(torch.ones(M, K, C, V)).sample()
    log_p = ContextualCategoricalHMM.from_probs(pi, A, B, contexts, batch.mask).log_prob(tokens)
    for m in range(M):
        brute = _all_paths(pi[m].log(), A[m].log(), B[m].log(), seqs[m], ctx[m])
        torch.testing.assert_close(log_p[m], brute, rtol=1e-12, atol=1e-12)
        if len(set(ctx[m].tolist())) == 1:
            continue  # one context (a sequence of one event): LDHMM with that row is the same model
        for c in range(C):  # LDHMM with row c at every position is another model
            single = MaskedCategoricalHMM.from_probs(
                pi[m : m + 1], A[m : m + 1], B[m : m + 1, :, c], batch.mask[m : m + 1]
            )
            assert abs(float(single.log_prob(tokens[m : m + 1])[0] - log_p[m])) > 1e-3, (m, c)
    # the first sequence: move a row it uses and one it does not
    used = set(int(c) for c in ctx[0])
    unused = [c for c in range(C) if c not in used]
    for c, moves in [(min(used), True)] + [(c, False) for c in unused]:
        other = B.clone()
        other[0, :, c] = dist.Dirichlet(torch.ones(K, V)).sample()
        changed = ContextualCategoricalHMM.from_probs(pi, A, other, contexts, batch.mask).log_prob(tokens)
        assert (abs(float(changed[0] - log_p[0])) > 1e-6) is moves, c


def test_contexts_must_be_rows_of_b():
    pi, A, B = torch.ones(1, 2) / 2, torch.ones(1, 2, 2) / 2, torch.ones(1, 2, 3, V) / V
    mask = torch.ones(1, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"contexts must lie in 0..2"):
        ContextualCategoricalHMM.from_probs(pi, A, B, torch.tensor([[0, 1, 3, 0]]), mask)
    with pytest.raises(ValueError, match="do not share one number of states"):
        ContextualCategoricalHMM.from_probs(pi, A, B[:, :, 0], torch.zeros(1, 4, dtype=torch.long), mask)
    with pytest.raises(ValueError, match="give tokens"):
        ldhmm_model(None, torch.tensor([2]), pi[0], A[0], B[0], contexts=torch.zeros(1, 2, dtype=torch.long))


# ---------------------------------------------------------------- the SVI route's model
def test_route_bound_at_the_closed_forms_q_theta():
    """The SVI route's contextual model (hidden states summed out), with the Dirichlet mean field
    at the closed form's q(theta) = Dir(prior + counts): its per-sequence bound (4,000 draws) is
    ``E_q log p(x | theta) - KL(q || p)`` computed independently (all hidden paths, 20,000 draws,
    closed-form KL), and at least the PF bound of every sequence (summing z out exactly is
    tighter than the chain q(z)), within 4 standard errors (measured: within 1.9 se of the
    independent value; 0.10 to 0.86 nats, 44 to 94 se, above the PF bounds)."""
    K = 2
    seqs, table, ctx, batch_ctx, prior, warm = _case(K, 11)
    M, C = len(seqs), table.n_contexts
    result = e_step(prior, batch_ctx, warm.counts, 1, 0.0)
    g = {
        "pi": prior["pi"] + result.counts["pi"],
        "A": prior["A"] + result.counts["A"],
        "B": prior["B"] + dense_emission_counts(result.counts["B"], batch_ctx, C, V),
    }
    model = ContextualSequenceModel(table)
    batch = pad_batch(seqs, range(M), M, K, V, torch.float64)
    guide = DirichletMeanField(model, relative=False)
    n = 4000
    with pyro.get_param_store().scope(), torch.random.fork_rng():
        torch.manual_seed(0)
        poutine.block(poutine.trace(model).get_trace)(batch)
        set_param_values({"alpha_pi": prior["pi"], "alpha_A": prior["A"], "beta": prior["B"]})
        poutine.block(guide)(batch)
        assert set_param_values({f"q_{k}": v for k, v in g.items()}) == {"q_pi", "q_A", "q_B"}
        log_w = sequence_log_weights(model, guide, batch, n)
    mean, se = log_w.mean(0), log_w.std(0) / math.sqrt(n)
    pf = result.bounds
    assert bool((mean + 4 * se >= pf).all()), (mean - pf) / se
    torch.manual_seed(1)
    for m in range(M):
        draws = {k: dist.Dirichlet(v[m]).sample((20000,)) for k, v in g.items()}
        ll = _all_paths(*(draws[k].log() for k in ("pi", "A", "B")), seqs[m], ctx[m])
        kl = (
            kl_dirichlet(g["pi"][m], prior["pi"])
            + kl_dirichlet(g["A"][m], prior["A"]).sum()
            + kl_dirichlet(g["B"][m], prior["B"]).sum()
        )
        value, value_se = float(ll.mean() - kl), float(ll.std() / math.sqrt(20000))
        route = float(mean[m])
        assert abs(route - value) < 4 * math.hypot(value_se, float(se[m])), (m, route, value)


def test_the_route_fits_the_variant_by_svi():
    """PyroSequenceModel with the contextual model and the Dirichlet mean field: 12 epochs of SVI
    on sequences from an order-1 contextual chain, a finite ELBO that rises, priors of shape
    (K, C, V), finite held-out bounds."""
    rng = np.random.default_rng(0)
    follow = np.array([[0.8, 0.1, 0.1], [0.1, 0.1, 0.8], [0.1, 0.8, 0.1], [1 / 3, 1 / 3, 1 / 3]])
    seqs = []
    for _ in range(48):
        s, prev = [], V
        for _ in range(int(rng.integers(3, 12))):
            prev = int(rng.choice(V, p=follow[prev]))
            s.append(prev)
        seqs.append(np.array(s))
    table = build_context_table(seqs[:40], 1, V)
    model = PyroSequenceModel(
        ContextualSequenceModel(table),
        "dirichlet",
        2,
        n_symbols=V,
        max_epochs=12,
        batch_size=20,
        score_epochs=2,
        score_draws=8,
        seed=0,
    )
    model.fit(seqs[:40])
    history = model.elbo_history_
    assert len(history) == model.n_iter_ and np.all(np.isfinite(history))
    assert np.mean(history[-3:]) > np.mean(history[:3])
    assert model.params_["beta"].shape == (2, V + 1, V)
    scores = model.score_samples(seqs[40:])
    assert scores.shape == (8,) and np.all(np.isfinite(scores)) and np.all(scores < 0)
