"""How long ``ldhmm`` takes to start: each command run in a fresh interpreter, its wall and CPU time.

``python benchmarks/startup.py [--repeats 5] [--commands help score ...] [--before REF]``
writes a tiny model and log into a temporary directory, runs ``python -m ldhmm.cli ...`` for
each command ``--repeats`` times, and prints one Markdown row per command: the median wall
seconds, the median CPU seconds (user + system of the child process, the better measure on a
loaded machine), and the heavy libraries the command's interpreter holds at its end (from a
separate run of the same command in process). ``--help`` of a command
measures its imports alone; ``score``, ``posterior``, ``predict``, ``decode`` and ``report``
read 5 sequences of a K = 2 model, so nearly all of their time is imports too.

With ``--before REF`` every run of this checkout alternates with a run of the commit ``REF``
(its files laid out for ``PYTHONPATH`` by :func:`earlier_tree`, under ``--cache``), so that
both columns see the same load.

``--floor`` prints a second table first: what any command costs that runs a compiled kernel,
whatever ldhmm itself imports. Each row is a fresh interpreter: an empty one, ``import numpy``,
numpy and numba, numpy and numba calling one ``@njit(cache=True)`` function already in numba's
cache (numba sets up its compilation target on the first such call, whether it compiles or
loads: that is where scipy is imported, and most of the row's cost), and torch and pandas
alone, for scale.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ldhmm.models import LDHMM

__all__ = ["COMMANDS", "FLOOR", "HEAVY", "earlier_tree", "print_floor", "run_once", "timed", "main"]

REPO = Path(__file__).resolve().parents[1]
#: The repository's top-level folders that are installed as ``ldhmm.<name>``.
SUBPACKAGES = ("models", "inference", "baselines", "experiments")

#: The heavy libraries a row names when the command's interpreter holds them.
HEAVY = (
    "torch",
    "pyro",
    "pandas",
    "sklearn",
    "gensim",
    "hmmlearn",
    "matplotlib",
    "dask",
    "ldhmm.experiments",
)


def _commands(d: Path) -> dict[str, list[str]]:
    model, log = str(d / "model.json"), str(d / "log.txt")
    return {
        "help": ["--help"],
        "score --help": ["score", "--help"],
        "score": ["score", model, log, "--quiet", "--out", str(d / "s.csv")],
        "posterior": ["posterior", model, log, "--quiet", "--out", str(d / "p.csv")],
        "predict": ["predict", model, log, "--quiet", "--out", str(d / "n.csv")],
        "decode": ["decode", model, log, "--quiet", "--out", str(d / "d.csv")],
        "report": ["report", model, log, "--out", str(d / "r.html")],
        "fit --help": ["fit", "--help"],
        "compare --help": ["compare", "--help"],
        "next-event --help": ["next-event", "--help"],
        "data info": ["data", "info", log],
    }


COMMANDS = tuple(_commands(Path(".")))


def _write_inputs(d: Path) -> None:
    model = LDHMM.from_hyperparameters(
        [1.0, 2.0], [[5.0, 1.0], [1.0, 5.0]], [[4.0, 1.0, 1.0], [1.0, 1.0, 4.0]]
    )
    model.save(d / "model.json", vocabulary=["a", "b", "c"])
    rng = np.random.default_rng(0)
    (d / "log.txt").write_text("\n".join(" ".join(rng.choice(list("abc"), 6)) for _ in range(5)) + "\n")


#: What the floor's kernel row runs: one call of the cached kernel of ``floor_kernel.py``.
KERNEL_CALL = "import floor_kernel; floor_kernel.twice(1.0)"
#: The floor's rows: a label and the code a fresh interpreter runs (in the directory of
#: ``floor_kernel.py``, written by :func:`_write_floor_kernel`).
FLOOR = {
    "an empty interpreter": "pass",
    "import numpy": "import numpy",
    "import numpy, numba": "import numpy, numba",
    "numpy, numba, one cached kernel called": KERNEL_CALL,
    "import torch": "import torch",
    "import pandas": "import pandas",
}


def _write_floor_kernel(d: Path) -> None:
    """A module with one cached kernel, called once here so that numba's cache holds it."""
    (d / "floor_kernel.py").write_text(
        "from numba import njit\n\n\n@njit(cache=True)\ndef twice(x):\n    return 2.0 * x\n"
    )
    subprocess.run([sys.executable, "-c", KERNEL_CALL], cwd=d, check=True)


