"""The harness fits along K: tasks of (model, fold) with one row per K, resumed at K granularity,
LDHMM-FF from the same task's LDHMM-PF fit, and the budget rule of every model in config.json.

The path mode (a model class with ``fit_path``) is tested with a stand-in class registered for
these tests only (:class:`PathLDHMM`: each K fitted with a seed drawn from the previous K's
parameters, so that a path resumed from a saved fit that differs in any bit gives other
numbers); it runs in this process (``jobs=1``: worker processes do not see its registration).
"""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pandas as pd
import pytest

import ldhmm
from ldhmm.data import kfold_indices
from ldhmm.experiments import along_k
from ldhmm.experiments.along_k import FitPlan, fit_plans
from ldhmm.experiments.compare import compare_groups
from ldhmm.experiments.datasets import synthetic_database
from ldhmm.experiments.tasks import run_task_groups
from ldhmm.models import LDHMM, fit_starts
from ldhmm.models.contextual import ContextualLDHMM
from ldhmm.models.registry import EM_SETTINGS, register, unregister
from ldhmm.models.variant_hmm import keeps_path_state

SMALL = dict(folds=2, n_sequences=30, max_iter=2, restarts=1, quiet=True, seed=0)
LDHMM_ALONG_K = callable(getattr(LDHMM, "fit_path", None))


def _scores(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=[c for c in df if c.endswith("_seconds")]).reset_index(drop=True)


# ------------------------------------------------------------------------ the runner
def _saving(group, payload, output):
    """A group function: saves its parts in order, and fails where the payload says."""
    for part in group["parts"]:
        key = part["key"]
        if key not in output.todo:
            continue
        if key in payload["fail"]:
            raise RuntimeError(f"injected failure at {key}")
        payload["calls"].append(key)
        output.save(key, {"value": 10 * part["K"]})


def test_groups_save_parts_as_they_go_and_resume_with_the_missing_ones(tmp_path):
    groups = [{"key": f"m{m}", "parts": [{"key": f"m{m}__K{K}", "K": K} for K in (2, 3, 4)]} for m in (0, 1)]
    payload = {"fail": {"m0__K3"}, "calls": []}
    records, errors = run_task_groups(groups, _saving, payload, tmp_path, "d", quiet=True)
    assert payload["calls"] == ["m0__K2", "m1__K2", "m1__K3", "m1__K4"]
    assert [r["value"] for r in records] == [20, 20, 30, 40]
    # one line per unsaved part of the failed group, naming the part
    assert errors == [
        "m0__K3: RuntimeError: injected failure at m0__K3",
        "m0__K4: RuntimeError: injected failure at m0__K3",
    ]
    payload = {"fail": set(), "calls": []}
    records, errors = run_task_groups(groups, _saving, payload, tmp_path, "d", quiet=True)
    assert not errors and payload["calls"] == ["m0__K3", "m0__K4"]
    assert [r["resumed"] for r in records] == [True, False, False, True, True, True]
    # a part whose identifying field changed is computed again; so is one of another hash
    groups[1]["parts"][2]["path_states"] = [2, 3, 4]
    payload["calls"].clear()
    run_task_groups(groups, _saving, payload, tmp_path, "d", quiet=True)
    assert payload["calls"] == ["m1__K4"]
    payload["calls"].clear()
    run_task_groups(groups, _saving, payload, tmp_path, "other", quiet=True)
    assert len(payload["calls"]) == 6


_DYING = """
import os


def dying(group, payload, output):
    # saves its first part, then kills its worker the first time (a marker file says so)
    for part in group["parts"]:
        if part["key"] not in output.todo:
            continue
        if part["K"] == 3 and group["key"] == "m0" and not os.path.exists(payload):
            open(payload, "w").close()
            os._exit(7)
        output.save(part["key"], {"pid": os.getpid()})
"""


