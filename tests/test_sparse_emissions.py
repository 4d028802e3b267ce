"""The sparse emission layout (per-sequence counts over the symbols a sequence contains) against
the dense one (over all V symbols): the same numbers, bit for bit where both run the compiled
kernels, and to 1e-10 where the sparse layout's torch route solves a local dense problem."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ldhmm import LDHMM, ParameterSharing, VariantHMM
from ldhmm.baselines.hmmv import HMMV
from ldhmm.baselines.vbhmm import VBHMM
from ldhmm.cli.posterior import posterior_table
from ldhmm.data import SequenceDatabase
from ldhmm.inference import HMMV_SHARING, LDHMM_SHARING, make_buckets
from ldhmm.inference.cavi import kernels
from ldhmm.inference.cavi.emissions import (
    SPARSE_MIN_SYMBOLS,
    LocalView,
    dense_emission_posterior,
    emission_layout,
    emission_log_sums,
    slot_mask,
    token_potentials,
)
from ldhmm.inference.cavi.kernels.dirichlet_multinomial import SUM_BLOCK
from ldhmm.inference.cavi.kernels.sparse import local_symbols, scatter_blocks, scatter_rows
from ldhmm.inference.ops.dirichlet import expected_log_dirichlet
from ldhmm.inference.parameters import group_shape, init_parameters
from ldhmm.inference.sharing import GROUPS


def to_dense_counts(counts_B: torch.Tensor, bucket, n_symbols: int) -> torch.Tensor:
    """A sparse bucket's emission counts as (M_b, K, V) (small V only: M_b K V numbers)."""
    if not bucket.sparse:
        return counts_B
    M, K, _ = counts_B.shape
    dense = counts_B.new_zeros(M, K, n_symbols)
    return dense.scatter_add_(2, bucket.symbols[:, None, :].expand_as(counts_B), counts_B)


def _data(seed, V, n=70, held=25, max_len=15, unseen=2):
    """Ragged training sequences over symbols 0..V-1-unseen; held-out ones over all V."""
    rng = np.random.default_rng(seed)
    top = max(1, V - unseen)
    train = [rng.integers(0, top, size=rng.integers(1, max_len)) for _ in range(n)]
    test = [rng.integers(0, V, size=rng.integers(1, max_len)) for _ in range(held)]
    return train, test


def _point_b(**kw):
    sharing = ParameterSharing(pi="sequence", A="sequence", B="point", pseudocount=0.5)
    return VariantHMM(sharing=sharing, **kw)


MODELS = {
    "ldhmm-pf": lambda **kw: LDHMM(guide="pf", **kw),
    "ldhmm-ff": lambda **kw: LDHMM(guide="ff", **kw),
    "ldhmm-paper": lambda **kw: LDHMM(guide="pf", m_step="paper", **kw),
    "vbhmm": lambda **kw: VBHMM(**kw),
    "hmmv": lambda **kw: HMMV(**kw),
    "point-B": _point_b,
}


def _fit_both(make, train, V, **kw):
    out = {}
    for layout in ("dense", "sparse"):
        model = make(n_states=3, n_symbols=V, seed=2, max_iter=12, n_init=2, emission_layout=layout, **kw)
        out[layout] = model.fit(train)
    return out["dense"], out["sparse"]


def _hyper(model):
    p = model.params_
    return {
        f"{kind}.{g}": v
        for kind, d in (("prior", p.prior), ("post", p.posterior), ("point", p.log_point))
        for g, v in d.items()
    }


