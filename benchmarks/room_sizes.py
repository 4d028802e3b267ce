"""The sizes of the rooms of issue 45, read from the code: a Markdown table, no timing.

``python benchmarks/room_sizes.py`` measures the working tree; ``--rev REV`` a git revision
(its files read with ``git show REV:path``; give it twice, ``--rev A --rev B``, for a column
each). Nothing is imported or run but ``git`` and, for the last row, ``duplicates``
(``--no-duplicates`` leaves it out; it is the one slow row, up to ``--seconds``). The rows:

- ``VariantHMM`` with every project method it inherits: the line spans (``class`` line to its
  last line) of the class bodies of ``models/variant_hmm.py::VariantHMM``,
  ``models/base.py::SequenceModel`` and ``models/fit_settings.py::TakesFitSettings``, summed;
  their methods; the longest method (``def`` line to its last line);
- the lines of ``inference/cavi/expectation.py``;
- ``inference/em.py::VariationalEM.fit_backend``: lines of logic (the lines of its body that
  hold code: no docstring, comment or blank line) and its plain span;
- the bodies of ``compare``, ``classify`` and ``next_event`` (lines of logic, as above);
- restart loops, state stores, test-only library names and ``duplicates`` pairs, counted as the
  functions below say.

``--names`` prints, after the table, what the counted rows found (the restart loops, the state
stores, the test-only names).
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The library's folders (installed as ``ldhmm`` and its sub-packages).
LIBRARY = ("src/ldhmm", "models", "inference", "baselines", "experiments")
#: Where restart loops are looked for (the estimator and the baselines).
RESTART_FOLDERS = ("models", "baselines")
#: The estimator and the classes whose methods it inherits.
ESTIMATOR = (
    ("models/variant_hmm.py", "VariantHMM"),
    ("models/base.py", "SequenceModel"),
    ("models/fit_settings.py", "TakesFitSettings"),
)
EXPECTATION = "inference/cavi/expectation.py"
EM_LOOP = ("inference/em.py", "VariationalEM", "fit_backend")
EXPERIMENTS = (
    ("experiments/compare.py", "compare"),
    ("experiments/classify.py", "classify"),
    ("experiments/next_event.py", "next_event"),
)
#: numpy's archive writers: a call of one of them writes an NPZ/NPY file.
NPZ_WRITERS = {"savez", "savez_compressed", "save"}
DUPLICATE_ROW = re.compile(r"^D\d+\s+(\S+?):\d+(?:-\d+)?\s+~\s+(\S+?):\d+(?:-\d+)?")


class Tree:
    """The files of the working tree (``rev=None``: those git tracks and the untracked ones it
    does not ignore) or of the git revision ``rev``."""

    def __init__(self, root: Path, rev: str | None = None):
        self.root, self.rev = root, rev
        self._texts: dict[str, str | None] = {}
        self._trees: dict[str, ast.Module | None] = {}
        if rev is None:
            listed = git(root, "ls-files", "--cached", "--others", "--exclude-standard")
            self.paths = sorted(p for p in set(listed.splitlines()) if (root / p).is_file())
        else:
            self.paths = sorted(git(root, "ls-tree", "-r", "--name-only", rev).splitlines())
        self._known = set(self.paths)

    @property
    def label(self) -> str:
        return "working tree" if self.rev is None else self.rev

    def python_files(self, folders) -> list[str]:
        return [p for p in self.paths if p.endswith(".py") and any(p.startswith(f + "/") for f in folders)]

    def read(self, path: str) -> str | None:
        """The text of ``path``, None where the tree has no such file."""
        if path not in self._texts:
            if path not in self._known:
                self._texts[path] = None
            elif self.rev is None:
                self._texts[path] = (self.root / path).read_text(encoding="utf-8")
            else:
                self._texts[path] = git(self.root, "show", f"{self.rev}:{path}")
        return self._texts[path]

    def parse(self, path: str) -> ast.Module | None:
        if path not in self._trees:
            text = self.read(path)
            self._trees[path] = None if text is None else ast.parse(text, filename=path)
        return self._trees[path]


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


def span(node: ast.AST) -> int:
    """The lines from a node's first (its ``def``/``class`` line, decorators not counted) to its last."""
    return node.end_lineno - node.lineno + 1


def top_level(module: ast.Module | None, name: str, kinds=(ast.ClassDef, ast.FunctionDef)):
    if module is None:
        return None
    return next((n for n in module.body if isinstance(n, kinds) and n.name == name), None)