def test_a_group_whose_worker_dies_keeps_its_saved_parts(tmp_path, monkeypatch):
    (tmp_path / "dying_group_module.py").write_text(_DYING)
    monkeypatch.syspath_prepend(str(tmp_path))
    dying = __import__("dying_group_module").dying
    groups = [{"key": f"m{m}", "parts": [{"key": f"m{m}__K{K}", "K": K} for K in (2, 3)]} for m in (0, 1)]
    marker = str(tmp_path / "died")
    records, errors = run_task_groups(groups, dying, marker, tmp_path / "out", "d", jobs=2, quiet=True)
    assert not errors and [r["K"] for r in records] == [2, 3, 2, 3]
    # the part saved before the worker died is kept; the rest ran in a fresh worker
    pids = {r["K"]: r["pid"] for r in records[:2]}
    assert pids[2] != pids[3]


# ------------------------------------------------------------------------ plans and budget
def test_plans_pair_ff_with_pf_and_keep_the_baselines_on_their_own():
    plans = fit_plans(["LDHMM-FF", "LDHMM-PF", "HMM", "LDA", "VBHMM", "HMMV"])
    assert plans[0] == FitPlan("LDHMM-PF", LDHMM_ALONG_K, True, ("LDHMM-FF",))
    assert plans[1:] == [FitPlan(m) for m in ("HMM", "LDA", "VBHMM", "HMMV")]
    # FF alone still starts from a PF fit, made in its task but not reported
    assert fit_plans(["LDHMM-FF"]) == [FitPlan("LDHMM-PF", LDHMM_ALONG_K, False, ("LDHMM-FF",))]
    # VBHMM and HMMV are VariantHMM subclasses: never fitted along K, whatever they inherit
    assert not along_k.fits_along_k("VBHMM") and not along_k.fits_along_k("HMMV")
    assert along_k.starts_from("LDHMM-PF") is None and along_k.starts_from("HMM") is None
    # the task unit: one task per (plan, fold), one part per (model, K)
    groups = compare_groups(plans[:2], [2, 3], 2)
    assert [g["key"] for g in groups] == [
        "LDHMM-PF+LDHMM-FF__fold0",
        "LDHMM-PF+LDHMM-FF__fold1",
        "HMM__fold0",
        "HMM__fold1",
    ]
    assert [p["key"] for p in groups[1]["parts"]] == [
        "LDHMM-PF__K2__fold1",
        "LDHMM-PF__K3__fold1",
        "LDHMM-FF__K2__fold1",
        "LDHMM-FF__K3__fold1",
    ]


# ------------------------------------------------------------------------ FF from PF
def test_ff_rows_are_the_ff_fit_from_the_same_folds_pf_fit(tmp_path):
    res = ldhmm.compare(["LDHMM-FF"], "synthetic", states=[2, 3], out=tmp_path / "o", is_samples=2, **SMALL)
    assert res.ok and set(res.folds["model"]) == {"LDHMM-FF"} and len(res.folds) == 4
    budget = res.config["budget"]
    assert budget["LDHMM-FF"]["fit"] == "from LDHMM-PF" and "LDHMM-PF" not in budget
    db = synthetic_database(30, seed=0)
    folds = kfold_indices(len(db), 2, seed=0)
    options = dict(n_symbols=db.n_symbols, seed=0, max_iter=2, n_init=1)
    saved = sorted((tmp_path / "o" / "models").glob("LDHMM-PF__K*__fold*.json"))
    assert len(saved) == 4  # the PF fits it started from, kept to resume from
    for row in res.folds.itertuples():
        tr, te = folds[row.fold]
        train, test = db.subset(tr).sequences, db.subset(te).sequences
        (path,) = [p for p in saved if p.name.startswith(f"LDHMM-PF__K{row.K}__fold{row.fold}.")]
        pf = LDHMM.load(path)
        ff = LDHMM(row.K, guide="ff", **options).fit(train, init_params=pf.params_)
        assert ff.score(test) == row.heldout_elbo and ff.n_iter_ == row.n_iter
        is_total = ff.log_marginal_is(test, n_samples=2, seed=1000 * row.fold + row.K).sum()
        assert float(is_total) == row.heldout_is
        if not LDHMM_ALONG_K:
            # with PF fitted on its own this is exactly the FF fit of today's direct call
            direct = LDHMM(row.K, guide="ff", **options).fit(train)
            assert direct.score(test) == row.heldout_elbo