@pytest.mark.parametrize("name", sorted(MODELS))
def test_sparse_and_dense_fits_are_identical(name):
    V = 11
    train, test = _data(0, V)
    dense, sparse = _fit_both(MODELS[name], train, V)
    assert sparse.sparse_emissions and not dense.sparse_emissions
    # bit for bit, the paper's M-step too: it reads the sums of E log B, whose Newton steps would
    # amplify a last-bit difference of the layouts' additions along the prior's flat directions
    # (a weighed bucket's per-sequence totals were once numpy sums, grouped by position: 5e-10
    # apart in the ELBO by iteration 4, 1e-7 in alpha_pi)
    np.testing.assert_array_equal(sparse.elbo_history_, dense.elbo_history_)
    np.testing.assert_array_equal([v for _, v in sparse.elbo_trace_], [v for _, v in dense.elbo_trace_])
    hd, hs = _hyper(dense), _hyper(sparse)
    assert hd.keys() == hs.keys()
    for key in hd:
        torch.testing.assert_close(hs[key], hd[key], rtol=0, atol=0, msg=key)
    # held-out sequences with symbols never seen in training: the same to rounding (the two
    # layouts' kernels add a sequence's terms in other orders; for some random starts a run ends
    # one ulp apart: 7e-14 in one of these 25 scores under the v6 starts, none under v5's)
    np.testing.assert_allclose(sparse.score_samples(test), dense.score_samples(test), rtol=1e-13)


def test_one_symbol_vocabulary():
    train = [np.zeros(n, dtype=np.int64) for n in (1, 3, 7, 2)]
    dense, sparse = _fit_both(MODELS["ldhmm-pf"], train, 1)
    np.testing.assert_array_equal(sparse.elbo_history_, dense.elbo_history_)
    np.testing.assert_array_equal(sparse.score_samples(train), dense.score_samples(train))


@pytest.mark.parametrize("guide", ["pf", "ff"])
def test_torch_route_local_problems_match_dense(monkeypatch, guide):
    """Without the compiled kernels the sparse layout solves every chunk as a dense problem over
    its own symbols plus one lumped remainder (LocalView): the same E-step up to rounding (the
    local problem's row totals add fewer, lumped terms). Over a whole fit such rounding is
    amplified along the flat directions of the prior's objective, so one E-step is compared."""
    V = 40
    train, test = _data(1, V, n=40, held=12)
    dense = MODELS[f"ldhmm-{guide}"](n_states=3, n_symbols=V, seed=2, max_iter=6, n_init=1).fit(train)
    # converged E-steps (the stopping rule of a sweep is sensitive to rounding); a start that
    # hovers in the last bits without meeting 1e-15 stops at the cap in both routes (at 5,000
    # such a start of one 3-symbol sequence took 37 s of the torch route)
    dense.e_step_tol, dense.e_step_max_iter = 1e-15, 500
    sparse = copy.deepcopy(dense)
    sparse.emission_layout = "sparse"
    monkeypatch.setattr(kernels, "ENABLED", False)
    # The learned emission rows sum to ~5e6: log B(prior + counts) - log B(prior) cancels
    # lgamma values near 7e7, whose spacing is 1.5e-8, in either route: agreement to a few
    # such units is agreement to rounding.
    scale = float(np.abs(torch.lgamma(dense.params_.prior["B"].sum(-1)).numpy()).max())
    atol = 64 * np.spacing(scale)
    np.testing.assert_allclose(sparse.score_samples(test), dense.score_samples(test), rtol=1e-12, atol=atol)
    np.testing.assert_allclose(sparse.score_samples(train), dense.score_samples(train), rtol=1e-12, atol=atol)
    pd_, ps = dense.posterior(test), sparse.posterior(test)
    np.testing.assert_allclose(dense_emission_posterior(ps, sparse.beta_), pd_["g_B"], rtol=1e-9)


