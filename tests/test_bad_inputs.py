"""Every case of ``tests/bad_inputs.py``: a one-line refusal, no traceback, nothing written;
and ``docs/bad-inputs.md`` is the table those cases generate."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("bad_inputs", Path(__file__).with_name("bad_inputs.py"))
bad_inputs = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("bad_inputs", bad_inputs)  # dataclasses look their module up there
_SPEC.loader.exec_module(bad_inputs)


@pytest.fixture(scope="module")
def case_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    bad_inputs.make_files(d)
    return d


@pytest.mark.parametrize("case", [c for c in bad_inputs.CASES if not c.tried_by], ids=lambda c: c.what)
def test_bad_input_is_refused_in_one_line(case, case_dir):
    before = set(case_dir.rglob("*"))
    code, err = bad_inputs.run_case(case, case_dir)
    assert code in (1, 2), err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert (
        "Traceback" not in err and "CPUDispatcher" not in err and "nan" not in err.lower().split("error")[0]
    )
    bookkeeping = ("config.json", ".lock")  # the run's configuration and lock, not results
    created = {p for p in set(case_dir.rglob("*")) - before if p.name not in bookkeeping and p.is_file()}
    assert not created, created


def test_the_docs_table_is_generated_from_these_cases(case_dir):
    expected = bad_inputs.page(case_dir)
    assert bad_inputs.DOC.read_text() == expected, (
        "docs/bad-inputs.md is stale: run python tests/bad_inputs.py --write"
    )
