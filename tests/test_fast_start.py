"""What the ``ldhmm`` command loads before it works: ``ldhmm --help`` none of the heavy libraries,
``ldhmm score``/``posterior``/``predict``/``decode`` of an LDHMM none of the experiments and none
of the baselines' libraries (the command table imports only the command that runs, the model
registry only the module of the class a file names). Checked on ``sys.modules`` of fresh
interpreters, never on times."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from ldhmm import LDHMM
from ldhmm.cli.commands import COMMANDS

#: Loaded by no command's start: only by the commands that use them.
NOT_AT_START = (
    "torch",
    "pyro",
    "gensim",
    "hmmlearn",
    "matplotlib",
    "dask",
    "distributed",
    "pandas",
    "sklearn",
)
#: What the model commands on an LDHMM file do not load (they need torch, numba and pandas): none
#: of the baselines' libraries, and not Pyro (the guides' Pyro half and LDHMM's SVI route import
#: it on first use, :class:`ldhmm.data.lazy_modules.LazyModule`).
NOT_FOR_SCORE = (
    "pyro",
    "matplotlib",
    "dask",
    "distributed",
    "gensim",
    "hmmlearn",
    "sklearn",
    "ldhmm.baselines",
    "ldhmm.inference.svi",
    "ldhmm.models.pyro_model",
)


def loaded_after(*argvs) -> tuple[int, set[str]]:
    """The modules a fresh interpreter holds after ``ldhmm ARGV`` for each ARGV (run in process,
    one after the other; the sum of their exit codes)."""
    runs = "".join(f"    code += main({[str(a) for a in argv]!r})\n" for argv in argvs)
    code = (
        "import sys, contextlib, io\nfrom ldhmm.cli.main import main\ncode = 0\n"
        f"with contextlib.redirect_stdout(io.StringIO()):\n{runs}"
        "print(code)\nprint('\\n'.join(sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.split()
    return int(lines[0]), set(lines[1:])


def heavy(loaded, names) -> list[str]:
    return sorted(m for m in loaded if m.split(".")[0] in names or m.startswith(names))


def test_help_loads_no_heavy_library_and_lists_every_command():
    code, loaded = loaded_after(["--help"])
    assert code == 0 and not heavy(loaded, NOT_AT_START + ("ldhmm.experiments", "ldhmm.models"))
    assert not [
        m
        for m in loaded
        if m.startswith("ldhmm.cli.") and m.split(".")[2] in {v[0] for v in COMMANDS.values()}
    ]
    out = subprocess.run(
        [sys.executable, "-m", "ldhmm.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert all(
        f"    {name}" in out and help_line[:30] in " ".join(out.split())
        for name, (_, help_line) in COMMANDS.items()
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A saved LDHMM (K = 2, V = 3) and a small log of its symbols."""
    d = tmp_path_factory.mktemp("start")
    model = LDHMM.from_hyperparameters(
        [1.0, 2.0], [[5.0, 1.0], [1.0, 5.0]], [[4.0, 1.0, 1.0], [1.0, 1.0, 4.0]]
    )
    model.save(d / "model.json", vocabulary=["a", "b", "c"])
    rng = np.random.default_rng(0)
    (d / "log.txt").write_text("\n".join(" ".join(rng.choice(list("abc"), 6)) for _ in range(5)) + "\n")
    return d


def test_model_commands_load_no_experiment_and_no_baseline(tiny):
    model, log = tiny / "model.json", tiny / "log.txt"
    code, loaded = loaded_after(
        *(
            [command, model, log, "--quiet", "--out", tiny / f"{command}.csv"]
            for command in ("score", "posterior", "predict", "decode")
        )
    )
    assert code == 0 and all(
        (tiny / f"{c}.csv").is_file() for c in ("score", "posterior", "predict", "decode")
    )
    assert not heavy(loaded, NOT_FOR_SCORE)
    # nothing of the experiments (what a Ctrl-C says is ldhmm.data.resume)
    assert sorted(m for m in loaded if m.startswith("ldhmm.experiments")) == []
    assert "ldhmm.cli.score" in loaded and "ldhmm.cli.compare" not in loaded