# ------------------------------------------------------------------------ path mode
class PathLDHMM(LDHMM):
    """A stand-in with ``fit_path``: each K fitted with a seed drawn from the K - 1 fit's
    parameters; records its calls and fails after ``fail_after`` when set."""

    calls: list = []
    fail_after = None

    @classmethod
    def fit_path(cls, sequences, states, *, previous=None, callback=None, **options):
        cls.calls.append((list(states), None if previous is None else previous.n_states))
        fitted, prev = {}, previous
        for K in states:
            seed = options["seed"]
            if prev is not None:
                assert prev.n_states == K - 1
                prior = np.concatenate(
                    [prev.params_.prior[g].numpy().ravel() for g in sorted(prev.params_.prior)]
                )
                seed += hashlib.sha256(prior.tobytes()).digest()[0]
            fitted[K] = prev = cls(K, **{**options, "seed": seed}).fit(sequences)
            if callback is not None:
                callback(K, prev)
            if cls.fail_after == K:
                raise RuntimeError(f"injected failure after K = {K}")
        return fitted


@pytest.fixture()
def path_models():
    register(PathLDHMM, name="PATH-PF", options={"guide": "pf"}, em_settings=EM_SETTINGS)
    register(PathLDHMM, name="PATH-FF", options={"guide": "ff"}, em_settings=EM_SETTINGS)
    PathLDHMM.calls, PathLDHMM.fail_after = [], None
    yield ["PATH-FF", "PATH-PF"]
    unregister("PATH-PF")
    unregister("PATH-FF")


def test_a_model_with_fit_path_is_fitted_along_k_and_resumes_at_k(tmp_path, path_models):
    states = [2, 3, 4]
    ref = ldhmm.compare(path_models, "synthetic", states=states, out=tmp_path / "ref", is_samples=2, **SMALL)
    assert ref.ok and len(ref.folds) == 2 * 3 * 2
    assert PathLDHMM.calls == [([2, 3, 4], None)] * 2  # one path per fold
    budget = ref.config["budget"]
    assert budget["PATH-PF"]["fit"] == "along K" and "PathLDHMM.fit_path" in budget["PATH-PF"]["rule"]
    assert budget["PATH-FF"]["fit"] == "from PATH-PF"
    record = json.loads((tmp_path / "ref" / "tasks" / "PATH-FF__K3__fold1.json").read_text())
    assert record["path_states"] == [2, 3]
    # the FF row is the FF fit from the same fold's PF fit of that K
    db = synthetic_database(30, seed=0)
    tr, te = kfold_indices(len(db), 2, seed=0)[1]
    train, test = db.subset(tr).sequences, db.subset(te).sequences
    path = PathLDHMM.fit_path(train, states, n_symbols=db.n_symbols, seed=0, max_iter=2, n_init=1, guide="pf")
    rows = ref.folds.set_index(["model", "K", "fold"])
    for K in states:
        assert path[K].score(test) == rows.loc[("PATH-PF", K, 1), "heldout_elbo"]
        ff = PathLDHMM(K, n_symbols=db.n_symbols, seed=0, max_iter=2, n_init=1, guide="ff")
        ff.fit(train, init_params=path[K].params_)
        assert ff.score(test) == rows.loc[("PATH-FF", K, 1), "heldout_elbo"]

    # interrupted after K = 3 (an injected failure), then resumed: the path goes on at K = 4
    # from the saved K = 3 fit, and every number equals the uninterrupted run's
    out = tmp_path / "run"
    PathLDHMM.calls, PathLDHMM.fail_after = [], 3
    first = ldhmm.compare(path_models, "synthetic", states=states, out=out, is_samples=2, **SMALL)
    assert len(first.errors) == 2 * 2 and all("injected failure after K = 3" in e for e in first.errors)
    assert sorted(first.folds["K"].unique()) == [2, 3]
    PathLDHMM.calls, PathLDHMM.fail_after = [], None
    resumed = ldhmm.compare(path_models, "synthetic", states=states, out=out, is_samples=2, **SMALL)
    assert resumed.ok and resumed.config["resumed_tasks"] == 2 * 2 * 2
    assert PathLDHMM.calls == [([4], 3)] * 2
    pd.testing.assert_frame_equal(_scores(resumed.folds), _scores(ref.folds), check_exact=True)
    assert (out / "ttests.csv").read_text() == (tmp_path / "ref" / "ttests.csv").read_text()

    # an FF row lost alone is fitted from the saved PF fit: no path at all
    (out / "tasks" / "PATH-FF__K3__fold0.json").unlink()
    PathLDHMM.calls = []
    again = ldhmm.compare(path_models, "synthetic", states=states, out=out, is_samples=2, **SMALL)
    assert PathLDHMM.calls == []
    pd.testing.assert_frame_equal(_scores(again.folds), _scores(ref.folds), check_exact=True)

    # a PF row lost with its saved fit: the path restarts from its first K (no K - 1 fit to
    # grow from), and the rows already saved are kept
    (out / "tasks" / "PATH-PF__K2__fold0.json").unlink()
    for p in (out / "models").glob("PATH-PF__K2__fold0.*.json"):
        p.unlink()
    PathLDHMM.calls = []
    again = ldhmm.compare(path_models, "synthetic", states=states, out=out, is_samples=2, **SMALL)
    assert PathLDHMM.calls == [([2], None)]
    pd.testing.assert_frame_equal(_scores(again.folds), _scores(ref.folds), check_exact=True)

    # K values that start elsewhere make other paths: their rows are recomputed, not mixed
    PathLDHMM.calls = []
    other = ldhmm.compare(path_models, "synthetic", states=[3, 4], out=out, is_samples=2, **SMALL)
    assert other.ok and PathLDHMM.calls == [([3, 4], None)] * 2


