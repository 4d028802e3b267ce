"""Fitting along K (``VariantHMM.fit_path``, ``ldhmm fit --states 2..4``) and the split that grows K.

The properties: the best training ELBO does not fall as K grows (relative tolerance 1e-6), on
synthetic data and slices of Entree and MSNBC; on data drawn from K* states the path's K* fit
scores held-out data within 0.02 nats/token of the true hyper-parameters; a path resumed from a
saved model gives the models of the uninterrupted one, bit for bit; the split keeps what it
promises (docs/math.md, "Growing K by splitting a state").
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ldhmm.baselines.hmmv import HMMV
from ldhmm.baselines.vbhmm import VBHMM
from ldhmm.cli import fit_path as fit_path_cli
from ldhmm.cli import main
from ldhmm.data import load_paper_subset
from ldhmm.experiments.fit_quality import truth_hyperparameters
from ldhmm.inference import HMMV_SHARING, LDHMM_SHARING, VBHMM_SHARING, VariantParameters
from ldhmm.inference.distributed.workers import LocalBackend
from ldhmm.inference.growth import UNUSED_WEIGHT, expected_occupancy, pad_states, split_state
from ldhmm.models import LDHMM, fit_starts
from ldhmm.models.path import check_states, grown_starts, load_path_state, save_path_state

RTOL = 1e-6
K_TRUE = 3
SYMBOLS = ["home", "news", "sport", "tech", "weather", "shop"]


def assert_not_falling(models):
    elbos = [float(m.elbo_history_[-1]) for m in models.values()]
    for K, a, b in zip(list(models)[1:], elbos, elbos[1:]):
        assert b >= a - RTOL * abs(a), f"the best training ELBO falls at K = {K}: {a} -> {b}"


def random_parameters(sharing, K=3, V=5, seed=0) -> VariantParameters:
    gen = torch.Generator().manual_seed(seed)
    params = VariantParameters(sharing)
    for g, shape in (("pi", (K,)), ("A", (K, K)), ("B", (K, V))):
        rows = 0.5 + torch.rand(shape, generator=gen)
        kind = sharing.kind(g)
        if kind == "point":
            params.log_point[g] = torch.log(rows / rows.sum(-1, keepdim=True))
        else:
            params.prior[g] = rows if sharing.learn_prior else torch.full(shape, 1.0)
            if kind == "shared":
                params.posterior[g] = params.prior[g] + 10 * rows
    return params


# ---- the split -----------------------------------------------------------------------------
def test_split_divides_columns_and_copies_rows():
    old = random_parameters(LDHMM_SHARING)
    new = split_state(old, 1, jitter=0.0)
    p, q = old.prior, new.prior
    assert new.n_states == 4 and new.n_symbols == 5
    # where the chain goes: column 1 divided between state 1 and its copy (3), the sum kept
    assert torch.allclose(q["pi"][1] + q["pi"][3], p["pi"][1], rtol=0, atol=1e-15)
    assert torch.allclose(q["A"][:3, 1] + q["A"][:3, 3], p["A"][:, 1], rtol=0, atol=1e-15)
    assert torch.equal(q["pi"][[0, 2]], p["pi"][[0, 2]])
    # what it does from there: copied
    assert torch.equal(q["A"][3], q["A"][1]) and torch.equal(q["B"][3], q["B"][1])
    assert torch.equal(q["B"][:3], p["B"])
    # the input is left alone
    assert old.n_states == 3


def test_split_perturbation_is_antisymmetric_and_seeded():
    old = random_parameters(LDHMM_SHARING)
    a = split_state(old, 0, jitter=0.3, seed=5)
    b = split_state(old, 0, jitter=0.3, seed=5)
    c = split_state(old, 0, jitter=0.3, seed=6)
    assert all(torch.equal(a.prior[g], b.prior[g]) for g in a.prior)
    assert not torch.equal(a.prior["B"], c.prior["B"])
    assert not torch.equal(a.prior["B"][0], a.prior["B"][3])  # the copies can separate
    # exp(+delta u) and exp(-delta u): their product is the square of the row they came from
    assert torch.allclose(a.prior["B"][0] * a.prior["B"][3], old.prior["B"][0] ** 2, rtol=1e-12)


def test_split_keeps_fixed_priors_and_normalized_points():
    vb = split_state(random_parameters(VBHMM_SHARING), 2, jitter=0.2)
    for g in ("pi", "A", "B"):
        assert torch.equal(vb.prior[g], torch.ones_like(vb.prior[g]))  # fixed priors: the model's setting
    counts = vb.posterior["pi"] - vb.prior["pi"]
    old = random_parameters(VBHMM_SHARING)
    assert torch.allclose(counts.sum(), (old.posterior["pi"] - old.prior["pi"]).sum())
    hv = split_state(random_parameters(HMMV_SHARING), 0, jitter=0.2)
    for g in ("pi", "B"):
        assert torch.allclose(torch.logsumexp(hv.log_point[g], -1), torch.zeros(()), atol=1e-12)
    assert torch.equal(hv.prior["A"], torch.ones(4, 4))


def test_split_refuses_bad_arguments():
    params = random_parameters(LDHMM_SHARING)
    with pytest.raises(ValueError, match="state must be in 0..2"):
        split_state(params, 3)
    with pytest.raises(ValueError, match="weight"):
        split_state(params, 0, weight=1.0)


def test_grown_starts_most_visited_first_and_over_gaps():
    params = random_parameters(LDHMM_SHARING)
    visits = expected_occupancy(params, 10).numpy()
    starts = grown_starts(params, 4, seed=0, mean_length=10)
    assert [label for label, _ in starts] == [f"split:{k}" for k in np.argsort(-visits, kind="stable")]
    assert all(p.n_states == 4 for _, p in grown_starts(params, 4, 0, 10))
    assert all(p.n_states == 6 for _, p in grown_starts(params, 6, 0, 10))


def test_check_states():
    assert check_states(range(2, 5)) == [2, 3, 4]
    for bad, message in (([3, 2], "increase"), ([], "at least one"), ([0, 1], ">= 1"), ([2.5], "integers")):
        with pytest.raises(ValueError, match=message):
            check_states(bad)


# ---- the path ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def synthetic():
    truth = LDHMM.from_hyperparameters(*truth_hyperparameters(K_TRUE, 6, "peaked", 0))
    rng = np.random.default_rng(1000)
    train = truth.sample(150, lengths=rng.integers(5, 30, 150), seed=1)
    held = truth.sample(100, lengths=rng.integers(5, 30, 100), seed=2)
    return truth, train, held


@pytest.fixture(scope="module")
def path(synthetic):
    _, train, _ = synthetic
    calls = []
    models = LDHMM.fit_path(
        train, range(2, 5), callback=lambda K, m: calls.append((K, m)), n_symbols=6, seed=0, n_init=1
    )
    return models, calls


def test_path_does_not_fall_and_recovers_the_truth(synthetic, path):
    truth, _, held = synthetic
    models, calls = path
    assert list(models) == [2, 3, 4]
    assert [K for K, _ in calls] == [2, 3, 4] and all(models[K] is m for K, m in calls)
    assert_not_falling(models)
    assert models[2].path_start_ in ("restart", "seeded", "hmm")
    assert all(
        m.path_start_ in ("restart", "seeded", "hmm", "continued") or m.path_start_.startswith("split:")
        for m in models.values()
    )
    n_held = sum(len(s) for s in held)
    gap = (models[K_TRUE].score_samples(held).sum() - truth.score_samples(held).sum()) / n_held
    assert gap >= -0.02, f"the K* fit is {-gap:.4f} nats/token below the truth's held-out bound"


def test_resumed_path_is_the_uninterrupted_one(synthetic, path, tmp_path):
    _, train, _ = synthetic
    models, _ = path
    models[3].save(tmp_path / "K3.json")
    resumed = LDHMM.fit_path(
        train, [4], previous=LDHMM.load(tmp_path / "K3.json"), n_symbols=6, seed=0, n_init=1
    )
    for g in ("pi", "A", "B"):
        assert torch.equal(resumed[4].params_.prior[g], models[4].params_.prior[g])
    assert np.array_equal(resumed[4].elbo_history_, models[4].elbo_history_)
    assert resumed[4].path_start_ == models[4].path_start_


def test_path_refuses_bad_previous_and_svi(synthetic, path):
    _, train, _ = synthetic
    models, _ = path
    with pytest.raises(ValueError, match="not fewer than the first K = 3"):
        LDHMM.fit_path(train, [3, 4], previous=models[3], n_symbols=6)
    with pytest.raises(ValueError, match="fitted LDHMM"):
        LDHMM.fit_path(train, [3], previous=LDHMM(2))
    with pytest.raises(ValueError, match="optimizer='cavi'"):
        LDHMM.fit_path(train, [2], optimizer="svi")


def test_path_runs_path_n_init_restarts_after_the_first_k(synthetic):
    """A path's K after the first runs min(n_init, path_n_init) restarts, the first seeds of
    restart_seeds(): the same runs as the first restarts of a fit of that K on its own."""
    _, train, _ = synthetic
    options = dict(n_symbols=6, seed=3, max_iter=15, seeded_start="none", effort="thorough")
    models = LDHMM.fit_path(train[:60], range(2, 4), n_init=3, path_n_init=1, **options)
    assert [len(m.restart_elbo_histories_) for m in models.values()] == [3, 1]
    alone = LDHMM(3, n_init=3, **options).fit(train[:60])
    assert models[3].restart_seeds() == alone.restart_seeds()[:1]
    assert np.array_equal(models[3].restart_elbo_histories_[0], alone.restart_elbo_histories_[0])
    rows = dict(zip(*models[3].describe().summary[["field", "value"]].T.values))
    assert rows["restarts (n_init)"].startswith("1 (n_init = 3; path_n_init")
    assert rows["restart seeds (the kept run: highest final ELBO)"] == str(alone.restart_seeds()[0])
    # path_n_init above n_init: n_init restarts at every K
    more = LDHMM.fit_path(train[:60], range(2, 4), n_init=2, path_n_init=3, **options)
    assert [len(m.restart_elbo_histories_) for m in more.values()] == [2, 2]
    # None (default): n_init at every K
    same = LDHMM.fit_path(train[:60], range(2, 4), n_init=2, **options)
    assert [len(m.restart_elbo_histories_) for m in same.values()] == [2, 2]
    assert np.array_equal(same[3].elbo_history_, more[3].elbo_history_)
    with pytest.raises(ValueError, match="path_n_init must be None or an integer >= 1"):
        LDHMM(2, path_n_init=0)


@pytest.mark.parametrize("cls", [VBHMM, HMMV])
def test_path_of_other_variants(cls, synthetic):
    _, train, _ = synthetic
    models = cls.fit_path(train[:60], range(2, 4), n_symbols=6, n_init=1, max_iter=30)
    assert [type(m) for m in models.values()] == [cls, cls]
    assert [m.n_states for m in models.values()] == [2, 3]
    assert np.isfinite(models[3].elbo_history_[-1])


@pytest.mark.parametrize("name, n", [("entree", 100), ("msnbc", 120)])
def test_path_does_not_fall_on_real_data(name, n, data_dir):
    db = load_paper_subset(name, data_dir)
    seqs = [s for s in db.sequences if len(s) >= 2][:n]
    models = LDHMM.fit_path(seqs, range(2, 5), n_symbols=db.n_symbols, seed=0, n_init=1)
    assert_not_falling(models)


def falling_case(n_sequences=140):
    """Drawn from K* = 4 states over 3 symbols with sparse priors (concentrations 0.3, A's
    diagonal 1.2): at K = 3 every restart and every split start of the K = 2 fit ends below it
    (found by an audit; docs/math.md, "Growing K by splitting a state")."""
    rng = np.random.default_rng(3)
    K, V, conc = int(rng.integers(2, 5)), int(rng.integers(3, 12)), float(rng.choice([0.3, 1.0, 5.0]))
    a_pi = np.full(K, conc)
    a_A = np.full((K, K), conc) + np.eye(K) * conc * 3
    beta = rng.gamma(conc, 1.0, size=(K, V)) + 0.05
    truth = LDHMM.from_hyperparameters(a_pi, a_A, beta)
    seqs = truth.sample(180, lengths=rng.integers(5, 40, size=180), seed=0)
    return seqs[:n_sequences], V


@pytest.fixture(scope="module", params=["pf", "ff"])
def falling_path(request, tmp_path_factory):
    """The falling case's path K = 2, 3, every K's model and per-sequence state saved as the
    command saves them."""
    train, V = falling_case()
    folder = tmp_path_factory.mktemp(f"falling-{request.param}")
    saved = []

    def save(K, model):
        model.save(folder / f"K{K}.json")
        saved.append((K, save_path_state(model, folder / f"K{K}.state.npz")))

    # the restarts and split starts alone (the seeded start would hold the path here itself; so
    # would the v5 starts: effort "thorough", v4's restarts)
    options = {
        "n_symbols": V,
        "seed": 0,
        "guide": request.param,
        "n_init": 1,
        "seeded_start": "none",
        "effort": "thorough",
    }
    models = LDHMM.fit_path(train, range(2, 4), callback=save, **options)
    return train, options, models, folder, saved


def test_path_continues_the_previous_fit_where_every_start_falls(falling_path):
    _, _, models, _, saved = falling_path
    assert_not_falling(models)
    # the restarts and split starts all end below K = 2 here: the continued fit is what holds
    assert models[3].path_start_ == "continued"
    assert max(h[-1] for h in models[3].restart_elbo_histories_) < models[2].elbo_history_[-1]
    history = models[3].elbo_history_
    assert np.all(np.diff(history) >= -1e-9 * np.abs(history[1:])), "EM lowered the bound"
    # a path's per-sequence state is kept for the next K only, and let go once used
    assert saved == [(2, True), (3, False)]
    assert models[2]._path_states is None and models[3]._path_states is None


def test_path_resumed_with_its_state_continues_as_the_uninterrupted_one(falling_path):
    train, options, models, folder, _ = falling_path
    previous = LDHMM.load(folder / "K2.json")
    load_path_state(previous, folder / "K2.state.npz")
    resumed = LDHMM.fit_path(train, [3], previous=previous, **options)[3]
    assert resumed.path_start_ == "continued"
    assert np.array_equal(resumed.elbo_history_, models[3].elbo_history_)
    for g in ("pi", "A", "B"):
        assert torch.equal(resumed.params_.prior[g], models[3].params_.prior[g])


def test_path_state_file_is_checked(falling_path, tmp_path):
    """A state file of :mod:`ldhmm.inference.state_store` (tests/test_state_store.py checks every
    field): one line naming the file and the field, and how to start over."""
    train, options, _, folder, _ = falling_path
    previous = LDHMM.load(folder / "K2.json")
    with pytest.raises(
        ValueError, match="field 'n_states': K = 2 there, 3 here: fit the path again from its first K"
    ):
        load_path_state(LDHMM.load(folder / "K3.json"), folder / "K2.state.npz")
    with np.load(folder / "K2.state.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    manifest = json.loads(arrays["manifest"].tobytes())
    bad = tmp_path / "bad.state.npz"
    np.savez(bad, **{**arrays, "p0/b0/counts_A": -arrays["p0/b0/counts_A"] - 1.0})
    with pytest.raises(ValueError, match=r"bad\.state\.npz: array 'p0/b0/counts_A' holds a negative count"):
        load_path_state(previous, bad)
    np.savez(bad, **{**arrays, "p0/b0/counts_pi": np.array("two")})
    with pytest.raises(ValueError, match=r"array 'p0/b0/counts_pi' holds <U3 values, not numbers"):
        load_path_state(previous, bad)
    other = json.dumps({**manifest, "owner": {"sha256": "0" * 64}}).encode()
    np.savez(bad, **{**arrays, "manifest": np.frombuffer(other, np.uint8)})
    with pytest.raises(ValueError, match="field 'owner.sha256' is '0+' there"):
        load_path_state(previous, bad)
    bad.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="not a path state file"):
        load_path_state(previous, bad)
    # read through the hardened reader: a compressed member (a zip bomb's way) is refused unread
    np.savez_compressed(bad, **arrays)
    with pytest.raises(ValueError, match="is compressed"):
        load_path_state(previous, bad)
    # a state of other data (another bucket layout) is refused where the path would use it
    load_path_state(previous, folder / "K2.state.npz")
    with pytest.raises(ValueError, match="state of other training data"):
        LDHMM.fit_path(train[:50], [3], previous=previous, **options)


def test_continued_fit_begins_at_the_previous_bound():
    train, V = falling_case(60)
    m2 = LDHMM(2, n_symbols=V, seed=0, n_init=1).fit(train)
    engine = m2._engine()
    runner = LocalBackend([engine.worker(m2._buckets(train), V)])
    kept = engine.fit_backend(runner, m2.params_)  # warm states of a fit at its own optimum
    padded = pad_states(kept.states, 2)
    for st, old in zip(padded, kept.states):
        assert st.counts["A"].shape[1:] == (3, 3) and st.counts["pi"].shape[1] == 3
        assert torch.equal(st.counts["A"][:, :2, :2], old.counts["A"])
        assert float(st.counts["A"][:, 2].abs().sum() + st.counts["A"][:, :, 2].abs().sum()) == 0.0
        assert float(st.counts["B"][:, 2].abs().sum()) == 0.0
    params = split_state(kept.params, 0, weight=UNUSED_WEIGHT, jitter=0.0, min_value=1e-6)
    grown = engine.fit_backend(runner, params, warm_states=[padded])
    floor = kept.elbo_history[-1]
    # the first E-step starts from the kept bound (the unused state's prior mass is ~1e-6)
    assert grown.e_step_elbo_history[0] >= floor - 1e-3
    assert grown.elbo_history[-1] >= floor - RTOL * abs(floor)
    with pytest.raises(ValueError, match="do not match"):
        runner.workers[0].set_states(padded[:-1] if len(padded) > 1 else [])


# ---- the command ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def log_file(synthetic, tmp_path_factory):
    _, train, _ = synthetic
    path = tmp_path_factory.mktemp("log") / "train.txt"
    path.write_text("\n".join(" ".join(SYMBOLS[i] for i in s) for s in train[:80]) + "\n")
    return path


def fit_cli(capsys, *argv):
    code = main(["fit", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_path_writes_models_and_table_and_resumes(log_file, tmp_path, capsys):
    out = tmp_path / "path"
    argv = (log_file, "--states", "2..4", "--restarts", "1", "--holdout", "0.25", "--out", out)
    code, text, err = fit_cli(capsys, *argv)
    assert code == 0, err
    names = sorted(p.name for p in out.iterdir() if p.name != ".lock")  # the directory's lock file
    assert names == ["K2.json", "K3.json", "K4.json", "path.csv", "path.json"]
    table = (out / "path.csv").read_text().splitlines()
    assert table[0] == "K,train_elbo,train_elbo_per_token,heldout_per_token,fit_seconds,start"
    assert [line.split(",")[0] for line in table[1:]] == ["2", "3", "4"]
    assert all(np.isfinite(float(line.split(",")[3])) for line in table[1:])
    assert "held-out/token" in text
    assert json.loads((out / "K2.json").read_text())["vocabulary"] == sorted(SYMBOLS)
    first = (out / "K4.json").read_bytes()
    (out / "K4.json").unlink()
    # K = 3's state went once K = 4 was written: the path is fitted again, to the same file
    code, text, err = fit_cli(capsys, *argv)
    assert code == 0, err
    assert text.splitlines()[0].endswith("fitting the path again from K = 2")
    assert (out / "K4.json").read_bytes() == first
    # other settings in the same --out are refused, in one line
    code, _, err = fit_cli(
        capsys, log_file, "--states", "2..4", "--seed", "1", "--holdout", "0.25", "--out", out
    )
    assert code == 1 and err.count("\n") == 1 and "other settings (seed 0 there, 1 here)" in err
    assert json.loads((out / "path.json").read_text())["path_restarts"] is None
    code, _, err = fit_cli(capsys, *argv, "--path-restarts", "1")
    assert code == 1 and "other settings (path_restarts None there, 1 here)" in err


def test_cli_path_refuses_other_data_and_a_foreign_model_file(log_file, tmp_path, capsys):
    """Issue 49: a path's --out resumed with the data file changed in place (the same settings)
    is refused, and so is a K file fitted on other sequences copied into it."""
    log, out = tmp_path / "log.txt", tmp_path / "path"
    log.write_text(log_file.read_text())
    argv = ("--states", "2..3", "--restarts", "1", "--max-iter", "3")
    code, _, err = fit_cli(capsys, log, *argv, "--out", out)
    assert code == 0, err
    original = log.read_text()
    reversed_lines = "\n".join(" ".join(reversed(line.split())) for line in original.splitlines()) + "\n"
    log.write_text(reversed_lines)  # the same file, other sequences (same symbol counts)
    (out / "K3.json").unlink()
    code, _, err = fit_cli(capsys, log, *argv, "--out", out)
    assert code == 1 and err.count("\n") == 1 and "other settings (data_sha256 " in err, err
    # the same data again, with a K2.json of the other sequences (same settings) copied in
    code, _, err = fit_cli(capsys, log, *argv, "--out", tmp_path / "other")
    assert code == 0, err
    (out / "K2.json").write_bytes((tmp_path / "other" / "K2.json").read_bytes())
    log.write_text(original)
    code, _, err = fit_cli(capsys, log, *argv, "--out", out)
    assert code == 1 and err.count("\n") == 1 and "K2.json was fitted on other data" in err, err
    assert not (out / "K3.json").exists()


def test_cli_path_lists_and_init(log_file, tmp_path, capsys):
    single = tmp_path / "k2.json"
    assert fit_cli(capsys, log_file, "--states", "2", "--restarts", "1", "--out", single, "--quiet")[0] == 0
    out = tmp_path / "list"
    code, _, err = fit_cli(
        capsys, log_file, "--states", "2,4", "--init", single, "--restarts", "1", "--out", out, "--quiet"
    )
    assert code == 0, err
    assert sorted(p.name for p in out.glob("K*.json")) == ["K2.json", "K4.json"]
    assert (out / "path.csv").read_text().splitlines()[1].endswith(",init")
    code, _, err = fit_cli(capsys, log_file, "--states", "3..4", "--init", single, "--out", tmp_path / "x")
    assert code == 1 and "has K = 2; the range starts at K = 3" in err


@pytest.mark.parametrize(
    "states, message",
    [("4..2", "--states: empty range '4..2'"), ("2..x", "--states: '2..x' is not an integer or a range")],
)
def test_cli_bad_range(log_file, tmp_path, capsys, states, message):
    code, _, err = fit_cli(capsys, log_file, "--states", states, "--out", tmp_path / "o")
    assert code == 1 and err.count("\n") == 1 and message in err


def test_cli_path_needs_an_out_directory(log_file, tmp_path, capsys):
    code, _, err = fit_cli(capsys, log_file, "--states", "2..3")
    assert code == 1 and "needs --out DIRECTORY" in err
    code, _, err = fit_cli(
        capsys, log_file, "--states", "2", "--holdout", "0.2", "--out", tmp_path / "m.json"
    )
    assert code == 1 and "--holdout needs several K" in err


@pytest.mark.parametrize(
    "given, message",
    [
        (["--states", "2", "--path-restarts", "1"], "--path-restarts needs several K (--states 2..8)"),
        (["--states", "2", "--context-smoothing", "0"], "--context-smoothing needs --emission-context"),
        (
            ["--states", "2..3", "--min-context-count", "5", "--context-smoothing", "1"],
            "--min-context-count and --context-smoothing need --emission-context",
        ),
        (
            ["--states", "2", "--emission-context", "previous", "--min-context-count", "5"],
            "--min-context-count needs --emission-context N with N > 1",
        ),
        (
            ["--states", "2", "--emission-context", "previous", "--holdout", "0.3"],
            "--holdout needs several K",
        ),
        (
            ["--states", "2..3", "--force"],
            "--force starts a checkpointed fit over: it needs --checkpoint DIR",
        ),
        (["--states", "2", "--emission-context", "1", "--force"], "it needs --checkpoint DIR"),
        (["--states", "2..3", "--worker-threads", "2"], "no --backend, --partitions or Dask options"),
        (["--states", "2..3", "--scheduler-timeout", "5"], "no --backend, --partitions or Dask options"),
        (["--init", "SAVED", "--unknown", "reserve"], "--unknown reserve adds <unk> to a new vocabulary"),
        (
            ["--init", "SAVED", "--restarts", "7"],
            "--init gives a fit of one K its only start: it takes no --restarts",
        ),
        (["--init", "SAVED", "--seeded-start", "none"], "it takes no --seeded-start"),
    ],
)
def test_cli_refuses_a_setting_its_fit_would_drop(log_file, tmp_path, capsys, given, message):
    """A setting the asked fit has no use for is one line naming it, not a fit without it."""
    if "SAVED" in given:  # a saved model to start from
        assert (
            fit_cli(capsys, log_file, "--states", "2", "--max-iter", "2", "--out", tmp_path / "m.json")[0]
            == 0
        )
        given = [str(tmp_path / "m.json") if g == "SAVED" else g for g in given]
    code, _, err = fit_cli(capsys, log_file, *given, "--out", tmp_path / "o")
    assert code == 1 and err.count("\n") == 1 and message in err
    assert not (tmp_path / "o").exists()  # nothing written


def test_cli_a_path_from_a_saved_model_still_takes_restarts_for_its_later_k(log_file, tmp_path, capsys):
    """With several K, ``--init`` starts the first K only: ``--restarts`` is the later K's."""
    assert fit_cli(capsys, log_file, "--states", "2", "--max-iter", "2", "--out", tmp_path / "m.json")[0] == 0
    argv = ["--init", tmp_path / "m.json", "--states", "2..3", "--restarts", "1", "--max-iter", "2"]
    assert fit_cli(capsys, log_file, *argv, "--out", tmp_path / "p")[0] == 0


