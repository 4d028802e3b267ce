"""Benchmark: ``ldhmm fit --backend dask --workers 2`` against the in-process ``ldhmm fit``, as a
user runs them (each a fresh ``python -m ldhmm.cli`` process: start-up, the LocalCluster and
the workers' imports included).

The first ``--n`` MSNBC sequences (default 100,000) written once as an ldhmm-sequences text
file; K = 8, one restart, ``--max-iter`` EM iterations at most (default 100, tol 1e-4: the
fit's own stopping rule). The two commands alternate (in, dask, in, dask, ...) ``--repeats``
times each (default 3), so that a change in the machine's load hits both alike; the table
gives every run's seconds, the median of each and the ratio dask / in-process (the goal:
<= 1.2x), and checks that both wrote the same model (ELBO history bit for bit: the same
partitions in both, ``--partitions``). Both run with their rounds counted and timed (one
synchronous call over the partitions is one round: a wrapper on the backend's ``call``, see
:data:`COUNTING`), so that the per-round overhead is printed too: (median seconds in the Dask
fit's rounds - median in the in-process fit's) / rounds, and the rest of the difference (the
cluster's start, the workers' imports, the partitions' start). Seconds are wall clock: run it
on a quiet machine::

    python benchmarks/dask_cli.py --data-dir DIR     # or with $LDHMM_DATA set
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import add_dask_arguments, benchmark_parser, print_table_header

from ldhmm.data import load_msnbc

__all__ = ["COUNTING", "command_lines", "main", "rounds_counted"]

#: ``python -c COUNTING fit ...`` is ``python -m ldhmm.cli fit ...`` with a wrapper on the
#: backend's ``call`` (``DaskBackend`` for ``--backend dask``, else ``LocalBackend``; one call is
#: one round over the partitions) that counts and times the rounds; printed last as
#: ``rounds N SECONDS``.
COUNTING = """
import sys, time
from ldhmm.cli.main import main
if "dask" in sys.argv:  # imported by the command anyway; not by the in-process one
    from ldhmm.inference.distributed.dask_backend import DaskBackend as Backend
else:
    from ldhmm.inference.distributed.workers import LocalBackend as Backend
rounds, seconds, call = [0], [0.0], Backend.call
def counted(self, *args, **kwargs):
    start = time.perf_counter()
    try:
        return call(self, *args, **kwargs)
    finally:
        rounds[0] += 1
        seconds[0] += time.perf_counter() - start
Backend.call = counted
code = main(sys.argv[1:])
print(f"rounds {rounds[0]} {seconds[0]:.6f}")
sys.exit(code)
"""


def rounds_counted(stdout: str) -> tuple[int, float] | None:
    """(rounds, seconds in them) from the ``rounds N SECONDS`` line that :data:`COUNTING`
    prints last, or None."""
    lines = stdout.strip().splitlines()
    if lines and lines[-1].startswith("rounds "):
        _, n, seconds = lines[-1].split()
        return int(n), float(seconds)
    return None


def command_lines(data: Path, out: Path, args) -> dict[str, list[str]]:
    """The two ``ldhmm fit`` command lines, by label (each writes its own model file), each
    with its rounds counted and timed (:data:`COUNTING`)."""
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
        f"dask --workers {args.workers}": [sys.executable, "-c", COUNTING]
        + fit
        + ["--backend", "dask", "--workers", str(args.workers), "--out", str(out / "dask.json")],
    }


def _elbo_history(path: Path) -> list:
    return json.loads(path.read_text())["elbo_history"]


def per_round_overhead(seconds: dict, rounds: dict, same: bool) -> str:
    """One line: the rounds of the fit and the Dask command's seconds per round beyond the
    in-process command's (medians of the seconds spent in rounds), and the rest of the two
    commands' difference.

    Parameters
    ----------
    seconds : dict
        Label -> wall seconds of each run; the in-process label is ``"in process"``.
    rounds : dict
        Label -> (rounds, seconds in rounds) of each run (None where not printed).
    same : bool
        Whether the two commands wrote the same model (then they made the same rounds).
    """
    counts = {n for found in rounds.values() for n, _ in filter(None, found)}
    if not same or len(counts) != 1 or any(None in found for found in rounds.values()):
        return f"per-round overhead not computed: rounds counted {rounds}, same model: {same}"
    n_rounds = counts.pop()
    local, dask = "in process", next(label for label in seconds if label != "in process")
    in_rounds = {label: statistics.median(t for _, t in found) for label, found in rounds.items()}
    extra = in_rounds[dask] - in_rounds[local]
    rest = statistics.median(seconds[dask]) - statistics.median(seconds[local]) - extra
    return (
        f"rounds of the fit (synchronous calls over the partitions): {n_rounds}; seconds in them "
        f"(median): {in_rounds[local]:.2f} in process, {in_rounds[dask]:.2f} {dask}; per-round overhead: "
        f"{1e3 * extra / n_rounds:.1f} ms; the rest of the commands' difference (the cluster's start, "
        f"the workers' imports, the partitions' start): {rest:.1f} s"
    )


def main(argv=None) -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--n", type=int, default=100_000, help="first N MSNBC sequences (default 100000)")
    p.add_argument("--states", type=int, default=8)
    p.add_argument("--max-iter", type=int, default=100)
    add_dask_arguments(
        p,
        partitions_help="partitions of both fits (default 4, the Dask default of 2 per worker): the same "
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
        rounds: dict[str, list] = {label: [] for label in commands}
        print(f"MSNBC, first {len(db)} sequences ({db.n_tokens} tokens), K = {args.states}; interleaved runs")
        for r in range(args.repeats):
            for label, command in commands.items():
                t0 = time.perf_counter()
                run = subprocess.run(command, capture_output=True, text=True)
                seconds[label].append(time.perf_counter() - t0)
                if run.returncode != 0:
                    sys.exit(f"{label} failed (rc {run.returncode}): {run.stderr.strip()[-2000:]}")
                rounds[label].append(rounds_counted(run.stdout))
                print(f"  run {r + 1}, {label}: {seconds[label][-1]:.1f} s", flush=True)
        same = _elbo_history(tmp / "local.json") == _elbo_history(tmp / "dask.json")
    base = statistics.median(seconds["in process"])
    print()
    print_table_header("| command | runs (s) | median (s) | / in process |")
    for label, values in seconds.items():
        median = statistics.median(values)
        runs = ", ".join(f"{v:.1f}" for v in values)
        print(f"| ldhmm fit ({label}) | {runs} | {median:.1f} | {median / base:.2f}x |")
    print(f"\nsame model (ELBO history bit for bit): {same}; goal: dask <= 1.2x in process")
    print(per_round_overhead(seconds, rounds, same))


if __name__ == "__main__":
    main()
