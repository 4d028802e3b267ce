"""Math kernels against independent routes: brute force, torch.distributions, scipy."""

import importlib.util
import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
from numba import njit
from scipy import optimize, special

from ldhmm.inference import e_step_bucket, init_parameters
from ldhmm.inference.batch import make_buckets
from ldhmm.inference.cavi import kernels
from ldhmm.inference.cavi.exact_chain import forward_backward, forward_log_normalizer
from ldhmm.inference.cavi.guides import PFGuide, resolve_guide
from ldhmm.inference.cavi.kernels import fused_sweeps
from ldhmm.inference.cavi.kernels.special import digamma, lgamma_digamma
from ldhmm.inference.cavi.sequence_starts import best_of_starts, default_starts
from ldhmm.inference.ops.dirichlet import (
    dirichlet_prior_objective,
    expected_log_dirichlet,
    kl_dirichlet,
    newton_dirichlet,
)
from ldhmm.inference.ops.forward import chain_log_likelihood, chain_posterior, forward_log_messages
from ldhmm.inference.ops.hashing import hashed_uniform, splitmix64
from ldhmm.inference.ops.mean_field import mean_field_stats, mean_field_sweep
from ldhmm.inference.sharing import LDHMM_SHARING

_SPEC = importlib.util.spec_from_file_location(
    "reference_chain", Path(__file__).with_name("reference_chain.py")
)
reference_chain = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(reference_chain)
forward_backward_log = reference_chain.forward_backward_log  # the log-space reference twin


def init_mean_field(log_obs, mask):
    """FF factors ``phi_n`` proportional to the (finite) emission potentials, zero on padding: a
    start for the mean-field sweeps (FFGuide starts from the exact chain's sharpened marginals)."""
    return torch.where(mask[..., None], torch.softmax(log_obs, -1), torch.zeros_like(log_obs))


def random_chain(M, T, K, seed, lengths=None, shared=False):
    g = torch.Generator().manual_seed(seed)
    log_initial = torch.randn(1 if shared else M, K, generator=g)
    log_transition = torch.randn(1 if shared else M, K, K, generator=g) * 2
    log_obs = torch.randn(M, T, K, generator=g) * 2
    if lengths is None:
        lengths = torch.randint(1, T + 1, (M,), generator=g)
        lengths[0] = T
    mask = torch.arange(T)[None] < torch.as_tensor(lengths)[:, None]
    return log_initial, log_transition, log_obs, mask


def brute_force(log_initial, log_transition, log_obs, L):
    """log Z, marginals and summed pair marginals by enumerating all K^L paths."""
    K = log_obs.shape[-1]
    paths = list(itertools.product(range(K), repeat=L))
    scores = []
    for p in paths:
        s = log_initial[p[0]] + log_obs[0, p[0]]
        for n in range(1, L):
            s = s + log_transition[p[n - 1], p[n]] + log_obs[n, p[n]]
        scores.append(s)
    scores = torch.stack(scores)
    log_z = torch.logsumexp(scores, 0)
    w = torch.exp(scores - log_z)
    marg = torch.zeros(L, K)
    pair = torch.zeros(K, K)
    for weight, p in zip(w, paths):
        for n in range(L):
            marg[n, p[n]] += weight
        for n in range(1, L):
            pair[p[n - 1], p[n]] += weight
    return log_z, marg, pair


def forward_backward_reference_route(*args):
    """:func:`forward_backward` with the compiled kernels switched off (the log-space route
    that other devices take)."""
    kernels.ENABLED = False
    try:
        return forward_backward(*args)
    finally:
        kernels.ENABLED = True


@pytest.mark.parametrize(
    "impl", [forward_backward, forward_backward_reference_route, chain_posterior, forward_backward_log]
)
@pytest.mark.parametrize("shared", [False, True])
def test_forward_backward_equals_brute_force(impl, shared):
    M, T, K = 5, 5, 3
    li, lt, lo, mask = random_chain(M, T, K, seed=3, lengths=[5, 1, 3, 4, 2], shared=shared)
    post = impl(li, lt, lo, mask)
    for m in range(M):
        L = int(mask[m].sum())
        log_z, marg, pair = brute_force(li[0 if shared else m], lt[0 if shared else m], lo[m], L)
        assert torch.allclose(post.log_normalizer[m], log_z, atol=1e-10, rtol=0)
        assert torch.allclose(post.state_marginals[m, :L], marg, atol=1e-10)
        assert torch.all(post.state_marginals[m, L:] == 0)
        assert torch.allclose(post.transition_counts[m], pair, atol=1e-10)