def test_cli_interrupted_path_says_how_to_resume(log_file, tmp_path, capsys, monkeypatch):
    def interrupt(*args):
        raise KeyboardInterrupt

    out = tmp_path / "cut"
    argv = (log_file, "--states", "2..3", "--restarts", "1", "--max-iter", "5", "--out", out)
    with monkeypatch.context() as m:
        m.setattr(fit_starts, "continue_grown", interrupt)  # Ctrl-C while growing K = 3
        code, _, err = fit_cli(capsys, *argv)
    assert code == 130 and "1 of 2 tasks are saved" in err and "run the same command again" in err
    assert sorted(p.name for p in out.glob("K*.json")) == ["K2.json"]
    assert (out / "K2.state.npz").is_file()  # what K = 3 may continue from
    code, text, err = fit_cli(capsys, *argv)
    assert code == 0, err
    assert text.splitlines()[0] == "resuming at K = 3" and (out / "K3.json").is_file()
    assert not list(out.glob("*.state.npz"))  # the path's last K keeps none, and K = 2's went


@pytest.mark.parametrize("stop_in", ["state", "model"])
def test_cli_path_stopped_while_writing_a_k_resumes_to_the_uninterrupted_files(
    stop_in, log_file, tmp_path, capsys, monkeypatch
):
    # a kill while K = 3 is written (its state file, its model file): the resumed run refits
    # K = 3 from K = 2 (whose state is still there), as the uninterrupted run did, and grows K = 4
    argv = ("--states", "2..4", "--restarts", "1", "--max-iter", "5", "--quiet")
    assert fit_cli(capsys, log_file, *argv, "--out", tmp_path / "ref")[0] == 0
    out = tmp_path / "cut"
    owner, name = (fit_path_cli, "save_path_state") if stop_in == "state" else (LDHMM, "save")
    real = getattr(owner, name)

    def stopped_at_k3(model, path, **kw):
        if model.n_states == 3:
            raise KeyboardInterrupt
        return real(model, path, **kw)

    with monkeypatch.context() as m:
        m.setattr(owner, name, stopped_at_k3)
        assert fit_cli(capsys, log_file, *argv, "--out", out)[0] == 130
    assert sorted(p.name for p in out.glob("K*.json")) == ["K2.json"]
    assert fit_cli(capsys, log_file, *argv, "--out", out)[0] == 0
    for k in (3, 4):
        mine = json.loads((out / f"K{k}.json").read_text())
        ref = json.loads((tmp_path / "ref" / f"K{k}.json").read_text())
        assert mine["prior"] == ref["prior"] and mine["elbo_history"] == ref["elbo_history"]


