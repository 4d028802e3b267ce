"""Benchmark: the Dask fit's seconds per round and per partition at several data sizes, its
start-up, and what a straggler costs: the measurements behind the projection of
docs/operations.md.

For each ``--sizes`` N (default 10,000, 30,000 and 100,000): the first N MSNBC sequences written
as ``--partitions`` Parquet files that the workers read themselves, K = ``--states`` (8), PF, one
start, ``--iters`` EM iterations (tolerance 1e-4, the fit's default, so that the collapsed
M-step makes the rounds of a real fit), on one LocalCluster of ``--workers`` processes x 1 thread
(``NUMBA_NUM_THREADS=1``; the seconds to start it are printed), after a warm-up fit that imports
ldhmm and loads or compiles the kernels in every worker. Each partition's actor times its own
E-steps and M-step passes where it runs (:class:`TimedPartitionWorker`); the driver times each
round. Per size:

* start-up: the backend made (version check, placement, every partition reading and bucketing
  its files, all at once); the first iteration (every start of the E-step tried) and the median
  of the others;
* an E-step round and an M-step round (``count_sums``): driver wall seconds, medians, the first
  iteration's E-step left out; the same call's seconds inside each partition (median); the
  overhead of a round: the driver's seconds minus the busiest worker's (its partitions run one
  after the other), median over the rounds;
* rounds per EM iteration; the load average (1 minute) before and after.

Then a straggler: at ``--straggler-size`` (default the middle size) the same fit with one worker
made ``--slowdown`` times slower on purpose (each of its partitions' timed calls followed by a
sleep of ``slowdown - 1`` times its own seconds), against the same fit without. Last, the
projection to ``--project-sequences`` on ``--project-workers`` workers from a least-squares line
through the sizes (seconds of a round against tokens per worker). Seconds are wall clock: on a
loaded machine they are rough (the load average is printed beside them); the rounds are not.
Run::

    python benchmarks/dask_scale.py --data-dir DIR     # or with $LDHMM_DATA set
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import (
    add_dask_arguments,
    add_projection_arguments,
    benchmark_parser,
    print_table_header,
    projection_line,
)
from dask_iteration import timed_fit  # benchmarks/dask_iteration.py (the script's folder is on sys.path)

from ldhmm.data import load_msnbc, plan_partitions, write_partitioned
from ldhmm.inference import PFGuide, VariationalEM
from ldhmm.inference.distributed import dask_backend
from ldhmm.inference.distributed.workers import PartitionWorker
from ldhmm.models import LDHMM

__all__ = ["TimedPartitionWorker", "line_fit", "main", "round_overhead"]

#: The partition methods that make the fit's rounds (timed on the worker).
TIMED = ("e_step", "count_sums")


class TimedPartitionWorker(PartitionWorker):
    """A partition worker that keeps the wall seconds of each E-step and M-step pass where it
    runs (``timings()``: method -> seconds per call, in call order) and can be made a straggler
    (``set_slowdown(s)``: each timed call then sleeps ``s - 1`` times its own seconds after it;
    the recorded seconds include the sleep, as the driver waits for it)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.slowdown = 1.0
        self.call_seconds: dict[str, list[float]] = {m: [] for m in TIMED}

    def _timed(self, method: str, *args):
        start = time.perf_counter()
        found = getattr(super(), method)(*args)
        spent = time.perf_counter() - start
        if self.slowdown > 1:
            time.sleep((self.slowdown - 1) * spent)
        self.call_seconds[method].append(time.perf_counter() - start)
        return found

    def e_step(self, *args):
        return self._timed("e_step", *args)

    def count_sums(self, *args):
        return self._timed("count_sums", *args)

    def set_slowdown(self, factor: float) -> None:
        self.slowdown = float(factor)

    def timings(self) -> dict[str, list[float]]:
        return {m: list(v) for m, v in self.call_seconds.items()}


class TimedDaskBackend(dask_backend.DaskBackend):
    """The Dask backend with :class:`TimedPartitionWorker` actors."""

    worker_class = TimedPartitionWorker


def round_overhead(driver: list[float], per_partition: list[list[float]], where: list[str]) -> list[float]:
    """Each round's seconds beyond the busiest worker's work in it.

    Parameters
    ----------
    driver : list of float, shape (R,)
        The driver's wall seconds of each round.
    per_partition : list of lists of float, shape (P, R)
        Each partition's seconds of the same rounds (every round calls every partition once).
    where : list of str, shape (P,)
        Each partition's worker: a worker runs its partitions one after the other.

    Returns
    -------
    list of float, shape (R,): driver seconds - max over workers of their partitions' sum.
    """
    busy: dict[str, np.ndarray] = {}
    for seconds, worker in zip(per_partition, where):
        busy[worker] = busy.get(worker, 0.0) + np.asarray(seconds, dtype=float)
    busiest = np.max(np.stack(list(busy.values())), axis=0)
    return list(np.asarray(driver, dtype=float) - busiest)


