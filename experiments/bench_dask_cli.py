"""Benchmark: ``ldhmm fit --backend dask --workers 2`` against the in-process ``ldhmm fit``, as a
user runs them (each a fresh ``python -m ldhmm.cli`` process: start-up, the LocalCluster and
the workers' imports included).

The first ``--n`` MSNBC sequences (default 100,000) written once as an ldhmm-sequences text
file; K = 8, one restart, ``--max-iter`` EM iterations at most (default 100, tol 1e-4: the
fit's own stopping rule). The two commands alternate (in, dask, in, dask, ...) ``--repeats``
times each (default 3), so that a change in the machine's load hits both alike; the table
gives every run's seconds, the median of each and the ratio dask / in-process (the goal:
<= 1.2x), and checks that both wrote the same model (ELBO history bit for bit: the same
partitions in both, ``--partitions``). The in-process command runs with its rounds counted (a
counter on ``LocalBackend.call``, see :data:`COUNTING`: one synchronous call over the partitions
is one round; the Dask fit of the same model makes the same calls), so that the per-round
overhead is printed too: (median dask - median in process) / rounds. Seconds are wall clock:
run it on a quiet machine::

    python -m ldhmm.experiments.bench_dask_cli --data-dir DIR     # or with $LDHMM_DATA set
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..data import load_msnbc

__all__ = ["COUNTING", "command_lines", "main", "rounds_counted"]

#: ``python -c COUNTING fit ...`` is ``python -m ldhmm.cli fit ...`` with a counter on
#: ``LocalBackend.call`` (one round over the partitions per call), printed last as ``rounds N``.
COUNTING = """
import sys
from ldhmm.cli.main import main
from ldhmm.inference.distributed.workers import LocalBackend
rounds, call = [0], LocalBackend.call
def counted(self, *args, **kwargs):
    rounds[0] += 1
    return call(self, *args, **kwargs)
LocalBackend.call = counted
code = main(sys.argv[1:])
print(f"rounds {rounds[0]}")
sys.exit(code)
"""


def rounds_counted(stdout: str) -> int | None:
    """The ``rounds N`` line that :data:`COUNTING` prints last, or None."""
    lines = stdout.strip().splitlines()
    if lines and lines[-1].startswith("rounds "):
        return int(lines[-1].split()[1])
    return None


def command_lines(data: Path, out: Path, args) -> dict[str, list[str]]:
    """The two ``ldhmm fit`` command lines, by label (each writes its own model file); the
    in-process one counts its rounds (:data:`COUNTING`)."""
    fit = [
        "fit",
        str(data),
        "--states",
        str(args.states),
        "--restarts",
        "1",
    ]
    fit += ["--max-iter", str(args.max_iter), "--partitions", str(args.partitions), "--quiet"]
    return {
        "in process": [sys.executable, "-c", COUNTING] + fit + ["--out", str(out / "local.json")],
        f"dask --workers {args.workers}": [sys.executable, "-m", "ldhmm.cli"]
        + fit
        + ["--backend", "dask", "--workers", str(args.workers), "--out", str(out / "dask.json")],
    }


def _elbo_history(path: Path) -> list:
    return json.loads(path.read_text())["elbo_history"]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--n", type=int, default=100_000, help="first N MSNBC sequences (default 100000)")
    p.add_argument("--states", type=int, default=8)
    p.add_argument("--max-iter", type=int, default=100)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--partitions",
        type=int,
        default=4,
        help="partitions of both fits (default 4, the Dask default of 2 per worker): the same "
        "partitions give the same model",
    )
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    db = load_msnbc(args.data_dir)
    db = db.subset(list(range(min(args.n, len(db)))))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = tmp / "msnbc.txt"
        db.to_text(data)
        commands = command_lines(data, tmp, args)
        seconds: dict[str, list[float]] = {label: [] for label in commands}
        rounds = set()
        print(f"MSNBC, first {len(db)} sequences ({db.n_tokens} tokens), K = {args.states}; interleaved runs")
        for r in range(args.repeats):
            for label, command in commands.items():
                t0 = time.perf_counter()
                run = subprocess.run(command, capture_output=True, text=True)
                seconds[label].append(time.perf_counter() - t0)
                if run.returncode != 0:
                    sys.exit(f"{label} failed (rc {run.returncode}): {run.stderr.strip()[-2000:]}")
                rounds.add(rounds_counted(run.stdout))
                print(f"  run {r + 1}, {label}: {seconds[label][-1]:.1f} s", flush=True)
        same = _elbo_history(tmp / "local.json") == _elbo_history(tmp / "dask.json")
    base = statistics.median(seconds["in process"])
    print("\n| command | runs (s) | median (s) | / in process |")
    print("|---|---|---|---|")
    for label, values in seconds.items():
        median = statistics.median(values)
        runs = ", ".join(f"{v:.1f}" for v in values)
        print(f"| ldhmm fit ({label}) | {runs} | {median:.1f} | {median / base:.2f}x |")
    print(f"\nsame model (ELBO history bit for bit): {same}; goal: dask <= 1.2x in process")
    rounds.discard(None)
    n_rounds = rounds.pop() if len(rounds) == 1 else None  # every in-process run: the same fit
    if n_rounds and same:
        label = next(label for label in seconds if label != "in process")
        extra = statistics.median(seconds[label]) - base
        print(
            f"rounds of the fit (synchronous calls over the {args.partitions} partitions, counted in "
            f"process): {n_rounds}; per-round overhead of {label}: ({statistics.median(seconds[label]):.1f} "
            f"- {base:.1f}) s / {n_rounds} = {1e3 * extra / n_rounds:.1f} ms, at most (the whole "
            f"commands' difference, the cluster's start-up and the workers' imports included)"
        )
    else:
        print(f"per-round overhead not computed: rounds counted {sorted(rounds)}, same model: {same}")


if __name__ == "__main__":
    main()
