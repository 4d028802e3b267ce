"""Two ways in (issue 48, item 6): the README's user install asks for the package and its run-time
dependencies only; the developer's tools (pytest, ruff, pylint, hypothesis) come with the
``dev`` extra alone. Checked here on ``pyproject.toml``, what ``pip install`` reads; ``.ci/run``
installs the package as the README says in a fresh venv and runs ``ldhmm --help`` and a fit
there (about a minute and a half)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DEV_TOOLS = {"pytest", "pytest-xdist", "ruff", "pylint", "hypothesis"}


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower()


def test_the_run_time_requirements_hold_no_developer_tool():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    plain = {_name(r) for r in project["dependencies"]}
    dev = {_name(r) for r in project["optional-dependencies"]["dev"]}
    assert plain and not plain & DEV_TOOLS
    assert DEV_TOOLS <= dev


def test_the_readme_gives_a_user_install_beside_the_developers():
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, re.DOTALL)
    user = [b for b in blocks if "pip install" in b and "-e " not in b]
    assert user and all("[dev" not in b for b in user)
    assert any('pip install -e ".[dev]"' in b for b in blocks)