@pytest.mark.parametrize("compiled", [True, False])
def test_forward_only_normalizer_matches(compiled, monkeypatch):
    monkeypatch.setattr(kernels, "ENABLED", compiled)
    li, lt, lo, mask = random_chain(7, 9, 4, seed=5)
    reference = forward_backward_log(li, lt, lo, mask)
    assert torch.allclose(forward_log_normalizer(li, lt, lo, mask), reference.log_normalizer, atol=1e-10)


def test_fast_path_survives_extreme_potentials():
    # Potentials spanning > 1e4 nats underflow a naive scaled recursion; the result must stay
    # finite and agree with the log-space path.
    li, lt, lo, mask = random_chain(6, 12, 3, seed=7)
    lt = lt * 800.0
    lo = lo * 900.0
    fast = forward_backward(li, lt, lo, mask)
    ref = forward_backward_log(li, lt, lo, mask)
    assert torch.isfinite(fast.log_normalizer).all()
    assert torch.allclose(fast.log_normalizer, ref.log_normalizer, rtol=1e-10)
    assert torch.allclose(fast.state_marginals, ref.state_marginals, atol=1e-8)


def test_forward_messages_give_log_z_and_the_filtered_marginals():
    # The scan's down-sweep against the sequential forward recursion, position by position:
    # alpha_n = logsumexp_j(alpha_(n-1)(j) + W_n[j, :]); at the last real position it holds log Z
    # and the last state's marginal; past it, it stays. Lengths 1 .. T cover odd and even levels.
    M, T, K = 5, 11, 3
    li, lt, lo, mask = random_chain(M, T, K, seed=13, lengths=[11, 1, 3, 8, 6])
    step = lt[:, None] + lo[:, :, None, :]  # (M, T, K, K), time-homogeneous transition
    first = li + lo[:, 0]
    log_alpha = forward_log_messages(first, step, mask)
    sequential = [first]
    for n in range(1, T):
        moved = torch.logsumexp(sequential[-1][:, :, None] + step[:, n], dim=-2)
        sequential.append(torch.where(mask[:, n, None], moved, sequential[-1]))
    assert torch.allclose(log_alpha, torch.stack(sequential, 1), atol=1e-12)
    ref = forward_backward_log(li, lt, lo, mask)
    last = log_alpha[:, -1]
    assert torch.allclose(torch.logsumexp(last, -1), ref.log_normalizer, atol=1e-10)
    assert torch.allclose(torch.logsumexp(last, -1), chain_log_likelihood(li, lt, lo, mask), atol=1e-12)
    ends = mask.sum(-1) - 1
    assert torch.allclose(torch.softmax(last, -1), ref.state_marginals[torch.arange(M), ends], atol=1e-10)
    # One position: the first potential itself.
    assert torch.equal(forward_log_messages(first, step[:, :1], mask[:, :1])[:, 0], first)


def test_very_long_sequence_has_normalized_marginals():
    li, lt, lo, mask = random_chain(1, 100_000, 3, seed=11, lengths=[100_000])
    post = forward_backward(li, lt, lo, mask)
    assert torch.isfinite(post.log_normalizer).all()
    sums = post.state_marginals.sum(-1)
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-9)
    assert abs(float(post.transition_counts.sum()) - (100_000 - 1)) < 1e-6


