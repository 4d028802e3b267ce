"""The contextual models over partitions: in this process and on a Dask cluster (a LocalCluster
of 2 worker processes), the same numbers bit for bit for the same partitioning whatever runs
the partitions, a lost worker recovered exactly, and a partitioned directory read where the
partitions live. Partitioning changes only the order of additions (the in-process fit within
rounding)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ldhmm.models.contextual_fit as contextual_fit
import ldhmm.models.placement as model_placement
from ldhmm.cli import main
from ldhmm.data import SequenceDatabase, write_partitioned
from ldhmm.inference.sharing import ParameterSharing
from ldhmm.modelfiles import load_model
from ldhmm.models.contextual import ContextualLDHMM
from ldhmm.models.contextual_hmm import ContextualHMM

V = 5


def _data(seed=0, n=160):
    """Sequences with a strong previous-event effect (symbol v tends to follow v - 1)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = [int(rng.integers(V))]
        for _ in range(int(rng.integers(1, 18))):
            x.append((x[-1] + 1) % V if rng.random() < 0.6 else int(rng.integers(V)))
        out.append(np.array(x))
    return out


MODELS = {
    "pf": lambda: ContextualLDHMM(3, n_symbols=V, seed=1, max_iter=8, n_init=2),
    "ff": lambda: ContextualLDHMM(3, n_symbols=V, seed=1, max_iter=6, guide="ff"),
    "order2": lambda: ContextualLDHMM(
        2, n_symbols=V, emission_context=2, min_context_count=5, seed=2, max_iter=6
    ),
    "hmm": lambda: ContextualHMM(3, n_symbols=V, seed=1, max_iter=12, n_init=2),
    "mixed": lambda: ContextualLDHMM(
        3, n_symbols=V, seed=1, max_iter=8, sharing=ParameterSharing(pi="shared", A="sequence", B="point")
    ),
}


def _learned(model) -> dict:
    if isinstance(model, ContextualHMM) or model.point_probabilities_:
        if isinstance(model, ContextualHMM):
            return {
                "history": model.objective_history_,
                "pi": model.startprob_,
                "A": model.transmat_,
                "B": model.emissionprob_,
            }
        return {
            "history": model.elbo_history_,
            "pi": model.shared_posterior_["pi"],
            "A": model.alpha_A_,
            "B": model.point_probabilities_["B"],
        }
    return {"history": model.elbo_history_, "pi": model.alpha_pi_, "A": model.alpha_A_, "B": model.beta_}


def _same(a, b) -> None:
    for key, value in _learned(a).items():
        np.testing.assert_array_equal(np.asarray(_learned(b)[key]), np.asarray(value), err_msg=key)


@pytest.mark.parametrize("name", list(MODELS))
def test_partitions_change_only_the_order_of_additions(name):
    seqs = _data()
    whole = MODELS[name]().fit(seqs)
    one = MODELS[name]().fit(seqs, n_partitions=1)
    three = MODELS[name]().fit(seqs, n_partitions=3)
    _same(one, whole)  # one partition is the in-process fit
    assert (whole.n_partitions_, three.n_partitions_) == (1, 3)
    # the objective to the M-step's tolerance; concentrations near the cap (1e6) are flat in it
    np.testing.assert_allclose(_learned(three)["history"], _learned(whole)["history"], rtol=1e-6)
    for key in ("pi", "A", "B"):
        np.testing.assert_allclose(_learned(three)[key], _learned(whole)[key], rtol=1e-4, err_msg=key)
    # the training objective never falls, partitioned or not
    history = np.asarray(_learned(three)["history"])
    assert np.all(np.diff(history) >= -1e-9 * np.abs(history[1:]))
    assert three.training_data_["sha256"] == whole.training_data_["sha256"]
    np.testing.assert_array_equal(three.context_counts_, whole.context_counts_)
    # held-out scores in partitions: each sequence's score does not depend on where it ran
    held = _data(5, n=40)
    np.testing.assert_allclose(
        three.score_samples(held, n_partitions=4), three.score_samples(held), rtol=1e-8, atol=1e-10
    )


def test_rescoring_the_training_set_in_partitions_gives_the_training_bound():
    seqs = _data(2)
    model = ContextualLDHMM(3, n_symbols=V, seed=1).fit(seqs, n_partitions=3)
    assert model.converged_
    tokens = sum(len(s) for s in seqs)
    assert abs(model.score_samples(seqs, n_partitions=3).sum() - model.elbo_) / tokens < 0.005