def methods(cls: ast.ClassDef) -> list[ast.FunctionDef]:
    return [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def code_lines(text: str) -> set[int]:
    """The numbers of the lines of ``text`` that hold a token of code (a multi-line string: all
    its lines); comments and blank lines hold none."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    skip.add(tokenize.ENCODING)
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type not in skip and tok.type != tokenize.ENDMARKER:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return lines


def logic_lines(text: str, function: ast.FunctionDef) -> int:
    """A function's lines of logic: the lines of its body that hold code, its docstring left out."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        if isinstance(body[0].value.value, str):
            body = body[1:]
    if not body:
        return 0
    first = min([body[0].lineno] + [d.lineno for d in getattr(body[0], "decorator_list", [])])
    return sum(first <= line <= function.end_lineno for line in code_lines(text))


def estimator_rows(tree: Tree) -> list[tuple[str, object]]:
    total, count, longest, absent = 0, 0, (0, ""), []
    for path, name in ESTIMATOR:
        cls = top_level(tree.parse(path), name, (ast.ClassDef,))
        if cls is None:
            absent.append(name)
            continue
        total += span(cls)
        for method in methods(cls):
            count += 1
            longest = max(longest, (span(method), f"{name}.{method.name}"))
    note = f" ({', '.join(absent)} absent)" if absent else ""
    return [
        (f"`VariantHMM` with every project method it inherits: lines{note}", total),
        ("... its methods", count),
        ("... its longest method: lines (which)", f"{longest[0]} (`{longest[1]}`)"),
    ]


def expectation_rows(tree: Tree) -> list[tuple[str, object]]:
    text = tree.read(EXPECTATION)
    return [(f"`{EXPECTATION}`: lines", "absent" if text is None else len(text.splitlines()))]


def em_loop_rows(tree: Tree) -> list[tuple[str, object]]:
    path, cls_name, name = EM_LOOP
    cls = top_level(tree.parse(path), cls_name, (ast.ClassDef,))
    function = next((m for m in methods(cls) if m.name == name), None) if cls else None
    if function is None:
        return [(f"`{path}::{name}`", "absent")]
    return [
        (f"`{path}::{name}`: lines of logic", logic_lines(tree.read(path), function)),
        (f"`{path}::{name}`: lines, `def` to end", span(function)),
    ]


def experiment_rows(tree: Tree) -> list[tuple[str, object]]:
    rows = []
    for path, name in EXPERIMENTS:
        function = top_level(tree.parse(path), name, (ast.FunctionDef,))
        value = "absent" if function is None else logic_lines(tree.read(path), function)
        rows.append((f"`{path}::{name}` body: lines of logic", value))
    return rows


def call_name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def assigned_names(node: ast.AST) -> set[str]:
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for target in sub.targets if isinstance(sub, ast.Assign) else [sub.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def keeps_the_best(loop: ast.For) -> bool:
    """A ``for`` loop that runs something each time round (a call in its body) and keeps the
    best result: an ``if`` that compares (``<``, ``>``, ``<=``, ``>=``) and then assigns a name
    with ``best`` or ``kept`` in it."""
    runs = any(isinstance(n, ast.Call) for stmt in loop.body for n in ast.walk(stmt))
    for node in ast.walk(loop):
        if not isinstance(node, ast.If):
            continue
        compares = any(
            isinstance(c, ast.Compare)
            and any(isinstance(o, (ast.Gt, ast.Lt, ast.GtE, ast.LtE)) for o in c.ops)
            for c in ast.walk(node.test)
        )
        keeps = any("best" in n or "kept" in n for stmt in node.body for n in assigned_names(stmt))
        if runs and compares and keeps:
            return True
    return False


def enclosing_functions(module: ast.Module):
    """(qualified name, function) of every function of a module, methods as ``Class.name``."""
    stack = [("", n) for n in module.body]
    while stack:
        prefix, node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            stack.extend((prefix + node.name + ".", n) for n in node.body)
        elif isinstance(node, ast.ClassDef):
            stack.extend((prefix + node.name + ".", n) for n in node.body)


def restart_loops(tree: Tree) -> list[str]:
    """The places that run several fitting starts and keep the best: in ``models/`` and
    ``baselines/``, each function holding a ``for`` loop that :func:`keeps_the_best` (a loop
    nested in another counts once, as its function). Today that is ``models/fit_starts.py::
    best_of``, which the estimator, the contextual models and the HMM and LDA baselines call, and
    ``models/path.py::continue_grown``, the race of a fit's grown starts against its restarts
    (stopped early where the path would not fall): it compares final ELBOs of its own. A
    comprehension of runs handed to ``best_of`` is not a loop of its own. Folders left out:
    ``inference/`` (its loops over starts are per sequence, inside one E-step:
    ``cavi/sequence_starts.py``) and ``experiments/``, which fits through the models."""
    found = []
    for path in tree.python_files(RESTART_FOLDERS):
        for name, function in enclosing_functions(tree.parse(path)):
            own = [n for n in function.body for n in ast.walk(n) if isinstance(n, ast.For)]
            inner = {
                id(n)
                for sub in ast.walk(function)
                if sub is not function and isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef))
                for n in ast.walk(sub)
            }
            if any(keeps_the_best(loop) for loop in own if id(loop) not in inner):
                found.append(f"{path}::{name}")
    return found