def test_posterior_predict_decode_agree():
    V = 13
    train, test = _data(3, V)
    dense, sparse = _fit_both(MODELS["ldhmm-pf"], train, V)
    pd_, ps = dense.posterior(test), sparse.posterior(test)
    assert "g_B" not in ps and len(ps["B_symbols"]) == len(test)
    for m, seq in enumerate(test):
        np.testing.assert_array_equal(ps["B_symbols"][m], np.unique(seq))
        assert ps["B_counts"][m].shape == (3, np.unique(seq).size)
        np.testing.assert_allclose(ps["B_counts"][m].sum(), len(seq), rtol=1e-12)
    np.testing.assert_array_equal(dense_emission_posterior(ps, sparse.beta_), pd_["g_B"])
    for key in ("g_pi", "g_A", "elbo"):
        np.testing.assert_array_equal(ps[key], pd_[key])
    for a, b in zip(ps["state_marginals"], pd_["state_marginals"]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(sparse.predict_next_proba(test), dense.predict_next_proba(test), rtol=1e-12)
    # the same paths, but for exact ties (two paths of one score, e.g. a state visited twice
    # in either order), which the two layouts' last bits may break either way
    mean = {g: pd_[f"g_{g}"] / pd_[f"g_{g}"].sum(-1, keepdims=True) for g in ("pi", "A", "B")}
    for m, (a, b) in enumerate(zip(sparse.decode(test), dense.decode(test))):
        if not np.array_equal(a, b):
            scores = [_path_log_score(mean["pi"][m], mean["A"][m], mean["B"][m], test[m], z) for z in (a, b)]
            np.testing.assert_allclose(scores[0], scores[1], rtol=1e-12)


def _path_log_score(pi, A, B, seq, z) -> float:
    """log pi[z_1] + sum log A[z_t-1, z_t] + sum log B[z_t, x_t] of one path ``z``."""
    return float(np.log(pi[z[0]]) + np.log(A[z[:-1], z[1:]]).sum() + np.log(B[z, seq]).sum())


def test_importance_sampling_with_a_lumped_remainder():
    """Sparse IS draws B at a chunk's symbols plus one remainder: another estimator of the same
    log p(x); with many draws it agrees with the dense one, and it is above the ELBO."""
    V = 30
    train, test = _data(4, V, n=40, held=6, max_len=6)
    dense, sparse = _fit_both(MODELS["ldhmm-pf"], train, V)
    a = dense.log_marginal_is(test, n_samples=4000, seed=0)
    b = sparse.log_marginal_is(test, n_samples=4000, seed=1)
    np.testing.assert_allclose(b, a, atol=0.03)
    assert np.all(b >= sparse.score_samples(test) - 0.03)


def test_save_load_keeps_the_layout(tmp_path):
    V = SPARSE_MIN_SYMBOLS + 5
    rng = np.random.default_rng(5)
    train = [rng.integers(0, V, size=rng.integers(2, 9)) for _ in range(30)]
    model = LDHMM(2, n_symbols=V, seed=0, max_iter=4, n_init=1).fit(train)
    assert model.sparse_emissions  # "auto" from K and V
    path = tmp_path / "m.json"
    model.save(path)
    again = LDHMM.load(path)
    assert again.sparse_emissions
    np.testing.assert_array_equal(again.score_samples(train[:5]), model.score_samples(train[:5]))


def test_layout_depends_on_k_and_v_only():
    assert emission_layout(8, SPARSE_MIN_SYMBOLS - 1) == "dense"
    assert emission_layout(8, SPARSE_MIN_SYMBOLS) == "sparse"
    assert emission_layout(8, 10, "sparse") == "sparse"
    with pytest.raises(ValueError, match="emission_layout"):
        emission_layout(8, 10, "csr")
    with pytest.raises(ValueError, match="emission_layout"):
        LDHMM(2, emission_layout="csr")


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 9), st.integers(1, 7))
def test_local_symbols(seed, V, max_len):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_len + 1, size=6)
    tokens = np.zeros((6, max_len), dtype=np.int64)
    for m, n in enumerate(lengths):
        tokens[m, :n] = rng.integers(0, V, size=n)
    symbols, slots = local_symbols(tokens, lengths, V)
    for m, n in enumerate(lengths):
        distinct = np.unique(tokens[m, :n])
        np.testing.assert_array_equal(symbols[m, : distinct.size], distinct)  # ascending
        np.testing.assert_array_equal(symbols[m, slots[m, :n]], tokens[m, :n])
    assert symbols.shape[1] == max(np.unique(tokens[m, :n]).size for m, n in enumerate(lengths))