def test_ff_fixed_point_satisfies_its_update_equations():
    M, T, K = 4, 7, 3
    li, lt, lo, mask = random_chain(M, T, K, seed=2, lengths=[7, 1, 4, 6])
    phi = init_mean_field(lo, mask)
    previous = -np.inf
    for _ in range(500):
        phi = mean_field_sweep(phi, li, lt, lo, mask)
        stats = mean_field_stats(phi, li, lt, lo, mask)
        value = float((stats.expected_complete_log_lik + stats.entropy).sum())
        assert value >= previous - 1e-10  # coordinate ascent never decreases
        previous = value
    # The corrected update of docs/math.md, written out independently position by position.
    for m in range(M):
        L = int(mask[m].sum())
        for n in range(L):
            logits = lo[m, n].clone()
            if n == 0:
                logits += li[m]
            if n > 0:
                logits += phi[m, n - 1] @ lt[m]
            if n < L - 1:
                logits += lt[m] @ phi[m, n + 1]
            assert torch.allclose(phi[m, n], torch.softmax(logits, 0), atol=1e-8)


def test_expected_log_and_kl_against_torch_distributions():
    g = torch.Generator().manual_seed(0)
    post = torch.rand(5, 4, generator=g) * 3 + 0.1
    prior = torch.rand(5, 4, generator=g) * 3 + 0.1
    ref_kl = torch.distributions.kl_divergence(
        torch.distributions.Dirichlet(post), torch.distributions.Dirichlet(prior)
    )
    assert torch.allclose(kl_dirichlet(post, prior), ref_kl, atol=1e-12)
    samples = torch.distributions.Dirichlet(post).sample((200_000,))
    mc = torch.log(samples).mean(0)
    assert torch.allclose(expected_log_dirichlet(post), mc, atol=0.05)


@pytest.mark.parametrize("D", [2, 5, 17])
def test_newton_matches_scipy(D):
    rng = np.random.default_rng(D)
    M = 50
    true_a = rng.uniform(0.3, 5.0, size=(3, D))
    theta = np.stack([rng.dirichlet(a, size=M) for a in true_a])  # (3, M, D)
    t = np.log(theta).sum(1)
    res = newton_dirichlet(torch.ones(3, D), torch.tensor(t), M)
    for row in range(3):

        def neg_f(log_a, row=row):
            a = np.exp(log_a)
            return -(M * (special.gammaln(a.sum()) - special.gammaln(a).sum()) + ((a - 1) * t[row]).sum())

        opt = optimize.minimize(neg_f, np.zeros(D), method="L-BFGS-B", options={"ftol": 1e-14, "gtol": 1e-10})
        assert np.allclose(res.concentration[row].numpy(), np.exp(opt.x), rtol=1e-4)
        assert float(res.objective[row]) >= -opt.fun - 1e-8
    assert torch.all(res.concentration > 0) and torch.isfinite(res.concentration).all()


def test_newton_never_decreases_and_caps_degenerate_groups():
    # Identical sequences: the optimum is at infinity; Newton must cap, not diverge.
    D, M = 3, 20
    t = torch.log(torch.tensor([[0.2, 0.3, 0.5]])) * M
    start = torch.ones(1, D)
    f0 = dirichlet_prior_objective(start, t, M)
    res = newton_dirichlet(start, t, M, max_iter=500)
    assert torch.isfinite(res.concentration).all() and torch.all(res.concentration > 0)
    assert float(res.objective[0]) >= float(f0[0])
    assert res.capped