def best_of_callers(tree: Tree) -> list[str]:
    """The library modules that call ``best_of``."""
    out = []
    for path in tree.python_files(LIBRARY):
        calls = (n for n in ast.walk(tree.parse(path)) if isinstance(n, ast.Call))
        if any(call_name(c) == "best_of" for c in calls):
            out.append(path)
    return out


def state_stores(tree: Tree) -> list[str]:
    """The library modules that write per-sequence state files: a module in which a function
    whose name says ``state`` (``write_states``, ``save_state``, ``save_path_state``) writes an
    NPZ archive itself, that is calls numpy's ``savez``/``savez_compressed``/``save``, or calls a
    function of the same module that does. A module that hands its states to another module's
    writer (``inference/checkpoint.py`` and ``models/path.py`` to ``inference/state_store.py``'s
    ``write_states`` today) is not a store; model files (``models/file_format.py``, whose writer
    says no ``state``) are not per-sequence state."""
    out = []
    for path in tree.python_files(LIBRARY):
        functions = dict(enclosing_functions(tree.parse(path)))
        short = {name.rsplit(".", 1)[-1] for name in functions}
        calls = {
            name: {call_name(c) for c in ast.walk(f) if isinstance(c, ast.Call)}
            for name, f in functions.items()
        }
        writers = {name for name, called in calls.items() if called & NPZ_WRITERS}
        grown = True
        while grown:  # a function of the module that calls a writer of the module writes too
            local = {w.rsplit(".", 1)[-1] for w in writers} & short
            new = {name for name, called in calls.items() if called & local} - writers
            writers |= new
            grown = bool(new)
        if any("state" in name.rsplit(".", 1)[-1].lower() for name in writers):
            out.append(path)
    return out


def used_names(module: ast.Module, *, imports: bool) -> dict[str, set[str]]:
    """The names a module uses, by the top-level definition they are used in (``""``: outside
    any): identifiers, attributes, string constants that are a name (a lazy export table, a
    registry) and, with ``imports``, the names it imports. ``__all__`` is not a use."""
    out: dict[str, set[str]] = {}
    for stmt in module.body:
        owner = stmt.name if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else ""
        targets = stmt.targets if isinstance(stmt, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            continue
        names = out.setdefault(owner, set())
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                names.add(node.value)
            elif imports and isinstance(node, ast.ImportFrom):
                names.update(alias.name for alias in node.names)
    return out


def test_only_names(tree: Tree) -> list[tuple[str, int]]:
    """Library names used only by the tests, with their lines: a rough count. A name is a
    function or class defined at the top of a library module (not ``__dunder__``) that a file
    under ``tests/`` uses (imports or names) and no library module uses outside its own
    definition (an import does not count there, nor ``__all__``: re-exports are not uses), nor
    ``benchmarks/`` or ``examples/``; the names of ``ldhmm.__all__`` (the public API) are left
    out. Names are matched by spelling alone, so a name shared with anything used elsewhere is
    not counted."""
    library = tree.python_files(LIBRARY)
    defined: dict[str, list[tuple[str, int]]] = {}
    used_in_library: set[str] = set()
    for path in library:
        module = tree.parse(path)
        for stmt in module.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if not (stmt.name.startswith("__") and stmt.name.endswith("__")):
                    defined.setdefault(stmt.name, []).append((path, span(stmt)))
        for owner, names in used_names(module, imports=False).items():
            used_in_library |= names - {owner} if owner else names
    others: set[str] = set()
    for path in tree.python_files(("benchmarks", "examples")):
        for names in used_names(tree.parse(path), imports=True).values():
            others |= names
    in_tests: set[str] = set()
    for path in tree.python_files(("tests",)):
        for names in used_names(tree.parse(path), imports=True).values():
            in_tests |= names
    public = set(public_api(tree))
    out = []
    for name, places in sorted(defined.items()):
        if name in in_tests and name not in used_in_library | others | public:
            out.extend((f"{path}::{name}", lines) for path, lines in places)
    return out


def public_api(tree: Tree) -> list[str]:
    """The names of ``ldhmm.__all__`` (``src/ldhmm/__init__.py``)."""
    module = tree.parse("src/ldhmm/__init__.py")
    for stmt in module.body if module else []:
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets
        ):
            return [e.value for e in getattr(stmt.value, "elts", []) if isinstance(e, ast.Constant)]
    return []