def test_a_baseline_file_loads_its_own_module_only(tiny):
    """A model file names its class; only that class's module (and its library) is imported."""
    from ldhmm.baselines import VBHMM

    train = [np.array([0, 1, 2, 1]), np.array([2, 2, 0])]
    VBHMM(2, n_symbols=3, seed=0, max_iter=3).fit(train).save(tiny / "vb.json", vocabulary=["a", "b", "c"])
    code, loaded = loaded_after(
        ["score", tiny / "vb.json", tiny / "log.txt", "--quiet", "--out", tiny / "vb.csv"]
    )
    assert code == 0 and "ldhmm.baselines.vbhmm" in loaded
    assert not heavy(loaded, ("gensim", "hmmlearn", "sklearn", "ldhmm.baselines.hmm", "ldhmm.baselines.lda"))


def test_registry_knows_the_builtins_before_their_modules():
    """The table order without importing a baseline; a built-in name taken by another class is
    refused before the built-in's module is imported."""
    code = (
        "import sys\nfrom ldhmm.models.registry import registered_names, register, get_spec\n"
        "from ldhmm.models import SequenceModel\n"
        "names = registered_names()\n"
        "class HMM(SequenceModel):\n    name = 'HMM'\n    score_kind = 'exact'\n"
        "try:\n    register(HMM)\nexcept ValueError as err:\n    print('refused:', err)\n"
        "print(' '.join(names), 'hmmlearn' in sys.modules)\n"
        "print(get_spec('HMM').cls.__module__, 'hmmlearn' in sys.modules, 'gensim' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    refused, names, spec = out.splitlines()
    assert refused == "refused: harness name 'HMM' is taken by ldhmm.baselines.hmm.HMM"
    lineup = "LDHMM-FF LDHMM-PF HMM LDA VBHMM HMMV MARKOV1 MARKOV3"
    assert names == f"{lineup} LDHMM-PF-ctx1 LDHMM-PF-ctx3 LDHMM-FF-ctx1 HMM-ctx1 False"
    assert spec == "ldhmm.baselines.hmm True False"


def test_every_command_parses_through_the_table():
    from ldhmm.cli.main import build_parser

    parser = build_parser()  # every module registered: the names the table promises
    choices = parser._subparsers._group_actions[0].choices
    assert list(choices) == list(COMMANDS)
    assert all(choices[name].description for name in COMMANDS)  # a module's parser, not a placeholder


def test_the_report_and_a_fit_in_closed_form_load_no_pyro(tiny):
    """``ldhmm report`` and ``ldhmm fit`` (closed form) never run a Pyro guide or the SVI route."""
    code, loaded = loaded_after(
        ["report", tiny / "model.json", tiny / "log.txt", "--out", tiny / "report.html"],
        ["fit", tiny / "log.txt", "--states", "2", "--quiet", "--out", tiny / "fitted.json"],
    )
    assert code == 0 and (tiny / "report.html").is_file() and (tiny / "fitted.json").is_file()
    assert not heavy(loaded, ("pyro", "ldhmm.inference.svi", "ldhmm.models.pyro_model"))


def test_a_lazy_module_is_imported_on_first_use_only():
    code = (
        "import sys\nfrom ldhmm.data.lazy_modules import LazyModule\n"
        "lazy = LazyModule('.tool', 'json')\n"
        "print('json.tool' in sys.modules, repr(lazy))\n"
        "print(callable(lazy.main), 'json.tool' in sys.modules, lazy.module is sys.modules['json.tool'])\n"
        "try:\n    LazyModule('.tool')\nexcept ValueError as err:\n    print(err)\n"
        "import copy, pickle\nother = LazyModule('.minidom', 'xml.dom')\n"
        "twin = pickle.loads(pickle.dumps(copy.deepcopy(other)))\n"
        "print('xml.dom.minidom' in sys.modules, repr(twin), twin.Document.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [
        "False <LazyModule '.tool' (not imported yet)>",
        "True True True",
        "the relative module name '.tool' needs its package",
        "False <LazyModule '.minidom' (not imported yet)> Document",
    ]


def test_the_lazily_imported_names_are_the_modules_own():
    """The SVI route's names of ``ldhmm.inference`` and the Pyro model's of ``ldhmm.models``."""
    import ldhmm.inference as inference
    import ldhmm.models as models
    from ldhmm.inference.svi import svi_fit
    from ldhmm.models import pyro_model

    assert inference.fit_svi is svi_fit.fit_svi
    assert inference.guide_init_from_state is svi_fit.guide_init_from_state
    assert models.sample_database is pyro_model.sample_database
    assert models.ldhmm_model is pyro_model.ldhmm_model
    assert {"fit_svi", "SVIResult"} <= set(dir(inference)) and "sample_database" in dir(models)
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        inference.nothing  # noqa: B018
