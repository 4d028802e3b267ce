"""``benchmarks/room_sizes.py`` (issue 45's room sizes, read from the code): it runs on this
checkout and on a git revision, its measures are whole numbers, and its counters count what they
say on small sources. Nothing here is timed, and ``duplicates`` is not run."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "room_sizes.py"


@pytest.fixture(scope="module")
def rooms():
    spec = importlib.util.spec_from_file_location("benchmarks_room_sizes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def leading_int(value) -> int:
    """The number a cell starts with (``"44 (`VariantHMM.fit`)"`` -> 44)."""
    return value if isinstance(value, int) else int(str(value).split()[0])


@pytest.fixture(scope="module")
def working_tree(rooms):
    return rooms.measure(rooms.Tree(rooms.ROOT), duplicates_seconds=None)


def test_the_working_tree_measures_are_positive_whole_numbers(rooms, working_tree):
    rows, found = working_tree
    counts = ("library names only the tests use", "... their lines")  # 0 is the target there
    assert all(leading_int(v) > 0 for label, v in rows if label not in counts), rows
    assert all(isinstance(v, int) and v >= 0 for label, v in rows if label in counts), rows
    assert found["restart loops"] == ["models/best_run.py::best_of"]  # the one loop over starts
    assert found["state stores"] == ["inference/state_store.py"]
    assert dict(rows)["stores of per-sequence state"] == 1
    printed = rooms.table([("working tree", rows)]).splitlines()
    assert printed[0] == "| measure | working tree |" and len(printed) == len(rows) + 2


def test_a_revision_is_read_through_git(rooms, working_tree, capsys):
    assert rooms.main(["--no-duplicates", "--rev", "HEAD"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "| measure | HEAD |"
    assert [line.split(" | ")[0] for line in printed[2:]] == [f"| {label}" for label, _ in working_tree[0]]


def test_the_counters_count_what_they_say(rooms):
    source = '''
def run_all(runs):
    """Docstring,
    two lines."""
    # a comment

    best = None
    for run in runs:
        result = run()
        if best is None or result > best:
            best = result
    return best


def first(runs):
    for run in runs:
        if run() > 0:
            return run
'''
    module = ast.parse(source)
    run_all, first = module.body
    assert rooms.logic_lines(source, run_all) == 6
    assert rooms.span(run_all) == 11
    assert rooms.keeps_the_best(run_all.body[2]) and not rooms.keeps_the_best(first.body[0])