def test_bad_backend_arguments_are_one_line():
    seqs = _data(n=20)
    with pytest.raises(ValueError, match="backend must be one of"):
        ContextualLDHMM(2).fit(seqs, backend="spark")
    with pytest.raises(ValueError, match="needs client="):
        ContextualHMM(2).fit(seqs, backend="dask")
    with pytest.raises(ValueError, match="n_partitions must be an integer >= 1"):
        ContextualLDHMM(2).fit(seqs, n_partitions=0)
    model = ContextualLDHMM(2, max_iter=2).fit(seqs)
    with pytest.raises(ValueError, match="not a directory"):
        model.score_samples("some/dir", n_partitions=2)


def test_the_fit_command_fits_a_partitioned_directory_where_it_lives(tmp_path):
    seqs = _data(6, n=80)
    db = SequenceDatabase.from_sequences(seqs, [f"page{v}" for v in range(V)])
    write_partitioned(db, tmp_path / "d", n_files=3)
    out = tmp_path / "m.json"
    argv = ["fit", str(tmp_path / "d"), "--states", "2", "--emission-context", "previous", "--restarts", "1"]
    assert main([*argv, "--partitions", "2", "--max-iter", "5", "--out", str(out), "--quiet"]) == 0
    model = load_model(out)
    assert model.vocabulary_ == db.vocabulary and model.training_data_["source"] == str(tmp_path / "d")
    direct = ContextualLDHMM(2, n_symbols=V, n_init=1, max_iter=5).fit(seqs, n_partitions=2)
    np.testing.assert_allclose(model.elbo_history_, direct.elbo_history_, rtol=1e-5)


# ------------------------------------------------------------------ Dask
distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client(local_cluster):
    with (
        local_cluster() as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


@pytest.mark.parametrize("name", ["pf", "mixed"])  # ff and hmm: the same worker calls
def test_a_dask_fit_is_the_local_fit_of_the_same_partitions(client, name):
    seqs = _data(1)
    local = MODELS[name]().fit(seqs, n_partitions=3)
    remote = MODELS[name]().fit(seqs, backend="dask", client=client, n_partitions=3)
    _same(remote, local)
    assert remote.n_partitions_ == 3 and remote.recoveries_ == []
    held = _data(7, n=30)
    np.testing.assert_array_equal(
        remote.score_samples(held, backend="dask", client=client, n_partitions=2),
        remote.score_samples(held, n_partitions=2),
    )


@pytest.mark.parametrize("layout", ["sequences", "events"])
def test_workers_read_their_own_partitioned_files(client, tmp_path, layout):
    seqs = _data(3, n=120)
    db = SequenceDatabase.from_sequences(seqs, [f"page{v}" for v in range(V)])
    write_partitioned(db, tmp_path / "d", layout=layout, n_files=4)
    local = MODELS["pf"]().fit(str(tmp_path / "d"), n_partitions=3)
    remote = MODELS["pf"]().fit(str(tmp_path / "d"), backend="dask", client=client, n_partitions=3)
    _same(remote, local)
    assert remote.vocabulary_ == db.vocabulary
    assert remote.training_data_["source"] == str(tmp_path / "d")
    assert remote.training_data_["n_sequences"] == len(seqs)
    memory = MODELS["pf"]().fit(seqs)
    np.testing.assert_allclose(remote.elbo_history_, memory.elbo_history_, rtol=1e-7)


class _Killing(model_placement.dask_backend_class()):
    """Kills the worker of the last partition in the ``nth`` round of ``method``, before that
    partition's call is sent."""

    target = ("e_step", 6)

    def _round(self, method, arguments, iteration, step):
        self.rounds = getattr(self, "rounds", {})
        self.rounds[method] = self.rounds.get(method, 0) + 1
        if (method, self.rounds[method]) == self.target:
            try:
                self.client.run(os._exit, 1, workers=[self.actors[-1]._address])
            except Exception:  # noqa: BLE001 - the worker dies before it answers
                pass
        return super()._round(method, arguments, iteration, step)


@pytest.mark.parametrize("target", [("count_sums", 9)], ids=str)
def test_a_lost_worker_changes_nothing(client, monkeypatch, target):
    """Killed in a Newton round of the M-step: its partitions are rebuilt and their E-steps (the
    start's point E-steps, then the variational ones) replayed, and the fit ends where the
    unkilled one does, bit for bit."""
    seqs = _data(4)
    unkilled = MODELS["pf"]().fit(seqs, n_partitions=3)
    monkeypatch.setattr(_Killing, "target", target)
    monkeypatch.setattr(contextual_fit, "dask_backend_class", lambda: _Killing)
    client.wait_for_workers(2, timeout=120)
    killed = MODELS["pf"]().fit(seqs, backend="dask", client=client, n_partitions=3)
    _same(killed, unkilled)
    assert len(killed.recoveries_) >= 1
