"""``effort`` from the command line and the comparison harness to the LDHMM-family models.

``ldhmm fit --effort`` (one K and along K) writes it into the model files; the experiment
commands and ``compare``/``classify``/``next_event`` check it before anything is written, pass
it to the entries whose class takes ``effort`` (LDHMM-PF, LDHMM-FF, VBHMM, HMMV) and to a
factory that names it, never to the others, pass nothing where it is None (the class default
holds), and record it in ``config.json`` and the summary.
"""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

import ldhmm
from ldhmm.cli import main
from ldhmm.experiments.classify import classify
from ldhmm.experiments.lineup import constructor_options, make_model, model_from_settings, takes_effort
from ldhmm.experiments.next_event import next_event
from ldhmm.experiments.plugins import ModelEntry, build_model
from ldhmm.modelfiles import load_model
from ldhmm.models import LDHMM
from ldhmm.models.fit_settings import EFFORTS
from ldhmm.models.registry import get_spec

FAMILY = ("LDHMM-PF", "LDHMM-FF", "VBHMM", "HMMV")
OTHERS = ("HMM", "LDA", "MARKOV1", "MARKOV3")
TINY = dict(states=[2], folds=2, n_sequences=24, max_iter=2, quiet=True, seed=0)
ONE_LINE = r"^effort must be None or one of 'quick', 'standard', 'thorough', got 'bogus'$"

#: the effort each call of :func:`records_effort` got (the factory runs in this process: jobs=1)
SEEN: list = []


def records_effort(n_states, n_symbols, seed, effort="unset"):
    """A plug-in factory that names ``effort``: it gets the run's, where the run sets one."""
    SEEN.append(effort)
    kwargs = {} if effort == "unset" else {"effort": effort}
    return LDHMM(n_states, n_symbols=n_symbols, seed=seed, n_init=1, max_iter=2, **kwargs)


def no_effort(n_states, n_symbols, seed):
    """A plug-in factory that does not name ``effort``: called without it."""
    return LDHMM(n_states, n_symbols=n_symbols, seed=seed, n_init=1, max_iter=2)


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    rng = np.random.default_rng(0)
    words = ["home", "news", "sport", "tech"]
    lines = [" ".join(words[i] for i in rng.integers(0, 4, int(rng.integers(3, 9)))) for _ in range(30)]
    path = tmp_path_factory.mktemp("log") / "train.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def fit_argv(log, out, *more):
    argv = ["fit", log, "--states", "2", "--restarts", "1", "--max-iter", "2", "--quiet", "--out", out]
    return [str(a) for a in (*argv, *more)]


# ---- ldhmm fit ---------------------------------------------------------------------------------
def test_fit_writes_the_effort_into_the_model_file(log, tmp_path):
    assert main(fit_argv(log, tmp_path / "t.json", "--effort", "thorough")) == 0
    assert json.loads((tmp_path / "t.json").read_text())["config"]["effort"] == "thorough"
    assert load_model(tmp_path / "t.json").effort == "thorough"
    assert main(fit_argv(log, tmp_path / "d.json")) == 0  # not given: the model's default
    assert load_model(tmp_path / "d.json").effort == LDHMM(2).effort == "standard"


def test_fit_along_k_writes_and_checks_the_effort(log, tmp_path, capsys):
    out = tmp_path / "path"
    argv = fit_argv(log, out, "--effort", "quick")
    argv[argv.index("2")] = "2..3"
    assert main(argv) == 0
    assert [load_model(out / f"K{K}.json").effort for K in (2, 3)] == ["quick", "quick"]
    assert json.loads((out / "path.json").read_text())["effort"] == "quick"
    capsys.readouterr()
    argv[argv.index("quick")] = "thorough"  # another effort in the same --out is refused
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "effort 'quick' there, 'thorough' here" in err[0]


