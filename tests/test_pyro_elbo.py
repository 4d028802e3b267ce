"""The closed-form ELBO equals Pyro's Monte Carlo Trace_ELBO for the same model and guide; the PF
guide draws every path with its chain's probability."""

import itertools

import numpy as np
import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO

from ldhmm.inference import Bucket, FFGuide, PFGuide, e_step_bucket, guide_init_from_state, make_buckets
from ldhmm.models import LDHMM, ldhmm_model


def pad_database(sequences) -> Bucket:
    """All sequences in one padded bucket, in their original order (test-only: the rows of the
    guide's parameters are the database's sequences)."""
    (bucket,) = make_buckets(sequences, max_cells=1 << 62, max_padding_ratio=float("inf"))
    order = torch.argsort(bucket.index)
    return Bucket(
        torch.arange(bucket.n_sequences), bucket.tokens[order], bucket.lengths[order], bucket.mask[order]
    )


@pytest.mark.parametrize("guide", [PFGuide(), FFGuide()], ids=["pf", "ff"])
def test_closed_form_elbo_matches_pyro_trace_elbo(true_model, small_db, guide):
    model = LDHMM(3, n_symbols=4, guide=guide, max_iter=5, seed=0).fit(small_db[:40])
    bucket = pad_database(small_db[:6])
    state = e_step_bucket(bucket, model.params_, guide, max_iter=10)
    init, closed_form = guide_init_from_state(guide, model.params_, bucket, state)
    prior = model.params_.prior
    args = (bucket.tokens, bucket.lengths, prior["pi"], prior["A"], prior["B"])
    pyro.set_rng_seed(0)
    draws = []
    for _ in range(400):
        pyro.clear_param_store()
        draws.append(-Trace_ELBO().loss(ldhmm_model, lambda *a, **k: guide(*a, init=init), *args))
    draws = np.array(draws)
    mean, stderr = draws.mean(), draws.std(ddof=1) / np.sqrt(len(draws))
    assert abs(mean - float(closed_form.sum())) < 4 * stderr + 1e-6, (mean, stderr, float(closed_form.sum()))
    # The bound is not trivially loose: the standard error resolves differences of ~0.1 nat.
    assert stderr < 0.5


def test_svi_path_trains_the_same_model_and_guide(small_db):
    model = LDHMM(2, n_symbols=4, guide="pf", optimizer="svi", svi_steps=30, svi_lr=0.05, seed=0)
    model.fit(small_db[:8])
    history = model.elbo_history_
    # At most the 30 epochs asked for; fewer only where the stopping rule said so.
    assert len(history) == model.n_iter_ and np.all(np.isfinite(history))
    assert len(history) == 30 or (len(history) < 30 and model.converged_)
    # Noisy, but 30 Adam steps from the prior-initialized guide must improve the ELBO estimate.
    assert np.mean(history[-5:]) > np.mean(history[:5])
    assert np.all(model.alpha_pi_ > 0) and np.all(model.beta_ > 0)
    # The fitted hyper-parameters serve the closed-form scorer.
    assert np.all(np.isfinite(model.score_samples(small_db[8:12])))


def test_pf_guide_draws_each_path_with_its_chain_probability():
    # Forward filtering, backward sampling: the sites' log-probabilities of any path (conditioned
    # on it) sum to its exact log-probability under the chain, score - log Z, for every path of
    # every sequence (lengths 1 .. T, the padding's sites masked out).
    M, T, K = 4, 4, 3
    g = torch.Generator().manual_seed(3)
    params = {
        "chain_initial": torch.randn(M, K, generator=g),
        "chain_transition": torch.randn(M, T, K, K, generator=g),
    }
    lengths = torch.tensor([4, 1, 3, 2])
    mask = torch.arange(T)[None] < lengths[:, None]
    initial, transition = params["chain_initial"], params["chain_transition"]
    paths = list(itertools.product(range(K), repeat=T))
    log_q, scores = [], []
    for path in paths:
        data = {f"z_{n}": torch.full((M,), path[n]) for n in range(T)}
        with pyro.plate("sequences", M, dim=-1):
            trace = poutine.trace(poutine.condition(PFGuide().sample_hidden, data=data)).get_trace(
                params, mask
            )
        trace.compute_log_prob()
        log_q.append(sum(trace.nodes[f"z_{n}"]["log_prob"] * mask[:, n] for n in range(T)))
        score = initial[:, path[0]].clone()
        for n in range(1, T):
            score = score + transition[:, n, path[n - 1], path[n]] * mask[:, n]
        scores.append(score)
    log_q, scores = torch.stack(log_q), torch.stack(scores)  # (paths, M)
    for m, L in enumerate(lengths.tolist()):
        # paths that differ past the end only are one path of the sequence
        distinct = [i for i, path in enumerate(paths) if all(z == 0 for z in path[L:])]
        exact = scores[distinct, m] - torch.logsumexp(scores[distinct, m], 0)
        assert torch.allclose(log_q[distinct, m], exact, atol=1e-12)