def test_ldhmm_tasks_stopped_after_a_k_resume_to_the_uninterrupted_numbers(tmp_path, monkeypatch):
    models, states = ["LDHMM-FF", "LDHMM-PF", "HMM"], [2, 3]
    ref = ldhmm.compare(models, "synthetic", states=states, out=tmp_path / "ref", is_samples=2, **SMALL)
    real = along_k.Fitter.derive

    def failing(self, name, K, base):
        if K == 3:
            raise RuntimeError("injected failure at K = 3")
        return real(self, name, K, base)

    monkeypatch.setattr(along_k.Fitter, "derive", failing)
    out = tmp_path / "run"
    first = ldhmm.compare(models, "synthetic", states=states, out=out, is_samples=2, **SMALL)
    # the LDHMM task of each fold saved K = 2 (both rows) and PF at K = 3, then failed
    assert sorted(e.split(":")[0] for e in first.errors) == ["LDHMM-FF__K3__fold0", "LDHMM-FF__K3__fold1"]
    assert len(first.folds) == len(ref.folds) - 2
    monkeypatch.setattr(along_k.Fitter, "derive", real)
    fits = []
    real_one = along_k.Fitter.one
    monkeypatch.setattr(along_k.Fitter, "one", lambda self, m, K: fits.append((m, K)) or real_one(self, m, K))
    resumed = ldhmm.compare(models, "synthetic", states=states, out=out, is_samples=2, **SMALL)
    assert resumed.ok and fits == []  # the FF rows of K = 3 start from the saved PF fits
    pd.testing.assert_frame_equal(_scores(resumed.folds), _scores(ref.folds), check_exact=True)