@pytest.mark.parametrize("command", ["fit", "compare", "classify", "next-event"])
def test_a_bad_effort_is_a_one_line_argparse_error(command, log, tmp_path, capsys):
    argv = fit_argv(log, tmp_path / "m.json") if command == "fit" else [command, "--out", str(tmp_path / "o")]
    assert main([*argv, "--effort", "bogus"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"ldhmm {command}: error: argument --effort: invalid choice")
    assert not (tmp_path / "m.json").exists() and not (tmp_path / "o").exists()


def test_the_command_choices_are_the_settings():
    from ldhmm.cli.options import SHARED_OPTIONS

    assert tuple(SHARED_OPTIONS["--effort"]["choices"]) == EFFORTS
    assert SHARED_OPTIONS["--effort"]["default"] is None


# ---- the harness -------------------------------------------------------------------------------
def test_the_ldhmm_family_takes_effort_and_the_others_do_not():
    assert [takes_effort(n) for n in FAMILY] == [True] * len(FAMILY)
    assert [takes_effort(n) for n in OTHERS] == [False] * len(OTHERS)


@pytest.mark.parametrize("name", FAMILY)
def test_the_harness_passes_effort_to_the_ldhmm_family(name):
    assert make_model(name, 2, 5, effort="thorough").effort == "thorough"
    assert model_from_settings(name, 2, 5, {"seed": 0, "effort": "quick"}).effort == "quick"
    assert build_model(ModelEntry(name), 2, 5, {"seed": 0, "effort": "quick"}).effort == "quick"
    # None (or a run recorded before the setting): nothing passed, the class default holds
    assert "effort" not in constructor_options(name, 5, effort=None)
    default = inspect.signature(get_spec(name).cls).parameters["effort"].default
    assert make_model(name, 2, 5, effort=None).effort == default
    assert model_from_settings(name, 2, 5, {"seed": 0}).effort == default


@pytest.mark.parametrize("name", OTHERS)
def test_the_harness_passes_no_effort_to_the_others(name):
    assert "effort" not in constructor_options(name, 5, effort="thorough")
    assert "effort" not in constructor_options(name, 5, max_iter=3, tol=1e-3, n_init=2, effort="quick")


def test_a_factory_gets_the_effort_when_it_names_it():
    SEEN.clear()
    assert build_model(
        ModelEntry("mine", records_effort, "t"), 2, 5, {"seed": 0, "effort": "thorough"}
    ).effort == ("thorough")
    build_model(ModelEntry("mine", records_effort, "t"), 2, 5, {"seed": 0, "effort": None})
    build_model(ModelEntry("mine", records_effort, "t"), 2, 5, {"seed": 0})
    assert SEEN == ["thorough", "unset", "unset"]
    assert build_model(ModelEntry("plain", no_effort, "t"), 2, 5, {"seed": 0, "effort": "quick"}).effort == (
        "standard"
    )


# ---- the API -----------------------------------------------------------------------------------
@pytest.mark.parametrize("run", [ldhmm.compare, classify, next_event])
def test_a_bad_effort_is_refused_before_the_out_dir(run, tmp_path):
    with pytest.raises(ValueError, match=ONE_LINE):
        run("LDHMM-PF", "synthetic", out=tmp_path / "o", effort="bogus", **TINY)
    with pytest.raises(ValueError, match=r"^effort must be None or one of .*, got 3$"):
        run("LDHMM-PF", "synthetic", out=tmp_path / "o", effort=3, **TINY)
    assert not (tmp_path / "o").exists()


def test_compare_passes_records_and_names_the_effort(tmp_path):
    SEEN.clear()
    res = ldhmm.compare(
        {"mine": records_effort, "HMM": None},
        "synthetic",
        out=tmp_path / "o",
        effort="quick",
        is_samples=0,
        **TINY,
    )
    assert res.ok and SEEN and set(SEEN) == {"quick"}
    config = json.loads((tmp_path / "o" / "config.json").read_text())
    assert config["settings"]["effort"] == res.config["settings"]["effort"] == "quick"
    assert "M-step collapsed, effort quick," in res.summary
    SEEN.clear()
    res = ldhmm.compare({"mine": records_effort}, "synthetic", out=tmp_path / "d", is_samples=0, **TINY)
    assert res.ok and set(SEEN) == {"unset"} and res.config["settings"]["effort"] is None
    assert "effort: each model's default" in res.summary


def test_the_experiment_commands_record_the_effort(tmp_path, capsys):
    tiny = ["--n-sequences", "24", "--states", "2", "--folds", "2", "--max-iter", "2", "--quiet"]
    argv = ["compare", "--dataset", "synthetic", *tiny, "--models", "HMM", "--is-samples", "0"]
    assert main([*argv, "--effort", "thorough", "--out", str(tmp_path / "c")]) == 0
    assert json.loads((tmp_path / "c" / "config.json").read_text())["settings"]["effort"] == "thorough"
    argv = ["next-event", "--dataset", "synthetic", *tiny, "--models", "MARKOV1", "--restarts", "1"]
    assert main([*argv, "--effort", "quick", "--out", str(tmp_path / "n")]) == 0
    assert json.loads((tmp_path / "n" / "config.json").read_text())["settings"]["effort"] == "quick"
    assert "effort quick" in (tmp_path / "n" / "summary.md").read_text()
    argv = ["classify", "--dataset", "synthetic", *tiny, "--models", "MARKOV1", "--restarts", "1"]
    assert main([*argv, "--effort", "standard", "--out", str(tmp_path / "k")]) == 0
    assert json.loads((tmp_path / "k" / "config.json").read_text())["settings"]["effort"] == "standard"
    assert "M-step collapsed, effort standard." in (tmp_path / "k" / "summary.md").read_text()
    capsys.readouterr()
