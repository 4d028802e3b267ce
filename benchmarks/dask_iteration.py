"""Benchmark: the LDHMM fit in process and on a Dask cluster, seconds per EM iteration and memory.

Full MSNBC (989,818 sequences) by default, K = 8, PF guide, one start: ``--iters`` EM iterations
of :meth:`ldhmm.inference.em.VariationalEM.fit_backend` over

* ``local``: one partition in this process (the in-process fit; numba with ``--threads``);
* ``dask``: ``--partitions`` partitions as actors on a LocalCluster of ``--workers`` processes
  x 1 thread (``NUMBA_NUM_THREADS=1`` in each).

Each iteration's wall time is taken from the driver's callback; the first (which runs every
start of the E-step) is reported apart from the median of the others. Peak RSS: this process
(the driver; for ``local`` it holds everything) and, for ``dask``, each worker process. Also
printed: a projection to 100 M sequences from the measured numbers (memory per worker, rounds
and bytes per round). Run::

    python benchmarks/dask_iteration.py --data-dir DIR     # or with $LDHMM_DATA set
"""

from __future__ import annotations

import os
import pickle
import resource
import statistics
import sys
import time

import numpy as np
from _common import (
    add_dask_arguments,
    add_projection_arguments,
    benchmark_parser,
    print_table_header,
    projection_line,
)

from ldhmm.data import balanced_partitions, load_msnbc, plan_partitions, write_partitioned
from ldhmm.inference import PFGuide, VariationalEM, make_buckets
from ldhmm.inference.distributed.workers import LocalBackend, as_numpy_params
from ldhmm.models import LDHMM
from ldhmm.models.placement import dask_backend_module

__all__ = ["CountedRounds", "main", "timed_fit"]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _memory_mb() -> str:
    """This process's current and peak resident memory (VmRSS, VmHWM), MB."""
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024
    return f"{fields.get('VmRSS', float('nan')):.0f} now / {fields.get('VmHWM', float('nan')):.0f} peak"


def _peak_mb() -> float:
    """This process's peak resident memory (VmHWM), MB."""
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key == "VmHWM":
                return int(value.split()[0]) / 1024
    return float("nan")


class CountedRounds:
    """A backend whose synchronous rounds (``call``) are counted per EM iteration and timed
    (wall seconds of each round, by method: ``e_step``, ``count_sums``, ...)."""

    def __init__(self, backend):
        self.backend = backend
        self.per_iteration: dict = {}
        self.seconds: dict = {}

    def call(self, method, *args, iteration=0, step=""):
        if iteration:
            self.per_iteration[iteration] = self.per_iteration.get(iteration, 0) + 1
        t0 = time.perf_counter()
        found = self.backend.call(method, *args, iteration=iteration, step=step)
        if iteration:
            self.seconds.setdefault(method, []).append(time.perf_counter() - t0)
        return found

    def __getattr__(self, name):
        return getattr(self.backend, name)


def timed_fit(engine, backend, params) -> tuple[list, object]:
    """``engine.fit_backend`` over ``backend`` with its rounds counted and timed: (wall seconds of
    each EM iteration, the result with ``rounds`` per iteration and ``round_seconds`` by method)."""
    stamps = [time.perf_counter()]
    counted = CountedRounds(backend)
    result = engine.fit_backend(counted, params, callback=lambda it, elbo: stamps.append(time.perf_counter()))
    result.rounds = [counted.per_iteration[i] for i in sorted(counted.per_iteration)]
    result.round_seconds = counted.seconds
    return list(np.diff(stamps)), result


def _round_line(name: str, run, n_partitions: int, n_workers: int) -> str:
    """Median seconds of an E-step round (the first iteration's, which tries every start, left
    out) and of an M-step round (``count_sums``), and the E-step seconds per partition (each
    worker runs its partitions one after the other: round x workers / partitions)."""
    e = run.round_seconds.get("e_step", [])[1:] or run.round_seconds.get("e_step", [float("nan")])
    m = run.round_seconds.get("count_sums", [float("nan")])
    e_med, m_med = statistics.median(e), statistics.median(m)
    per_part = e_med * n_workers / n_partitions
    return (
        (
            f"{name}: E-step round {e_med:.3f} s (median of {len(e)}), M-step round {m_med:.4f} s (median "
            f"of {len(m)}), E-step per partition {per_part:.3f} s"
        ),
        e_med,
        m_med,
    )


def _projection(M: int, T: int, e_round: float, m_round: float, n_workers: int, rounds, args) -> str:
    """Seconds per EM iteration at ``--project-sequences`` on ``--project-workers`` workers,
    from the measured rounds: the E-step scales with tokens per worker, an M-step round is a
    fixed latency (its sums are O(K V) numbers, whatever the data)."""
    scale = args.project_sequences / M
    e_target = e_round * scale * n_workers / args.project_workers
    basis = (
        f"{T * scale / args.project_workers:.3g} tokens per worker at this data's mean length; the E-step "
        f"round measured here, {e_round:.3f} s, x {scale:.0f} (data) x {n_workers}/{args.project_workers} "
        f"(workers)"
    )
    return projection_line(args, basis, e_target, statistics.median(rounds) - 1, m_round)


