"""The package layout of docs/architecture.md: one import name, layers that import downwards."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    """Top-level names imported by a module (relative imports as '.name'), every import
    counted, those inside functions too."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or "").split(".")[0])
    return names


def test_only_ldhmm_is_importable_after_install(tmp_path):
    code = (
        "import importlib.util, ldhmm, ldhmm.inference, ldhmm.models, ldhmm.baselines, "
        "ldhmm.experiments, ldhmm.data, ldhmm.cli\n"
        "bare = [n for n in ('models', 'inference', 'baselines', 'experiments') "
        "if importlib.util.find_spec(n) is not None]\n"
        "print(','.join(bare))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ""


def test_front_door():
    import ldhmm

    for name in ("LDHMM", "VariantHMM", "ParameterSharing", "PFGuide", "FFGuide"):
        assert hasattr(ldhmm, name)


def test_modules_are_loaded_once():

    copies = [name for name in sys.modules if name.endswith("inference.e_step")]
    assert copies == ["ldhmm.inference.e_step"]


@pytest.mark.parametrize(
    "folder, allowed",
    [
        ("inference/kernels", {"__future__", "numpy", "numba", "typing"}),
        ("inference/ops", {"__future__", "numpy", "torch", "scipy", "typing", "dataclasses"}),
    ],
)
def test_lower_layers_import_nothing_of_the_project_above_them(folder, allowed):
    for path in (REPO / folder).glob("*.py"):
        imported = _imports(path)
        # same-layer relative imports ('.x') are fine; '..x' would reach a layer above
        extra = {
            n for n in imported if n not in allowed and not (n.startswith(".") and not n.startswith(".."))
        }
        assert not extra, f"{path.relative_to(REPO)} imports {sorted(extra)}"