def timed(args: list[str], **run_options) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of the child process ``args`` (``subprocess.run`` options:
    ``cwd``, ``env``, ``check``); its output is captured and dropped."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(args, capture_output=True, **run_options)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def print_floor(d: Path, repeats: int) -> None:
    """The floor's table: each row's median wall and CPU seconds over ``repeats`` rounds, the rows
    interleaved within a round so that the machine's drift hits them alike."""
    _write_floor_kernel(d)
    runs: dict[str, list[tuple[float, float]]] = {label: [] for label in FLOOR}
    for _ in range(repeats):
        for label, code in FLOOR.items():
            runs[label].append(timed([sys.executable, "-c", code], cwd=d, check=True))
    print("| fresh interpreter | wall s | CPU s |\n|---|---|---|")
    for label, r in runs.items():
        wall, cpu = _medians(r)
        print(f"| {label} | {wall:.2f} | {cpu:.2f} |", flush=True)
    print()


def earlier_tree(ref: str, cache: Path) -> Path:
    """``ref``'s files laid out as the installed package under ``cache/<commit>/src`` (made
    once); returns the directory to put on ``PYTHONPATH``."""
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", ref], check=True, capture_output=True, text=True
    ).stdout.strip()
    root = cache / commit
    if not (root / "src" / "ldhmm").is_dir():
        tmp = Path(tempfile.mkdtemp(dir=cache))
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
        for sub in SUBPACKAGES:
            if (tmp / sub).is_dir():
                (tmp / sub).rename(tmp / "src" / "ldhmm" / sub)
        tmp.rename(root)
    return root / "src"


def _env(pythonpath: Path | None) -> dict[str, str]:
    """This process's environment, with ``pythonpath`` (an earlier commit's package) first."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), *env.get("PYTHONPATH", "").split(os.pathsep)])
    return env


def run_once(argv: list[str], pythonpath: Path | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of ``python -m ldhmm.cli ARGV`` in a fresh interpreter
    (``pythonpath`` first on its path: an earlier commit's package)."""
    return timed([sys.executable, "-m", "ldhmm.cli", *argv], check=False, env=_env(pythonpath))


def _loaded(argv: list[str], pythonpath: Path | None = None) -> list[str]:
    code = (
        "import sys, contextlib, io\nfrom ldhmm.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        f"    try:\n        main({argv!r})\n    except SystemExit:\n        pass\n"
        "print('\\n'.join(sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, env=_env(pythonpath)
    ).stdout.split()
    return [h for h in HEAVY if any(m == h or m.startswith(h + ".") for m in out)]


def _medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per command (default 5)")
    parser.add_argument("--commands", nargs="+", default=list(COMMANDS), choices=COMMANDS, metavar="CMD")
    parser.add_argument("--before", metavar="REF", help="also run the commit REF, interleaved")
    parser.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "ldhmm-bench-trees", help="REF's tree"
    )
    parser.add_argument(
        "--floor", action="store_true", help="first the floor: numpy, numba and a cached kernel, alone"
    )
    args = parser.parse_args(argv)
    earlier = None
    if args.before:
        args.cache.mkdir(parents=True, exist_ok=True)
        earlier = earlier_tree(args.before, args.cache)
    print(f"load average {os.getloadavg()[0]:.1f}; {args.repeats} runs per command, medians")
    if args.floor:
        with tempfile.TemporaryDirectory() as tmp:
            print_floor(Path(tmp), args.repeats)
    if earlier is None:
        print("| command | wall s | CPU s | heavy libraries loaded |\n|---|---|---|---|")
    else:
        print(
            f"| command | {args.before}: CPU s | this: CPU s | {args.before}: wall s | this: wall s "
            f"| loaded by {args.before} | loaded by this |\n|---|---|---|---|---|---|---|"
        )
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        _write_inputs(d)
        commands = _commands(d)
        for name in args.commands:
            label = "--help" if name == "help" else name
            after, before = [], []
            for _ in range(args.repeats):
                if earlier is not None:
                    before.append(run_once(commands[name], earlier))
                after.append(run_once(commands[name]))
            wall, cpu = _medians(after)
            heavy = ", ".join(_loaded(commands[name])) or "-"
            if earlier is None:
                print(f"| `ldhmm {label}` | {wall:.2f} | {cpu:.2f} | {heavy} |", flush=True)
                continue
            old_wall, old_cpu = _medians(before)
            old_heavy = ", ".join(_loaded(commands[name], earlier)) or "-"
            print(
                f"| `ldhmm {label}` | {old_cpu:.2f} | {cpu:.2f} | {old_wall:.2f} | {wall:.2f} "
                f"| {old_heavy} | {heavy} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