def line_fit(x: list[float], y: list[float]) -> tuple[float, float]:
    """Least-squares ``y ~ a + b x`` over the points; (a, b). One point: (0, y / x). A negative
    slope (seconds that fall as the data grow: noise) is taken as none: (median of y, 0)."""
    if len(x) < 2:
        return 0.0, float(y[0]) / float(x[0])
    b, a = np.polyfit(np.asarray(x, dtype=float), np.asarray(y, dtype=float), 1)
    if b < 0:
        return float(statistics.median(y)), 0.0
    return float(a), float(b)


def _load() -> float:
    return os.getloadavg()[0]


def _measure(client, partitions, options, engine, params, slowdown: float = 1.0) -> dict:
    """One timed fit on the cluster; with ``slowdown`` > 1 the first worker's partitions are
    slowed (a straggler)."""
    load = _load()
    t0 = time.perf_counter()
    backend = TimedDaskBackend(client, partitions, options)
    startup = time.perf_counter() - t0
    where = [a._address for a in backend.actors]
    if slowdown > 1:
        for actor, address in zip(backend.actors, where):
            if address == where[0]:
                actor.set_slowdown(slowdown).result()
    times, run = timed_fit(engine, backend, params)
    timings = [actor.timings().result() for actor in backend.actors]
    found = {
        "load": (load, _load()),
        "startup": startup,
        "first": times[0],
        "per_iteration": statistics.median(times[1:]),
        "rounds": run.rounds,
        "n_iter": run.n_iter,
        "elbo": run.elbo_history[-1],
    }
    for method, skip in (("e_step", 1), ("count_sums", 0)):
        driver = run.round_seconds[method]
        parts = [t[method] for t in timings]
        found[method] = {
            "round": statistics.median(driver[skip:]),
            "partition": statistics.median(s for t in parts for s in t[skip:]),
            "overhead": statistics.median(round_overhead(driver, parts, where)[skip:]),
            # each worker's busy seconds in a round (its partitions one after the other), median:
            # the slowed worker's first
            "workers": [
                statistics.median(np.sum([t[skip:] for t, at in zip(parts, where) if at == w], axis=0))
                for w in sorted(set(where), key=where.index)
            ],
        }
    return found


def _row(n: int, tokens: int, m: dict) -> str:
    e, c = m["e_step"], m["count_sums"]
    return (
        f"| {n:,} ({tokens:,}) | {m['load'][0]:.1f} / {m['load'][1]:.1f} | {m['startup']:.1f} | "
        f"{m['first']:.1f} | {m['per_iteration']:.2f} | {' '.join(map(str, m['rounds']))} | "
        f"{e['round']:.3f} | {e['partition']:.3f} | {c['round']:.4f} | {c['partition']:.4f} | "
        f"{e['overhead']:.3f} / {c['overhead']:.4f} |"
    )


def _projection(points: list, n_workers: int, args) -> str:
    """Seconds per EM iteration at ``--project-sequences`` on ``--project-workers`` workers: a
    round's seconds as a line in tokens per worker through the measured sizes, extrapolated."""
    x = [tokens / n_workers for _, tokens, _ in points]
    e = line_fit(x, [m["e_step"]["round"] for _, _, m in points])
    c = line_fit(x, [m["count_sums"]["round"] for _, _, m in points])
    n, tokens, _ = points[-1]
    target = args.project_sequences * tokens / n / args.project_workers  # tokens per worker
    m_rounds = statistics.median(r - 1 for _, _, m in points for r in m["rounds"])
    fitted = (
        f"E-step round ~ {e[0]:.3f} s + {e[1] * 1e6:.2f} s per million tokens per worker; M-step round ~ "
        f"{c[0]:.4f} s + {c[1] * 1e6:.3f} s per million tokens per worker (least squares over the sizes)."
    )
    basis = f"{target:.3g} tokens per worker at this data's mean length"
    return fitted + "\n" + projection_line(args, basis, e[0] + e[1] * target, m_rounds, c[0] + c[1] * target)


