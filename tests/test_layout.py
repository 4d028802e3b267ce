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

    import ldhmm.inference  # noqa: F401

    copies = [name for name in sys.modules if name.endswith(".expectation")]
    assert copies == ["ldhmm.inference.cavi.expectation"]


#: Folders of the library and their import names (pyproject.toml's package-dir).
LIBRARY = {
    "src/ldhmm": "ldhmm",
    "models": "ldhmm.models",
    "inference": "ldhmm.inference",
    "baselines": "ldhmm.baselines",
    "experiments": "ldhmm.experiments",
}


def test_no_two_library_modules_share_a_base_name():
    # The CLI's one module per subcommand may mirror the experiment it runs.
    owners = {}
    for folder in LIBRARY:
        for path in (REPO / folder).rglob("*.py"):
            rel = path.relative_to(REPO)
            if path.name in ("__init__.py", "__main__.py") or rel.parts[:3] == ("src", "ldhmm", "cli"):
                continue
            owners.setdefault(path.stem, []).append(str(rel))
    clashes = {name: paths for name, paths in owners.items() if len(paths) > 1}
    assert not clashes


def test_a_module_name_is_not_shadowed_by_a_function():
    # ``import ldhmm.inference.cavi.sequence_starts as s; s.STARTS`` must reach the module
    import ldhmm.inference.cavi.sequence_starts as s

    assert isinstance(s.STARTS, tuple)


@pytest.mark.parametrize(
    "folder, allowed",
    [
        # the kernels' cache locator (kernels/cache.py) also reads files and the environment
        (
            "inference/cavi/kernels",
            {"__future__", "numpy", "numba", "typing", "functools", "hashlib", "os", "pathlib", "sys"},
        ),
        ("inference/ops", {"__future__", "numpy", "torch", "scipy", "typing", "dataclasses"}),
    ],
)
def test_lower_layers_import_nothing_of_the_project_above_them(folder, allowed):
    paths = sorted((REPO / folder).glob("*.py"))
    assert len(paths) > 3, folder
    for path in paths:
        imported = _imports(path)
        # same-layer relative imports ('.x') are fine; '..x' would reach a layer above
        extra = {
            n for n in imported if n not in allowed and not (n.startswith(".") and not n.startswith(".."))
        }
        assert not extra, f"{path.relative_to(REPO)} imports {sorted(extra)}"


def _loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after ``statement``."""
    code = f"import sys\n{statement}\nprint('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


#: What only the experiments and the baselines need.
HEAVY = ("gensim", "hmmlearn", "sklearn", "matplotlib", "ldhmm.experiments", "ldhmm.baselines")


@pytest.mark.parametrize(
    "statement",
    [
        "import ldhmm.inference",
        "import ldhmm.inference.cavi.expectation",
        "import ldhmm.inference.distributed.workers",
        "import ldhmm.data",
    ],
)
def test_a_sub_package_loads_no_experiment_library(statement):
    loaded = _loaded_after(statement)
    assert "ldhmm.inference" in loaded or "ldhmm.data" in loaded  # the statement ran
    assert not [m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(HEAVY)]


def test_a_dask_worker_loads_no_experiment_library():
    pytest.importorskip("distributed")
    loaded = _loaded_after("import ldhmm.inference.distributed.dask_backend")
    assert "ldhmm.inference.distributed.dask_backend" in loaded
    assert not [m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(HEAVY)]


def test_import_ldhmm_is_cheap_and_names_load_on_first_use():
    loaded = _loaded_after("import ldhmm")
    assert not {"torch", "numba", "pyro", "pandas"} & loaded
    loaded = _loaded_after("from ldhmm import LDHMM, compare")
    assert {"ldhmm.models.ldhmm", "ldhmm.experiments.compare"} <= loaded


def test_front_door_names():
    import ldhmm

    assert set(ldhmm.__all__) <= set(dir(ldhmm))
    assert ldhmm.ParameterSharing is __import__("ldhmm.inference", fromlist=["x"]).ParameterSharing
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ldhmm.nope  # noqa: B018


@pytest.mark.parametrize(
    "package",
    [
        "inference",
        "inference/ops",
        "inference/cavi",
        "inference/cavi/kernels",
        "inference/svi",
        "inference/distributed",
    ],
)
def test_a_package_docstring_names_each_of_its_modules(package):
    folder = REPO / package
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    modules = [p.stem for p in folder.glob("*.py") if p.stem != "__init__"]
    modules += [p.name for p in folder.iterdir() if (p / "__init__.py").is_file()]
    assert modules
    assert not [m for m in modules if f":mod:`.{m}`" not in doc]


@pytest.mark.parametrize("command", ["fit", "fit_path", "score", "posterior", "predict", "decode", "report"])
def test_a_model_command_stands_below_the_experiments(command):
    """``fit`` (also along K), ``score``, ``posterior``, ``predict``, ``decode`` and ``report``
    import nothing of ``ldhmm.experiments``: what they share with it (the K grid's parser,
    what a Ctrl-C says) lives below both."""
    loaded = _loaded_after(f"import ldhmm.cli.{command}")
    assert f"ldhmm.cli.{command}" in loaded
    assert not [m for m in loaded if m.startswith("ldhmm.experiments")]
