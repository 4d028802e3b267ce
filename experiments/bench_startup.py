"""How long ``ldhmm`` takes to start: each command run in a fresh interpreter, its wall and CPU time.

``python -m ldhmm.experiments.bench_startup [--repeats 5] [--commands help score ...]`` writes a
tiny model and log into a temporary directory, runs ``python -m ldhmm.cli ...`` for each command
``--repeats`` times, and prints one Markdown row per command: the median wall seconds, the
median CPU seconds (user + system of the child process, the better measure on a loaded
machine), and the heavy libraries the command's interpreter holds at its end (from a separate
run of the same command in process). ``--help`` of a command measures its imports alone; the
``score`` row reads and scores 5 sequences, so nearly all of it is imports too.
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

from ..models import LDHMM

__all__ = ["COMMANDS", "HEAVY", "run_once", "main"]

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


def run_once(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of ``python -m ldhmm.cli ARGV`` in a fresh interpreter."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ldhmm.cli", *argv], capture_output=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _loaded(argv: list[str]) -> list[str]:
    code = (
        "import sys, contextlib, io\nfrom ldhmm.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        f"    try:\n        main({argv!r})\n    except SystemExit:\n        pass\n"
        "print('\\n'.join(sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    ).stdout.split()
    return [h for h in HEAVY if any(m == h or m.startswith(h + ".") for m in out)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per command (default 5)")
    parser.add_argument("--commands", nargs="+", default=list(COMMANDS), choices=COMMANDS, metavar="CMD")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}; {args.repeats} runs per command, medians")
    print("| command | wall s | CPU s | heavy libraries loaded |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        _write_inputs(d)
        commands = _commands(d)
        for name in args.commands:
            runs = [run_once(commands[name]) for _ in range(args.repeats)]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            label = "--help" if name == "help" else name
            heavy = ", ".join(_loaded(commands[name])) or "-"
            print(f"| `ldhmm {label}` | {wall:.2f} | {cpu:.2f} | {heavy} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
