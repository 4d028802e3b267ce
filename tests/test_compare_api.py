"""The comparison API (``ldhmm.compare`` / ``ldhmm.classify``), plug-in models and the thin CLI."""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import textwrap
import urllib.error
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import ldhmm
from ldhmm.cli import common, main
from ldhmm.experiments import plugins
from ldhmm.experiments.datasets import synthetic_database
from ldhmm.experiments.plugins import PluginError, resolve_lineup
from ldhmm.models import LDHMM

TINY = dict(states=[2], folds=2, n_sequences=24, max_iter=2, quiet=True, seed=0)
TINY_ARGS = ["--n-sequences", "24", "--states", "2", "--folds", "2", "--max-iter", "2", "--quiet"]

PLUGIN_SOURCE = textwrap.dedent(
    """
    import numpy as np
    from ldhmm.models import LDHMM

    def good(n_states, n_symbols, seed):
        return LDHMM(n_states, n_symbols=n_symbols, seed=seed, max_iter=2, n_init=1)

    def raises(n_states, n_symbols, seed):
        raise RuntimeError("boom in the factory")

    class NaNModel:
        score_kind = "exact"
        def fit(self, sequences):
            return self
        def score_samples(self, sequences):
            return np.full(len(sequences), np.nan)

    def nan(n_states, n_symbols, seed):
        return NaNModel()

    class PositiveModel(NaNModel):
        def score_samples(self, sequences):
            return np.full(len(sequences), 1e6)

    def positive(n_states, n_symbols, seed):
        return PositiveModel()

    class NoScore:
        score_kind = "exact"
        def fit(self, sequences):
            return self

    def noscore(n_states, n_symbols, seed):
        return NoScore()
    """
)