def test_a_path_stopped_while_growing_resumes_from_the_saved_fit_and_its_state(tmp_path, monkeypatch):
    models, states = ["LDHMM-PF"], [2, 3, 4]
    ref = ldhmm.compare(models, "synthetic", states=states, out=tmp_path / "ref", is_samples=2, **SMALL)
    assert not list((tmp_path / "ref").rglob("*.state.npz"))  # a finished path keeps no state

    def interrupt(*args):
        raise RuntimeError("injected failure while growing K = 3")

    out = tmp_path / "run"
    with monkeypatch.context() as m:
        m.setattr(fit_starts, "continue_grown", interrupt)
        first = ldhmm.compare(models, "synthetic", states=states, out=out, is_samples=2, **SMALL)
    assert not first.ok and len(first.folds) == 2  # K = 2 of each fold
    kept = sorted(out.rglob("*.state.npz"))
    assert len(kept) == 2  # each fold's K = 2 state, beside its model file
    resumed = ldhmm.compare(models, "synthetic", states=states, out=out, is_samples=2, **SMALL)
    assert resumed.ok
    pd.testing.assert_frame_equal(_scores(resumed.folds), _scores(ref.folds), check_exact=True)
    assert not list(out.rglob("*.state.npz"))


def test_a_path_stopped_between_a_ks_fit_and_its_rows_resumes_from_the_k_before(tmp_path, monkeypatch):
    # the window of a kill that a CI run once hit: K = 3's model file written, its rows not yet;
    # the resumed task refits K = 3 from K = 2, whose per-sequence state must still be there
    models, states = ["LDHMM-PF"], [2, 3, 4]
    ref = ldhmm.compare(models, "synthetic", states=states, out=tmp_path / "ref", is_samples=2, **SMALL)
    real = along_k.FitStore.save

    def saved_then_stopped(self, K, model):
        real(self, K, model)
        if K == 3:
            raise RuntimeError("injected stop after K = 3's fit is saved")

    out = tmp_path / "run"
    with monkeypatch.context() as m:
        m.setattr(along_k.FitStore, "save", saved_then_stopped)
        first = ldhmm.compare(models, "synthetic", states=states, out=out, is_samples=2, **SMALL)
    assert not first.ok and len(first.folds) == 2  # K = 2 of each fold
    assert len(list(out.rglob("*.state.npz"))) == 4  # K = 2's state kept beside K = 3's, per fold
    resumed = ldhmm.compare(models, "synthetic", states=states, out=out, is_samples=2, **SMALL)
    assert resumed.ok
    pd.testing.assert_frame_equal(_scores(resumed.folds), _scores(ref.folds), check_exact=True)
    assert not list(out.rglob("*.state.npz"))


def test_a_row_lost_after_its_k_before_released_its_state_refits_the_path(tmp_path):
    # a cluster's driver killed while it writes one group's rows (the worker had already released
    # K = 2's state once K = 3's rows were made): K = 2's row saved, K = 3's not, no state file.
    # Grown from K = 2's fit without its state, K = 3 of fold 1 ended 8.6 nats below the
    # uninterrupted row (a CI run hit it); the path is refitted from its first K instead.
    db = synthetic_database(40, seed=0)
    data = tmp_path / "sequences.txt"
    data.write_text("".join(" ".join(db.vocabulary[v] for v in s) + "\n" for s in db.sequences))
    run = dict(states=[2, 3], folds=3, max_iter=3, restarts=1, is_samples=3, quiet=True, jobs=1)
    ref = ldhmm.compare(["LDHMM-PF"], data, out=tmp_path / "ref", **run)
    assert not list((tmp_path / "ref").rglob("*.state.npz"))  # released, and the last K keeps none
    out = tmp_path / "run"
    shutil.copytree(tmp_path / "ref", out)
    for fold in range(3):
        (out / "tasks" / f"LDHMM-PF__K3__fold{fold}.json").unlink()
    resumed = ldhmm.compare(["LDHMM-PF"], data, out=out, **run)
    assert resumed.ok
    pd.testing.assert_frame_equal(_scores(resumed.folds), _scores(ref.folds), check_exact=True)


def test_only_ldhmms_own_fit_path_keeps_the_state_a_resumed_path_needs(path_models):
    assert keeps_path_state(LDHMM)
    # a fit_path of its own keeps none: its saved fits are grown from as they are
    assert not keeps_path_state(PathLDHMM) and not keeps_path_state(ContextualLDHMM)