def test_newton_rejects_bad_statistics():
    with pytest.raises(ValueError, match="non-finite"):
        newton_dirichlet(torch.ones(1, 2), torch.tensor([[float("nan"), 0.0]]), 3)
    with pytest.raises(ValueError, match="at least one sequence"):
        newton_dirichlet(torch.ones(1, 2), torch.zeros(1, 2), 0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_compiled_core_and_log_space_reference_agree_on_ragged_batches(dtype):
    li, lt, lo, mask = random_chain(40, 17, 4, seed=13)
    lengths = torch.randint(1, 18, (40,), generator=torch.Generator().manual_seed(1))
    lengths[:3] = 1
    mask = torch.arange(17)[None] < lengths[:, None]
    args = [x.to(dtype) for x in (li, lt, lo)] + [mask]
    a, b = forward_backward(*args), forward_backward_log(*args)
    tol = 1e-10 if dtype == torch.float64 else 2e-4
    for x, y in zip(a, b):
        assert x.dtype == dtype
        assert torch.allclose(x, y, atol=tol, rtol=tol)


class _CountingPF(PFGuide):
    """PF guide that counts calls of its (stateless) start."""

    def __init__(self):
        super().__init__()
        self.init_calls = 0

    def init_state(self, *args):
        self.init_calls += 1
        return super().init_state(*args)


def test_compiled_pf_e_step_never_builds_the_guide_start_it_would_drop():
    # The compiled PF update carries no state: the guide's start (E log theta of every
    # sequence in torch) was computed for every bucket and dropped. Same numbers without it.
    rng = np.random.default_rng(3)
    seqs = [rng.integers(0, 5, size=n) for n in rng.integers(2, 30, size=40)]
    bucket = make_buckets(seqs)[0]
    params = init_parameters(LDHMM_SHARING, 3, 5, seed=1, dtype=torch.float64)
    guide = _CountingPF()
    cold = e_step_bucket(bucket, params, guide, None, max_iter=5)
    warm = e_step_bucket(bucket, params, guide, cold, max_iter=5)
    best = best_of_starts(bucket, params, guide, default_starts(guide), None, max_iter=5)
    assert guide.init_calls == 0
    assert torch.all(best.elbo >= cold.elbo - 1e-9)  # "prior" is one of the starts
    previous = kernels.ENABLED
    kernels.ENABLED = False  # the torch route still starts from the guide's state
    try:
        reference = e_step_bucket(bucket, params, guide, None, max_iter=5)
    finally:
        kernels.ENABLED = previous
    assert guide.init_calls >= 1
    torch.testing.assert_close(cold.elbo, reference.elbo, rtol=1e-10, atol=1e-10)
    assert torch.all(warm.elbo >= cold.elbo - 1e-9)


def _hashed_uniform_broadcast_first(*keys):
    """Reference twin of ``hashed_uniform``: every key broadcast to the full shape first."""
    arrays = np.broadcast_arrays(*[np.asarray(k, dtype=np.int64).astype(np.uint64) for k in keys])
    h = np.zeros(arrays[0].shape, dtype=np.uint64)
    for a in arrays:
        h = splitmix64(h ^ a)
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


@pytest.mark.parametrize(
    "keys",
    [
        (7, np.arange(40)[:, None, None] * 7919, np.arange(30)[None, :, None], np.arange(5)[None, None, :]),
        (3,),
        (np.arange(6),),
        (np.arange(4)[:, None], 2, np.arange(3)),
        (-5, 2**62, np.arange(3)),
    ],
)
def test_hashed_uniform_is_the_hash_of_the_broadcast_keys(keys):
    """Hashing key by key while broadcasting gives the values of the fully broadcast keys,
    bit for bit (the E-step's random starts depend on it), in (0, 1)."""
    got = hashed_uniform(*keys)
    want = _hashed_uniform_broadcast_first(*keys)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.array_equal(got, want)
    assert np.all((got > 0) & (got < 1))


@pytest.mark.parametrize("guide_name", ["pf", "ff"])
def test_e_step_is_bitwise_reproducible_across_calls_and_thread_counts(guide_name, numba_threads):
    """The compiled E-step gives the same bits on every call and with 1 or 2 numba threads.

    Reassociated (fastmath) reductions made the results depend on where the scratch arrays
    landed in memory (the vectorizer peels to alignment), so repeated FF E-steps on the same
    input differed in the last bits, and PF's differed between thread counts."""
    rng = np.random.default_rng(5)
    seqs = [rng.integers(0, 17, size=rng.integers(20, 60)) for _ in range(600)]
    params = init_parameters(LDHMM_SHARING, 8, 17, seed=2, dtype=torch.float64)
    guide = resolve_guide(guide_name)
    buckets = make_buckets(seqs)

    def run():
        out = [e_step_bucket(b, params, guide, None, max_iter=3).elbo.numpy().copy() for b in buckets]
        _ = [np.empty(1000 + 8 * i) for i in range(64)]  # move the allocator between calls
        return np.concatenate(out)

    numba_threads(2)  # two where numba has them (the suite's workers default to one)
    first = run()
    repeats = [run() for _ in range(3)]
    numba_threads(1)
    single = run()
    for other in repeats + [single]:
        assert np.array_equal(first, other)


def test_log_matmul_exp_exact_where_the_shifted_product_underflows():
    from ldhmm.inference.ops.forward import log_matmul_exp

    # The row's largest entry and the column's sit at different j: exp(-1000) * 2 underflows.
    a = torch.tensor(
        [[0.0, -1000.0], [-float("inf"), -float("inf")]], dtype=torch.float64, requires_grad=True
    )
    b = torch.tensor([[-1000.0], [0.0]], dtype=torch.float64, requires_grad=True)
    out = log_matmul_exp(a, b)
    assert out[0, 0].item() == pytest.approx(-1000.0 + np.log(2.0), abs=1e-12)
    assert out[1, 0].item() == -float("inf")  # no path at all: exactly -inf
    out[0, 0].backward()
    assert torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()
    np.testing.assert_allclose(a.grad[0].numpy(), [0.5, 0.5], rtol=1e-12)
    np.testing.assert_array_equal(a.grad[1].numpy(), [0.0, 0.0])


def test_torch_chain_posterior_matches_the_reference_at_extreme_potentials():
    li, lt, lo, mask = random_chain(6, 12, 3, seed=7)
    lt, lo = lt * 800.0, lo * 900.0
    ours, ref = chain_posterior(li, lt, lo, mask), forward_backward_log(li, lt, lo, mask)
    assert torch.isfinite(ours.log_normalizer).all()
    torch.testing.assert_close(ours.log_normalizer, ref.log_normalizer, rtol=1e-12, atol=0)
    torch.testing.assert_close(ours.state_marginals, ref.state_marginals, rtol=0, atol=1e-9)
    # (the reference's own pair counts overflow to NaN here: exp of a difference of huge logs)
    assert torch.isfinite(ours.transition_counts).all()
    lengths = mask.sum(1).double()
    torch.testing.assert_close(ours.transition_counts.sum((1, 2)), lengths - 1, rtol=0, atol=1e-9)


@pytest.mark.parametrize("T", [1, 2])
def test_torch_chain_posterior_of_the_shortest_chains(T):
    # T = 1: log Z does not depend on the transitions (no move): zero counts, not an autograd error
    li, lt, lo, mask = random_chain(3, T, 2, seed=3)
    mask = torch.ones_like(mask)
    ours, ref = chain_posterior(li, lt, lo, mask), forward_backward_log(li, lt, lo, mask)
    torch.testing.assert_close(ours.log_normalizer, ref.log_normalizer, rtol=1e-12, atol=0)
    torch.testing.assert_close(ours.state_marginals, ref.state_marginals, rtol=0, atol=1e-12)
    torch.testing.assert_close(ours.transition_counts, ref.transition_counts, rtol=0, atol=1e-12)


@njit
def _digamma_both_ways(x, via_pair, alone):
    for i in range(x.shape[0]):
        via_pair[i] = lgamma_digamma(x[i])[1]
        alone[i] = digamma(x[i])


def test_digamma_is_the_second_value_of_lgamma_digamma_bit_for_bit():
    """The E-step's warm-start pass takes psi from ``digamma`` and the sweeps from
    ``lgamma_digamma``: the same bits, over the whole range of float64 concentrations."""
    rng = np.random.default_rng(11)
    x = np.concatenate(
        [np.exp(rng.uniform(-700.0, 700.0, 200_000)), rng.uniform(0.0, 40.0, 200_000), np.arange(1, 5000) / 4]
    )
    via_pair, alone = np.empty_like(x), np.empty_like(x)
    _digamma_both_ways(x, via_pair, alone)
    assert np.array_equal(via_pair, alone, equal_nan=True)  # NaN from x^8 overflowing, above 1e38
    assert np.isfinite(alone[x < 1e30]).all()
    np.testing.assert_allclose(alone[x < 1e6], special.digamma(x[x < 1e6]), rtol=1e-12, atol=1e-12)


@njit
def _sequence_terms_every_entry(
    prior_pi, prior_A, prior_B, lgamma_B, lgamma_rowsum_B, counts, present, theta
):
    """Twin of the kernel's per-sequence Dirichlet pass: lgamma_digamma of every entry in place,
    the kernel's order of additions (its form before entries at the prior were looked up)."""
    c_pi, c_A, c_B = counts
    elog_pi, elog_A, elog_B = theta
    K = prior_A.shape[0]
    value = 0.0
    for prior, c, out in ((prior_pi.reshape((1, K)), c_pi, elog_pi), (prior_A, c_A, elog_A)):
        part = 0.0
        for i in range(prior.shape[0]):
            total = 0.0
            for d in range(prior.shape[1]):
                g = prior[i, d] + c[i, d]
                total += g
                lg, psi = lgamma_digamma(g)
                part += lg
                out[i, d] = psi
            lg, psi_total = lgamma_digamma(total)
            part -= lg
            for d in range(prior.shape[1]):
                out[i, d] -= psi_total
        value += part
    psi_rows = np.empty(K)
    for k in range(K):
        rowsum = prior_B[k].sum()
        for v in present:
            rowsum += c_B[k, v]
            lg, psi = lgamma_digamma(prior_B[k, v] + c_B[k, v])
            value += lg - lgamma_B[k, v]
            elog_B[k, v] = psi
        lg, psi_rows[k] = lgamma_digamma(rowsum)
        value += lgamma_rowsum_B[k] - lg
        for v in present:
            elog_B[k, v] -= psi_rows[k]
    return value, psi_rows


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dirichlet_pass_looks_up_only_entries_equal_to_the_prior(seed):
    """Entries whose counts leave ``prior + counts`` equal to the prior (zeros, or counts below
    half an ulp of the prior) take the prior's lgamma and psi from a table: the bound and
    E log theta are bit for bit those of evaluating every entry, with and without unvisited
    rows, and the warm start's psi-only pass gives the same E log theta."""
    rng = np.random.default_rng(seed)
    K, V = 4, 6
    prior = (rng.uniform(0.05, 3.0, K), rng.uniform(0.05, 3.0, (K, K)), rng.uniform(0.05, 3.0, (K, V)))
    rowsum_B = prior[2].sum(1)
    lgamma_B, lgamma_rowsum_B = special.gammaln(prior[2]), special.gammaln(rowsum_B)
    tables = fused_sweeps.prior_special_values(prior, rowsum_B, (True, True, True))
    present = np.array([0, 2, 3, 5])

    def draw(shape):  # a third zero, a third too small to change the prior, a third counts
        kind = rng.integers(0, 3, shape)
        return np.where(kind == 0, 0.0, np.where(kind == 1, 1e-30, rng.uniform(0.0, 5.0, shape)))

    counts = (draw((1, K)), draw((K, K)), np.zeros((K, V)))
    counts[2][:, present] = draw((K, present.size))
    counts[1][1] = 0.0  # a whole row at the prior: its total is looked up too
    counts[2][2] = 1e-300
    args = (
        (True, True, True),
        prior,
        (rowsum_B, lgamma_B, lgamma_rowsum_B),
        tuple(tables[k] for k in ("values_pi", "rows_pi", "values_A", "rows_A", "values_B", "rows_B")),
        counts,
        present,
        present.size,
        np.arange(V),
    )
    n_staged = K + 1 + K * (K + 1) + K * (V + 1)
    results = []
    for with_lgamma in (True, False):
        theta = (np.full((1, K), np.nan), np.full((K, K), np.nan), np.full((K, V), np.nan))
        psi_rows = np.full(K, np.nan)
        staged = (
            np.empty(n_staged),
            np.empty(n_staged),
            np.empty(n_staged),
            np.empty(n_staged, dtype=np.int64),
        )
        value = fused_sweeps._sequence_terms(*args, theta, psi_rows, staged, with_lgamma)
        results.append((value, theta, psi_rows))
    want_theta = (np.full((1, K), np.nan), np.full((K, K), np.nan), np.full((K, V), np.nan))
    want_value, want_rows = _sequence_terms_every_entry(
        *prior, lgamma_B, lgamma_rowsum_B, counts, present, want_theta
    )
    at_prior = (prior[1] + counts[1] == prior[1]).sum()
    assert 0 < at_prior < K * K  # both kinds of entries are exercised
    assert results[0][0] == want_value
    for _, theta, psi_rows in results:
        assert np.array_equal(psi_rows, want_rows)
        assert np.array_equal(theta[0], want_theta[0]) and np.array_equal(theta[1], want_theta[1])
        assert np.array_equal(theta[2][:, present], want_theta[2][:, present])
