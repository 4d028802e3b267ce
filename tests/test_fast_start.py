"""What the ``ldhmm`` command loads before it works: ``ldhmm --help`` none of the heavy libraries,
``ldhmm score`` none of the experiments (the command table imports only the command that runs).
Checked on ``sys.modules`` of fresh interpreters, never on times."""

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
#: What ``ldhmm score`` does not load (it needs torch and, for the PF/FF guides, Pyro; the model
#: files' classes bring the baselines, so gensim and hmmlearn too).
NOT_FOR_SCORE = ("matplotlib", "dask", "distributed")


def loaded_after(argv) -> set[str]:
    """The modules a fresh interpreter holds after ``ldhmm ARGV`` (run in process)."""
    code = (
        "import sys, contextlib, io\nfrom ldhmm.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main({[str(a) for a in argv]!r})\n"
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


def test_score_loads_no_experiment(tiny):
    code, loaded = loaded_after(
        ["score", tiny / "model.json", tiny / "log.txt", "--quiet", "--out", tiny / "s.csv"]
    )
    assert code == 0 and (tiny / "s.csv").is_file()
    assert not heavy(loaded, NOT_FOR_SCORE)
    # of the experiments, only the light module of what a Ctrl-C says
    assert sorted(m for m in loaded if m.startswith("ldhmm.experiments")) == [
        "ldhmm.experiments",
        "ldhmm.experiments.resume",
    ]
    assert "ldhmm.cli.score" in loaded and "ldhmm.cli.compare" not in loaded


def test_every_command_parses_through_the_table():
    from ldhmm.cli.main import build_parser

    parser = build_parser()  # every module registered: the names the table promises
    choices = parser._subparsers._group_actions[0].choices
    assert list(choices) == list(COMMANDS)
    assert all(choices[name].description for name in COMMANDS)  # a module's parser, not a placeholder