def main(argv=None) -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--n", type=int, default=None, help="first N sequences only (default: all)")
    p.add_argument("--states", type=int, default=8)
    p.add_argument("--iters", type=int, default=4, help="EM iterations (at most, with --tol)")
    p.add_argument(
        "--tol",
        type=float,
        default=0.0,
        help="EM tolerance (default 0: --iters iterations; the M-step stops its passes on it too, so "
        "count rounds with a fit's tolerance, e.g. 1e-4)",
    )
    add_dask_arguments(p)
    p.add_argument("--backends", nargs="+", default=["local", "dask"])
    p.add_argument(
        "--parts-dir",
        default=None,
        help="dask: write the data as partitioned Parquet here first (ldhmm data export) and let "
        "the workers read it, so that the driver never holds the tokens (default: ship sequences)",
    )
    add_projection_arguments(p)
    args = p.parse_args(argv)

    db = load_msnbc(args.data_dir)
    seqs = db.sequences if args.n is None else db.sequences[: args.n]
    V = db.n_symbols
    model = LDHMM(args.states, n_symbols=V, seed=0)
    model.n_symbols_ = V
    params = model.initial_parameters(seqs)
    engine = VariationalEM(PFGuide(), max_iter=args.iters, tol=args.tol, refresh_max=0)
    M, T = len(seqs), int(sum(len(s) for s in seqs))
    print(f"MSNBC: {M} sequences, {T} tokens, V = {V}, K = {args.states}; {args.iters} EM iterations")
    print_table_header(
        "| backend | partitions | first iteration (s) | s / EM iteration (median of the rest) "
        "| driver peak RSS (MB) | worker peak RSS (MB) |"
    )
    rows = {}
    rounds = []
    worker_peak_mb = float("nan")
    if "local" in args.backends:
        backend = LocalBackend([engine.worker(make_buckets(seqs), V)])
        times, run = timed_fit(engine, backend, params)
        rows["local"] = times
        rounds = run.rounds
        local_run = run
        print(
            f"| local ({os.environ.get('NUMBA_NUM_THREADS', 'all')} numba threads) | 1 | {times[0]:.1f} | "
            f"{statistics.median(times[1:]):.2f} | {_peak_rss_mb():.0f} | - |",
            flush=True,
        )
        del backend
    if "dask" in args.backends:
        dask = dask_backend_module()  # Dask is an optional extra: imported when asked for
        driver_before = _peak_rss_mb()
        if args.parts_dir:
            write_partitioned(db, args.parts_dir, layout="sequences", n_files=args.partitions, overwrite=True)
            partitions = plan_partitions(args.parts_dir, args.partitions)
        else:
            parts = balanced_partitions([len(s) for s in seqs], args.partitions)
            partitions = [([seqs[i] for i in idx], idx) for idx in parts]
        options = {"guide": PFGuide(), "n_symbols": V}
        os.environ["NUMBA_NUM_THREADS"] = "1"  # inherited by the worker processes
        client, cluster = dask.connect(None, args.workers)
        try:
            t0 = time.perf_counter()
            backend = dask.DaskBackend(client, partitions, options)
            startup = time.perf_counter() - t0
            del partitions
            times, run = timed_fit(engine, backend, params)
            rounds = run.rounds
            dask_run = run
            rss = client.run(_memory_mb)
            worker_peak_mb = sum(client.run(_peak_mb).values())
            how = "workers read the files" if args.parts_dir else "sequences shipped from here"
            driver_note = f"{driver_before:.0f} before the cluster ({how}); {_memory_mb()}"
        finally:
            client.close()
            cluster.close()
        rows["dask"] = times
        print(
            f"| dask ({args.workers} workers x 1 thread) | {args.partitions} | {times[0]:.1f} | "
            f"{statistics.median(times[1:]):.2f} | {driver_note} | {'; '.join(rss.values())} |",
            flush=True,
        )
        print(
            f"\ndask start-up (all {args.partitions} partitions started at once, each reading its data): "
            f"{startup:.1f} s"
        )
    timed = {}
    if "local" in rows:
        line, *timed["local"] = _round_line("local", local_run, 1, 1)
        print(line)
    if "dask" in rows:
        line, *timed["dask"] = _round_line("dask", dask_run, args.partitions, args.workers)
        print(line)
    if "local" in rows and "dask" in rows:
        ratio = statistics.median(rows["dask"][1:]) / statistics.median(rows["local"][1:])
        print(f"\ndask / local, s per EM iteration: {ratio:.2f}x")
    sent = len(pickle.dumps(as_numpy_params(params)))
    K = args.states
    back = 8 * 3 * (1 + 3 * K + K * K + K * V)  # an M-step round: (entry, row) of pi, A and B
    print(
        f"\nper round: {sent} bytes of parameters to each partition, about {back} bytes of M-step sums "
        f"back; rounds per EM iteration (1 E-step + the collapsed M-step's passes), iterations "
        f"1..{len(rounds)}: {' '.join(map(str, rounds))} (median {statistics.median(rounds):g})."
    )
    # Bytes per sequence: the workers' peaks together (they hold every sequence and its state,
    # plus each process's libraries), else this process's peak.
    per_seq = (worker_peak_mb if "dask" in rows else _peak_rss_mb()) * 1e6 / max(M, 1)
    print(
        f"projection to 100 M sequences: about {100e6 / M:.0f}x this data; per-sequence state and tokens "
        f"stay on the workers (driver: parameters only), so memory per worker scales with "
        f"100 M / workers x (bytes per sequence measured here: {per_seq:.0f}, an upper bound: "
        f"{'workers' if 'dask' in rows else 'this process'}' peak RSS / sequences)."
    )
    kind = "dask" if "dask" in timed else "local"
    if kind in timed and rounds:
        workers = args.workers if kind == "dask" else 1
        print(_projection(M, T, *timed[kind], workers, rounds, args))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