@pytest.fixture()
def plugin_module(tmp_path, monkeypatch):
    (tmp_path / "ldhmm_test_plugin.py").write_text(PLUGIN_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "ldhmm_test_plugin"


def run_cli(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_and_api_give_identical_numbers(tmp_path, capsys):
    code, out, _ = run_cli(
        ["compare", "--dataset", "synthetic", *TINY_ARGS, "--models", "LDHMM-PF", "HMM",
         "--is-samples", "3", "--out", str(tmp_path / "cli")],
        capsys,
    )  # fmt: skip
    assert code == 0
    # the terminal shows one table, the files and the verdict (with its test), not the t-test table
    assert len(out.strip().splitlines()) < 20 and "model_a" not in out and "paired t-test over 2 folds" in out
    res = ldhmm.compare(["LDHMM-PF", "HMM"], "synthetic", out=tmp_path / "api", is_samples=3, **TINY)
    assert res.ok
    cli = pd.read_csv(tmp_path / "cli" / "folds.csv")
    api = pd.read_csv(tmp_path / "api" / "folds.csv")
    pd.testing.assert_frame_equal(
        cli[["model", "K", "fold", "score_kind", "heldout_elbo", "heldout_is", "n_iter"]],
        api[["model", "K", "fold", "score_kind", "heldout_elbo", "heldout_is", "n_iter"]],
        check_exact=True,
    )
    assert res.folds["heldout_elbo"].tolist() == cli["heldout_elbo"].tolist()
    assert (
        res.config["config_hash"] == json.loads((tmp_path / "cli" / "config.json").read_text())["config_hash"]
    )
    table = res.table()
    assert list(table.index) == ["LDHMM-PF", "HMM"] and list(table.columns) == ["score", 2]
    assert list(table["score"]) == ["lower bound (PF family)", "exact log-lik"]
    assert (tmp_path / "api" / "summary.md").read_text() == res.summary
    assert res.plot.is_file()


def test_api_takes_databases_and_integer_sequences(tmp_path):
    db = synthetic_database(24, seed=0)
    a = ldhmm.compare("HMM", db, out=tmp_path / "a", is_samples=0, **{**TINY, "n_sequences": None})
    b = ldhmm.compare(
        ["HMM"], db.sequences, out=tmp_path / "b", is_samples=0, **{**TINY, "n_sequences": None}
    )
    assert a.folds["heldout_elbo"].tolist() == b.folds["heldout_elbo"].tolist()
    with pytest.raises(ValueError, match="2199023255552"):
        ldhmm.compare("HMM", [np.array([0, 1, 2**41])], out=tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_plugin_factory_beside_builtins(tmp_path, plugin_module):
    good = importlib.import_module("ldhmm_test_plugin").good
    res = ldhmm.compare({"mine": good, "HMM": None}, "synthetic", out=tmp_path / "o", is_samples=3, **TINY)
    assert res.ok and set(res.folds["model"]) == {"mine", "HMM"}
    mine = res.folds[res.folds["model"] == "mine"]
    assert (mine["score_kind"] == "lower_bound").all() and np.isfinite(mine["heldout_is"]).all()
    assert res.config["settings"]["plugins"] == {"mine": "ldhmm_test_plugin:good"}
    # the plug-in is t-tested against the other models
    assert "mine" in set(res.ttests["model_a"])
    # the same factory as a string gives the same numbers
    res2 = ldhmm.compare(
        {"mine": "ldhmm_test_plugin:good", "HMM": None},
        "synthetic",
        out=tmp_path / "o2",
        is_samples=3,
        **TINY,
    )
    assert res2.folds["heldout_elbo"].tolist() == res.folds["heldout_elbo"].tolist()


def test_failing_plugins_fail_only_their_tasks(tmp_path, plugin_module, capsys):
    argv = ["compare", "--dataset", "synthetic", *TINY_ARGS, "--models", "HMM", "--is-samples", "0"]
    for name in ("raises", "nan", "noscore", "positive"):
        argv += ["--model", f"{name}={plugin_module}:{name}"]
    code, out, err = run_cli(argv + ["--out", str(tmp_path / "o")], capsys)
    assert code == 1
    df = pd.read_csv(tmp_path / "o" / "folds.csv")
    assert set(df["model"]) == {"HMM"} and np.isfinite(df["heldout_elbo"]).all()
    summary = (tmp_path / "o" / "summary.md").read_text()
    assert "## Failed tasks" in summary
    for reason in ("boom in the factory", "non-finite", "no score_samples", "values above 0 nats"):
        assert reason in summary, reason
    # a plug-in scoring +1e6 nats per sequence fails its tasks: it is never named the best model
    assert "positive" not in summary.split("## Failed tasks")[0]
    assert "raises: 2 task(s) failed" in err


def test_bad_plugin_strings_are_one_line_errors(tmp_path, capsys, plugin_module):
    for spec, needle in [
        ("x=no_such_module_xyz:f", "cannot import"),
        ("x=ldhmm_test_plugin:missing", "no attribute"),
        ("x=ldhmm_test_plugin", "package.module:factory"),
        ("justaname", "NAME=package.module:factory"),
        ("HMM=ldhmm_test_plugin:good", "built-in"),
    ]:
        out = tmp_path / "never"
        code, _, err = run_cli(
            ["compare", "--dataset", "synthetic", *TINY_ARGS, "--model", spec, "--out", str(out)], capsys
        )
        assert code == 1, spec
        assert len(err.strip().splitlines()) == 1 and needle in err, (spec, err)
        assert not out.exists()


def test_unpicklable_factory_with_jobs2_is_refused(tmp_path):
    with pytest.raises(PluginError, match="worker processes"):
        ldhmm.compare({"l": lambda K, V, s: None}, "synthetic", jobs=2, out=tmp_path / "o", **TINY)
    assert not (tmp_path / "o").exists()


def test_entry_point_plugins_join_all(tmp_path, monkeypatch, plugin_module):
    dist = tmp_path / "ldhmm_test_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ldhmm-test-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[ldhmm.models]\nEP-Model = ldhmm_test_plugin:good\n")
    names = [e.name for e in resolve_lineup("all")]
    assert "EP-Model" in names and "LDHMM-PF" in names
    assert "EP-Model" not in [e.name for e in resolve_lineup(["HMM"])]


def test_classify_api_matches_cli(tmp_path, capsys):
    code, out, _ = run_cli(
        [
            "classify",
            "--dataset",
            "synthetic",
            *TINY_ARGS,
            "--models",
            "HMM",
            "LDHMM-PF",
            "--out",
            str(tmp_path / "cli"),
        ],
        capsys,
    )
    assert code == 0 and "| task | K |" in out
    res = ldhmm.classify(["HMM", "LDHMM-PF"], "synthetic", out=tmp_path / "api", **TINY)
    cli = pd.read_csv(tmp_path / "cli" / "folds.csv")
    assert res.folds["auc"].tolist() == cli["auc"].tolist()
    assert set(res.folds["model"]) == {"HMM", "LDHMM-PF", "LDHMM-PF+LR"}
    assert res.table().shape[0] == 1


def test_worked_example_script_runs(tmp_path, capsys):
    path = Path(__file__).resolve().parents[1] / "examples" / "compare_variant.py"
    spec = importlib.util.spec_from_file_location("compare_variant_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    res = module.main(
        ["--data", "synthetic", "--n-sequences", "30", "--states", "2", "--folds", "2", "--restarts", "1",
         "--max-iter", "3", "--out", str(tmp_path / "o")]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert res.ok and set(res.folds["model"]) == {"shared-B", "LDHMM-PF", "HMM"}
    assert "shared-B" in out and "beats LDHMM-PF" in out
    # the restart budget reached the plug-in through its n_init parameter
    assert res.config["settings"]["restarts"] == 1


def test_main_job_fetches_entree_when_missing(tmp_path, monkeypatch):
    monkeypatch.delenv("LDHMM_DATA", raising=False)
    monkeypatch.delenv(common.OFFLINE_ENV_VAR, raising=False)
    args = argparse.Namespace(file=None, dataset=None, data_dir=str(tmp_path / "d"), quiet=True)
    calls = []
    monkeypatch.setattr(common.urllib.request, "urlopen", lambda *a, **k: calls.append("probe"))
    monkeypatch.setattr(common, "fetch", lambda name, target, quiet: calls.append((name, str(target))))
    data, data_dir, note = common.default_data(args)
    assert data == "entree" and data_dir == str(tmp_path / "d") and "downloaded" in note
    assert calls == ["probe", ("entree", str(tmp_path / "d"))]

    def offline(*a, **k):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(common.urllib.request, "urlopen", offline)
    data, _, note = common.default_data(args)
    assert data is None and "ldhmm data fetch entree" in note and "Name or service" in note
    monkeypatch.setenv(common.OFFLINE_ENV_VAR, "1")
    calls.clear()
    data, _, note = common.default_data(args)
    assert data is None and calls == [] and common.OFFLINE_ENV_VAR in note


def _scaled_good(n_states, n_symbols, seed, scale=1.0):
    return LDHMM(n_states, n_symbols=n_symbols, seed=seed, max_iter=2, n_init=1, tol=1e-4 * scale)


def test_factory_identity_decides_resuming(tmp_path):
    a = functools.partial(_scaled_good, scale=1.0)
    b = functools.partial(_scaled_good, scale=5.0)
    ldhmm.compare({"p": a}, "synthetic", out=tmp_path / "o", is_samples=0, **TINY)
    with pytest.raises(ValueError, match="another configuration"):
        ldhmm.compare({"p": b}, "synthetic", out=tmp_path / "o", is_samples=0, **TINY)


@pytest.mark.parametrize(
    "name, body, jobs, error",
    [
        ("quits", "import sys\ndef make(n_states, n_symbols, seed):\n    sys.exit(3)\n", 1, "SystemExit"),
        # the plugin kills its worker process: only with --jobs 2 is there a worker to kill
        ("crashes", "import os\ndef make(n_states, n_symbols, seed):\n    os._exit(7)\n", 2, "WorkerDied"),
    ],
)
def test_a_plugin_that_exits_or_kills_its_worker_fails_only_its_tasks(
    name, body, jobs, error, tmp_path, plugin_module
):
    # tmp_path is on sys.path (the plugin_module fixture put it there); workers import it by name
    (tmp_path / f"ldhmm_{name}_plugin.py").write_text(body)
    importlib.invalidate_caches()
    res = ldhmm.compare(
        {"HMM": None, name: f"ldhmm_{name}_plugin:make"},
        "synthetic",
        out=tmp_path / "o",
        is_samples=0,
        jobs=jobs,
        **TINY,
    )
    assert set(res.folds["model"]) == {"HMM"} and len(res.folds) == 2
    assert len(res.errors) == 2 and all(error in e and e.startswith(f"{name}__") for e in res.errors)
    assert f"{name}: 2 task(s) failed" in res.summary


def test_broken_entry_points_fail_only_their_tasks(tmp_path, monkeypatch):
    monkeypatch.setattr(
        plugins, "entry_point_factories", lambda: {"thirdparty": "no_such_dep_xyz:make", "HMM": "x:y"}
    )
    with pytest.warns(UserWarning, match="HMM"):
        names = [e.name for e in resolve_lineup("all")]
    assert "thirdparty" in names and names.count("HMM") == 1


@pytest.mark.parametrize(
    "models, needle",
    [
        ({"../escape": "ldhmm_test_plugin:good"}, "model name"),
        ({"a__K2": "ldhmm_test_plugin:good"}, "model name"),
        ({"mine": "LDHMM-PF"}, "keeps its own name"),
        ({"mine": "NOSUCH"}, "neither 'module:factory' nor a built-in model"),
    ],
)
def test_bad_plugin_names_and_aliases(models, needle, plugin_module, tmp_path):
    with pytest.raises(PluginError, match=needle):
        ldhmm.compare(models, "synthetic", out=tmp_path / "o", **TINY)
    assert not (tmp_path / "o").exists()


def test_builtins_by_name_as_values_or_a_list():
    by_value = resolve_lineup({"HMM": "HMM", "ldhmm-pf": "LDHMM-PF"})
    assert [(e.name, e.builtin) for e in by_value] == [("LDHMM-PF", True), ("HMM", True)]
    assert [e.name for e in resolve_lineup({"HMM": None, "LDHMM-PF": None})] == ["LDHMM-PF", "HMM"]
    assert [e.name for e in resolve_lineup(["HMM", "LDHMM-PF"])] == ["LDHMM-PF", "HMM"]


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"restarts": 0}, None),
        ({"m_step": "bogus"}, None),
        ({"jobs": 0}, None),
        ({"tol": -1.0}, None),
        # the rule for more importance draws without what it acts on would change nothing
        ({"is_samples": 0, "is_min_ess": 3.0}, "is_min_ess needs is_samples > 0"),
        ({"is_samples": 4, "is_max_samples": 32}, "is_max_samples needs is_min_ess > 0"),
    ],
)
def test_bad_settings_are_refused_before_the_out_dir(setting, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        ldhmm.compare("HMM", "synthetic", out=tmp_path / "o", **{**TINY, **setting})
    assert not (tmp_path / "o").exists()


def test_scores_above_zero_nats_are_refused_by_name():
    assert plugins.check_scores([-3.0, 0.0, 1e-12], 3, "m").tolist() == [-3.0, 0.0, 1e-12]
    with pytest.raises(PluginError, match=r"model 'm': score_samples returned 1 values above 0 nats of 2"):
        plugins.check_scores([-3.0, 2.5], 2, "m")