def test_block_sums_equal_dense_block_sums_bitwise():
    rng = np.random.default_rng(0)
    M, R, W, V = 200, 3, 4, 17
    symbols = np.sort(np.array([rng.choice(V, W, replace=False) for _ in range(M)]), axis=1)
    values = rng.random((M, R, W)) * 10 ** rng.uniform(-5, 5, size=(M, R, W))
    dense = np.zeros((M, R, V))
    for m in range(M):
        dense[m][:, symbols[m]] = values[m]
    blocks = np.stack([dense[s : s + SUM_BLOCK].sum(0) for s in range(0, M, SUM_BLOCK)])
    assert np.array_equal(scatter_blocks(values, symbols, V, SUM_BLOCK), blocks.sum(0))
    np.testing.assert_allclose(scatter_rows(values, symbols, V), dense.sum(0), rtol=1e-13)


def test_expected_log_sums_against_the_definition():
    V = 9
    train, _ = _data(6, V, n=30)
    model = LDHMM(3, n_symbols=V, seed=0, max_iter=3, n_init=1, emission_layout="sparse").fit(train)
    (bucket,) = make_buckets(train, sparse=True, n_symbols=V)[:1]
    rng = np.random.default_rng(0)
    counts = torch.from_numpy(rng.random((bucket.n_sequences, 3, bucket.symbols.shape[1])))
    from_slots = counts * slot_mask(bucket)[:, None, :]
    dense = to_dense_counts(from_slots, bucket, V)
    expected = expected_log_dirichlet(model.params_.prior["B"] + dense).sum(0)
    got = emission_log_sums(model.params_.prior["B"], from_slots, bucket).total(model.params_.prior["B"])
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-10)
    view = LocalView(bucket, model.params_)
    assert view.n_local <= V
    torch.testing.assert_close(view.slot_counts(view.dense_counts(from_slots)), from_slots)


def test_cli_posterior_table_in_the_sparse_layout():
    """``ldhmm posterior`` of a sparse-layout model: E_q[B] at each sequence's own symbols and
    the row totals, equal to the dense layout's means there and elsewhere."""
    V = 9
    train, held = _data(7, V, n=40)
    db = SequenceDatabase.from_sequences(held, [f"s{v}" for v in range(V)])
    kw = dict(n_symbols=V, seed=0, max_iter=3, n_init=1)
    sparse = LDHMM(3, emission_layout="sparse", **kw).fit(train)
    dense = LDHMM(3, emission_layout="dense", **kw).fit(train)
    table = posterior_table(sparse, db)
    reference = posterior_table(dense, db)
    beta = sparse.params_.prior["B"].double().numpy()
    for i in range(len(db)):
        symbols = table["B_symbols"][i]
        full = reference["B_mean"][i].reshape(3, V)
        np.testing.assert_allclose(table["B_mean"][i].reshape(3, -1), full[:, symbols], rtol=1e-12)
        others = np.setdiff1d(np.arange(V), symbols)
        np.testing.assert_allclose(
            beta[:, others] / table["B_row_total"][i][:, None], full[:, others], rtol=1e-12
        )


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize(
    "sharing",
    [LDHMM_SHARING, HMMV_SHARING, ParameterSharing(pi="sequence", A="sequence", B="point", pseudocount=0.5)],
    ids=["ldhmm", "hmmv", "point-B"],
)
def test_cold_start_potentials_are_those_at_zero_counts(sparse, sharing):
    """The cold start's potentials (the prior's E log theta, computed once) equal the general
    route's at all-zero counts, sequence by sequence, at every real position."""
    V, K = 7, 3
    train, _ = _data(3, V, n=40, unseen=0)
    params = init_parameters(sharing, K, V, seed=1, dtype=torch.float64)
    for bucket in make_buckets(train, sparse=sparse, n_symbols=V):
        W = bucket.emission_width(V)
        zeros = {
            g: torch.zeros((bucket.n_sequences,) + group_shape(g, K, W), dtype=torch.float64) for g in GROUPS
        }
        general = token_potentials(params, zeros, bucket)
        cold = token_potentials(params, None, bucket)
        mask = bucket.mask[..., None]
        for a, b in zip(general[:2], cold[:2]):
            torch.testing.assert_close(b.expand_as(a) if b.dim() < a.dim() else b, a, rtol=1e-14, atol=1e-14)
        torch.testing.assert_close(cold[2] * mask, general[2] * mask, rtol=1e-14, atol=1e-14)