@pytest.mark.parametrize("config", range(3))
def test_path_does_not_fall_across_random_configurations(config):
    """Data drawn from random models (K* 2..5, V 3..20, concentrations 0.2..20, lengths 5..100):
    the best training ELBO of the default path never falls, whatever the restarts do."""
    rng = np.random.default_rng(500 + config)
    K, V = int(rng.integers(2, 6)), int(rng.integers(3, 21))
    conc = float(np.exp(rng.uniform(np.log(0.2), np.log(20.0))))
    beta = rng.gamma(conc, 1.0, size=(K, V)) + 0.05
    truth = LDHMM.from_hyperparameters(np.full(K, conc), np.full((K, K), conc) + 3 * conc * np.eye(K), beta)
    train = truth.sample(40, lengths=rng.integers(5, 100, size=40), seed=config)
    models = LDHMM.fit_path(train, range(2, 5), n_symbols=V, seed=config, n_init=1)
    assert_not_falling(models)


def test_cli_range_extended_past_a_finished_path_ends_at_the_uninterrupted_files(log_file, tmp_path, capsys):
    # a finished path's last K keeps no per-sequence state: K = 4 grown from K = 3 without it
    # could end elsewhere than on the uninterrupted path, so the path is fitted again from K = 2
    common = ("--restarts", "1", "--max-iter", "5")
    ref = tmp_path / "ref"
    assert fit_cli(capsys, log_file, "--states", "2..4", *common, "--quiet", "--out", ref)[0] == 0
    out = tmp_path / "grown"
    assert fit_cli(capsys, log_file, "--states", "2..3", *common, "--quiet", "--out", out)[0] == 0
    assert not list(out.glob("*.state.npz"))
    code, text, err = fit_cli(capsys, log_file, "--states", "2..4", *common, "--out", out)
    assert code == 0, err
    said = "keeps no per-sequence state to grow K = 4 from: fitting the path again from K = 2"
    assert text.splitlines()[0].endswith(said)
    for k in (2, 3, 4):
        mine = json.loads((out / f"K{k}.json").read_text())
        theirs = json.loads((ref / f"K{k}.json").read_text())
        assert mine["prior"] == theirs["prior"] and mine["elbo_history"] == theirs["elbo_history"]