def main(argv=None) -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    p.add_argument("--states", type=int, default=8)
    p.add_argument("--iters", type=int, default=5, help="EM iterations per fit (default 5)")
    add_dask_arguments(p)
    p.add_argument("--slowdown", type=float, default=2.0, help="the straggler's slowdown (default 2)")
    p.add_argument("--straggler-size", type=int, default=None, help="default: the middle of --sizes")
    add_projection_arguments(p)
    args = p.parse_args(argv)
    if args.iters < 2:  # the first iteration is reported apart from the median of the others
        p.error(f"--iters must be at least 2, got {args.iters}")
    if min(args.states, args.workers, args.partitions, *args.sizes) < 1 or args.slowdown < 1:
        p.error("--states, --workers, --partitions, --sizes and --slowdown must be at least 1")
    sizes = sorted(set(args.sizes))
    straggler_at = args.straggler_size or sizes[len(sizes) // 2]
    if straggler_at not in sizes:  # compared with the same size's fit without the straggler
        p.error(f"--straggler-size {straggler_at} is not one of --sizes {' '.join(map(str, sizes))}")
    db = load_msnbc(args.data_dir)
    V = db.n_symbols
    options = {"guide": PFGuide(), "n_symbols": V}
    engine = VariationalEM(PFGuide(), max_iter=args.iters, tol=1e-4, refresh_max=0)
    print(
        f"MSNBC, K = {args.states}, PF, {args.iters} EM iterations (tol 1e-4), {args.partitions} Parquet "
        f"partitions on {args.workers} workers x 1 thread; load average (1 min) {_load():.2f}, "
        f"{os.cpu_count()} CPUs",
        flush=True,
    )
    t0 = time.perf_counter()
    client, cluster = dask_backend.connect(None, args.workers, numba_threads=1)
    print(
        f"LocalCluster of {args.workers} worker processes started: {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    points, straggler = [], None
    try:
        with tempfile.TemporaryDirectory() as tmp:

            def fit_size(n: int, slowdown: float = 1.0):
                sub = db.subset(np.arange(min(n, len(db))))
                directory = Path(tmp) / f"parts-{n}"
                if not directory.exists():
                    write_partitioned(sub, directory, n_files=args.partitions)
                model = LDHMM(args.states, n_symbols=V, seed=0)
                model.n_symbols_ = V
                params = model.initial_parameters(sub.sequences)
                partitions = plan_partitions(directory, args.partitions)
                return len(sub), sub.n_tokens, _measure(client, partitions, options, engine, params, slowdown)

            t0 = time.perf_counter()
            warm = fit_size(min(500, sizes[0]))[2]
            print(
                f"warm-up fit (the workers import ldhmm and load or compile the kernels): "
                f"{time.perf_counter() - t0:.1f} s, its start-up {warm['startup']:.1f} s",
                flush=True,
            )
            print()
            print_table_header(
                "| N (tokens) | load avg before / after | start-up (s) | first iteration (s) "
                "| s / EM iteration (median of the rest) | rounds per iteration | E-step round (s) "
                "| E-step per partition (s) | M-step round (s) | M-step pass per partition (s) "
                "| overhead per round, E / M (s) |",
                flush=True,
            )
            for n in sizes:
                points.append(fit_size(n))
                print(_row(*points[-1]), flush=True)
                if n == straggler_at:
                    straggler = fit_size(n, args.slowdown)
    finally:
        client.close()
        cluster.close()
    if straggler is not None:
        n, tokens, slow = straggler
        base = next(m for size, _, m in points if size == n)
        same = slow["elbo"] == base["elbo"] and slow["n_iter"] == base["n_iter"]
        print(f"\nstraggler: one of {args.workers} workers {args.slowdown:g}x slower, N = {n:,}")
        print(_row(n, tokens, slow))
        print(
            f"s / EM iteration {slow['per_iteration']:.2f} against {base['per_iteration']:.2f} "
            f"(+{slow['per_iteration'] - base['per_iteration']:.2f} s, "
            f"{slow['per_iteration'] / base['per_iteration']:.2f}x); "
            f"E-step round {slow['e_step']['round']:.3f} s "
            f"against {base['e_step']['round']:.3f} s; the model (s - 1) x E-step round predicts "
            f"+{(args.slowdown - 1) * base['e_step']['round']:.3f} s per E-step round; same fit: {same}"
        )
        busy = ", ".join(f"{b:.3f}" for b in slow["e_step"]["workers"])
        print(
            f"E-step seconds per round on each worker (the slowed one first): {busy}; without the "
            f"straggler: {', '.join(f'{b:.3f}' for b in base['e_step']['workers'])}"
        )
    print()
    print(_projection(points, args.workers, args))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
