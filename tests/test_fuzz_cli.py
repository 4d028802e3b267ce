"""A quick seeded round of ``tests/fuzz_cli.py`` (a few cases of every family, the large data
files left out): nothing gets through. ``python tests/fuzz_cli.py --cases 300`` runs a full
round."""

from __future__ import annotations

import gzip
import importlib.util
import sys
from pathlib import Path

import pytest

from ldhmm.cli import main
from ldhmm.data.regular_files import content_bytes

_SPEC = importlib.util.spec_from_file_location("fuzz_cli", Path(__file__).with_name("fuzz_cli.py"))
fuzz_cli = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("fuzz_cli", fuzz_cli)  # dataclasses look their module up there
_SPEC.loader.exec_module(fuzz_cli)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    fuzz_cli.run_round(0, seed=0, workdir=d)  # the base files: a log, two fitted models
    return d


@pytest.mark.parametrize(
    "family", ["model field", "model file", "side file", "data file", "path", "checkpoint"]
)
def test_a_seeded_round_gets_nothing_through(family, workdir):
    cases = fuzz_cli.run_round(4, seed=11, workdir=workdir, families=[family], heavy=False)
    assert len(cases) == 4 and all(c.family == family for c in cases)
    through = [(c.what, c.problems, c.stderr) for c in cases if c.problems]
    assert not through, through


def test_the_checks_catch_what_they_look_for(workdir, tmp_path):
    """The fuzzer's own checks fail on a case that writes outside --out and on a table with a
    NaN (so that a clean round means something)."""
    victim = tmp_path / "victim"
    victim.mkdir()
    d = tmp_path / "d"
    d.mkdir()
    (d / "t.csv").write_text("sequence_id,log_likelihood\na,nan\n")
    assert fuzz_cli._output_problems(d / "t.csv") == ["non-finite value in column 'log_likelihood'"]
    base = workdir / "base"
    argv = ["fit", base / "train.txt", "--states", "2", "--max-iter", "1", "--quiet", "--out", d / "x.json"]
    case = fuzz_cli.run_case(
        fuzz_cli.Case("check", "writes elsewhere", argv, out=str(d / "y.json")), d, victim
    )
    assert case.code == 0 and any("written outside --out" in p for p in case.problems), case.problems


def test_a_gzip_file_is_measured_without_inflating_it_whole(tmp_path):
    text = b"home news " * 300_000
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(text))
    (tmp_path / "a.txt").write_bytes(text)
    assert content_bytes(tmp_path / "a.txt.gz", 10**9) == len(text) == content_bytes(tmp_path / "a.txt", 0)
    counted = content_bytes(tmp_path / "a.txt.gz", 1000)
    assert 1000 < counted < len(text)  # stopped a chunk past the bound


def test_a_data_file_too_large_to_read_is_refused_before_reading(workdir, tmp_path, capsys):
    (tmp_path / "bomb.txt.gz").write_bytes(gzip.compress(b"home news " * 1_000_000))  # 10 MB of text
    model = str(workdir / "base" / "model.json")
    argv = [
        "score",
        model,
        str(tmp_path / "bomb.txt.gz"),
        "--max-memory",
        "64M",
        "--out",
        str(tmp_path / "s.csv"),
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "bomb.txt.gz" in err and "of content" in err and len(err.strip().splitlines()) == 1