def duplicate_pairs(tree: Tree, seconds: int) -> str:
    """``duplicates --most 200 --seconds N`` over the tree (a revision: its files unpacked by
    ``git archive`` into a temporary folder): the pairs with neither side under ``tests/``, out of
    the rows listed ("not available" without the command)."""
    if shutil.which("duplicates") is None:
        return "not available"
    with tempfile.TemporaryDirectory() as folder:
        repo = tree.root
        if tree.rev is not None:
            archive = subprocess.run(
                ["git", "archive", tree.rev], cwd=tree.root, capture_output=True, check=True
            )
            with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
                tar.extractall(folder, filter="data")
            repo = Path(folder)
        command = ["duplicates", "--repo", str(repo), "--most", "200", "--seconds", str(seconds)]
        lines = subprocess.run(command, capture_output=True, text=True).stdout.splitlines()
    rows = [m.groups() for m in map(DUPLICATE_ROW.match, lines) if m]
    outside = sum(not (a.startswith("tests/") or b.startswith("tests/")) for a, b in rows)
    more = [line for line in lines if line.startswith("(+") or line.startswith("incomplete:")]
    note = f" (of the first {len(rows)} rows; {'; '.join(more)})" if more else f" (of {len(rows)} pairs)"
    return f"{outside}{note}"


def measure(tree: Tree, duplicates_seconds: int | None) -> tuple[list[tuple[str, object]], dict]:
    """The table's rows for ``tree`` and what the counted rows found."""
    loops, stores, names = restart_loops(tree), state_stores(tree), test_only_names(tree)
    found = {
        "restart loops": loops,
        "best_of called in": best_of_callers(tree),
        "state stores": stores,
        "test-only names": [f"{name} ({lines} lines)" for name, lines in names],
    }
    rows = estimator_rows(tree) + expectation_rows(tree) + em_loop_rows(tree) + experiment_rows(tree)
    rows += [
        ("restart loops (`models/`, `baselines/`)", len(loops)),
        ("stores of per-sequence state", len(stores)),
        ("library names only the tests use", len(names)),
        ("... their lines", sum(lines for _, lines in names)),
    ]
    if duplicates_seconds is not None:
        rows.append(
            ("`duplicates` pairs with no side in `tests/`", duplicate_pairs(tree, duplicates_seconds))
        )
    return rows, found


def table(columns: list[tuple[str, list[tuple[str, object]]]]) -> str:
    labels = [label for label, _ in columns[0][1]]
    lines = ["| measure | " + " | ".join(name for name, _ in columns) + " |"]
    lines.append("| --- |" + " ---: |" * len(columns))
    for i, label in enumerate(labels):
        lines.append(f"| {label} | " + " | ".join(str(rows[i][1]) for _, rows in columns) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", action="append", help="a git revision to measure (again for a column more)")
    parser.add_argument("--no-duplicates", action="store_true", help="leave out the duplicates row")
    parser.add_argument("--seconds", type=int, default=120, help="duplicates' time limit (default 120)")
    parser.add_argument("--names", action="store_true", help="list what the counted rows found")
    args = parser.parse_args(argv)
    trees = [Tree(ROOT, rev) for rev in args.rev] if args.rev else [Tree(ROOT)]
    seconds = None if args.no_duplicates else args.seconds
    results = [(tree.label, *measure(tree, seconds)) for tree in trees]
    print(table([(label, rows) for label, rows, _ in results]))
    if args.names:
        for label, _, found in results:
            print(f"\n## {label}")
            for what, items in found.items():
                print(f"- {what} ({len(items)}): {', '.join(items) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
