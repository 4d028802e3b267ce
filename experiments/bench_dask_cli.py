"""Benchmark: ``ldhmm fit --backend dask --workers 2`` against the in-process ``ldhmm fit``, as a
user runs them (each a fresh ``python -m ldhmm.cli`` process: start-up, the LocalCluster and
the workers' imports included).

The first ``--n`` MSNBC sequences (default 100,000) written once as an ldhmm-sequences text
file; K = 8, one restart, ``--max-iter`` EM iterations at most (default 100, tol 1e-4: the
fit's own stopping rule). The two commands alternate (in, dask, in, dask, ...) ``--repeats``
times each (default 3), so that a change in the machine's load hits both alike; the table
gives every run's seconds, the median of each and the ratio dask / in-process (the goal:
<= 1.2x), and checks that both wrote the same model (ELBO history bit for bit: the same
partitions in both, ``--partitions``). Seconds are wall clock: run it on a quiet machine::

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

__all__ = ["main", "command_lines"]


def command_lines(data: Path, out: Path, args) -> dict[str, list[str]]:
    """The two ``ldhmm fit`` command lines, by label (each writes its own model file)."""
    fit = [
        sys.executable,
        "-m",
        "ldhmm.cli",
        "fit",
        str(data),
        "--states",
        str(args.states),
        "--restarts",
        "1",
    ]
    fit += ["--max-iter", str(args.max_iter), "--partitions", str(args.partitions), "--quiet"]
    return {
        "in process": fit + ["--out", str(out / "local.json")],
        f"dask --workers {args.workers}": fit
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
        print(f"MSNBC, first {len(db)} sequences ({db.n_tokens} tokens), K = {args.states}; interleaved runs")
        for r in range(args.repeats):
            for label, command in commands.items():
                t0 = time.perf_counter()
                run = subprocess.run(command, capture_output=True, text=True)
                seconds[label].append(time.perf_counter() - t0)
                if run.returncode != 0:
                    sys.exit(f"{label} failed (rc {run.returncode}): {run.stderr.strip()[-2000:]}")
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


if __name__ == "__main__":
    main()
