"""Benchmark: the compiled E-step's sweeps and a whole fit, this checkout against an earlier commit.

For the kernel's changes that must not move any number: every run of the two versions is its
own process, the versions alternate (their order flipping between repeats), and medians are
reported. Each run, after an untimed warm-up of every configuration (numba's caches loaded),
times on the sequences of ``--data``:

* ``cold``: one PF or FF sweep of every bucket from the prior (``e_step_bucket(bucket, params,
  guide, None, max_iter=1)``, parameters ``init_parameters(LDHMM_SHARING, K, V, seed=0)``), at
  every K of ``--states``; ``warm``: one sweep from each bucket's state after five sweeps (the
  unit every EM iteration after the first repeats). Medians of ``--inner`` runs;
* ``fit``: ``LDHMM(--fit-states, n_symbols=V, seed=0, n_init=1).fit(sequences)`` (the defaults
  otherwise), wall and CPU seconds, and those inside the compiled E-step (``fused_e_step``), EM
  iterations and the final ELBO (the same bits before and after, or the change moved numbers);
  then one ``warm`` PF and FF sweep at the fitted hyper-parameters (``fitted`` rows), where
  learned sparse priors leave many expected counts too small to change ``prior + counts``.

The earlier commit runs from ``git archive`` of it, laid out as the installed package and put
first on ``PYTHONPATH`` of its processes, with this file copied in to drive it. Run::

    NUMBA_NUM_THREADS=2 python -m ldhmm.experiments.bench_sweeps --data-dir ../shared/data --before HEAD~1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from ..inference import LDHMM_SHARING, e_step_bucket, init_parameters, make_buckets
from ..inference.cavi import expectation
from ..inference.cavi.guides import resolve_guide
from ..models import LDHMM
from .earlier_commit import bench_sequences, earlier_tree, run_benchmark_process

__all__ = ["DATASETS", "main"]


#: name -> what it loads.
DATASETS = {
    "msnbc-short": "the first --n-sequences MSNBC sequences of length >= 2",
    "msnbc": "the first --n-sequences sequences of the MSNBC paper subset (20..100 page views)",
    "entree": "the Entree paper subset (422 sessions)",
}


def _sweep_seconds(buckets, params, guide_name: str, warm: bool, inner: int) -> tuple[float, float]:
    """Median wall and CPU seconds of one sweep of every bucket (cold: from the prior; warm:
    from the state after five sweeps)."""
    guide = resolve_guide(guide_name)
    states = [e_step_bucket(b, params, guide, None, max_iter=5) for b in buckets] if warm else None
    walls, cpus = [], []
    for _ in range(inner):
        wall, cpu = time.perf_counter(), time.process_time()
        for i, b in enumerate(buckets):
            e_step_bucket(b, params, guide, states[i] if warm else None, max_iter=1)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def run_worker(config: dict) -> dict:
    """Every timing of one run, in this process."""
    seqs, V = bench_sequences(config["data"], config["data_dir"], config["n_sequences"])
    buckets = make_buckets(seqs)
    LDHMM(2, n_symbols=V, seed=0, n_init=1, max_iter=2).fit(seqs[:50])  # numba's caches loaded
    out = {}
    for K in config["states"]:
        params = init_parameters(LDHMM_SHARING, K, V, seed=0, dtype=torch.float64)
        for guide in ("pf", "ff"):
            _sweep_seconds(buckets[:1], params, guide, True, 1)  # warm-up
            for warm in (False, True):
                key = f"{guide} {'warm' if warm else 'cold'} K={K}"
                out[key], out[key + " cpu"] = _sweep_seconds(buckets, params, guide, warm, config["inner"])
    inside = {"wall": 0.0, "cpu": 0.0}
    fused = expectation.fused_e_step

    def timed(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return fused(*args, **kwargs)
        finally:
            inside["wall"] += time.perf_counter() - wall
            inside["cpu"] += time.process_time() - cpu

    expectation.fused_e_step = timed
    wall, cpu = time.perf_counter(), time.process_time()
    model = LDHMM(config["fit_states"], n_symbols=V, seed=0, n_init=1).fit(seqs)
    out["fit"] = time.perf_counter() - wall
    out["fit cpu"] = time.process_time() - cpu
    out["fit: in fused_e_step"] = inside["wall"]
    out["fit: in fused_e_step cpu"] = inside["cpu"]
    expectation.fused_e_step = fused
    out["fit iterations"] = int(model.n_iter_)
    out["fit elbo"] = float(model.elbo_history_[-1])
    for guide in ("pf", "ff"):
        key = f"{guide} fitted K={config['fit_states']}"
        out[key], out[key + " cpu"] = _sweep_seconds(buckets, model.params_, guide, True, config["inner"])
    return out


def _table(runs: dict) -> str:
    """Medians per timing, before and after, wall and CPU seconds, as a markdown table."""
    lines = [
        "| timing | wall before | wall after | after / before | CPU before | CPU after | after / before |",
        "|---|---|---|---|---|---|---|",
    ]

    def median(version, key):
        return statistics.median(r[key] for r in runs[version])

    for key in runs["before"][0]:
        if key.endswith(" cpu"):
            continue
        b, a = median("before", key), median("after", key)
        if key == "fit elbo":
            same = all(r[key] == runs["before"][0][key] for r in runs["before"] + runs["after"])
            lines.append(f"| {key} | {b:.6f} | {a:.6f} | {'same bits' if same else 'DIFFERENT'} | | | |")
        elif key == "fit iterations":
            lines.append(f"| {key} | {b:.0f} | {a:.0f} | | | | |")
        else:
            bc, ac = median("before", key + " cpu"), median("after", key + " cpu")
            lines.append(
                f"| {key} | {b:.3f} s | {a:.3f} s | {a / b:.2f} | {bc:.3f} s | {ac:.3f} s | {ac / bc:.2f} |"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=os.environ.get("LDHMM_DATA"), help="UCI data (default $LDHMM_DATA)")
    p.add_argument("--data", default="msnbc-short", choices=sorted(DATASETS))
    p.add_argument("--n-sequences", type=int, default=3000)
    p.add_argument("--states", type=int, nargs="+", default=[2, 4, 8, 16], help="K of the sweep timings")
    p.add_argument("--fit-states", type=int, default=8, help="K of the whole fit")
    p.add_argument("--before", default="HEAD", help="the commit to compare with (default HEAD)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each version (processes)")
    p.add_argument("--inner", type=int, default=3, help="timed sweeps per configuration and run")
    p.add_argument("--cache", default=None, help="where the earlier commit is unpacked (default: a temp dir)")
    p.add_argument("--json", default=None, help="also write every run's numbers to this file")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(run_worker(json.loads(args.worker))))
        return 0
    config = {
        "data": args.data,
        "data_dir": args.data_dir,
        "n_sequences": args.n_sequences,
        "states": args.states,
        "fit_states": args.fit_states,
        "inner": args.inner,
    }
    cache = Path(args.cache) if args.cache else Path(tempfile.mkdtemp(prefix="bench_sweeps-"))
    cache.mkdir(parents=True, exist_ok=True)
    before = earlier_tree(args.before, cache, Path(__file__))
    runs = {"before": [], "after": []}
    loads = [os.getloadavg()[0]]
    for repeat in range(args.repeats):
        for version in ("before", "after") if repeat % 2 == 0 else ("after", "before"):
            run = run_benchmark_process(
                "ldhmm.experiments.bench_sweeps", config, before if version == "before" else None
            )
            runs[version].append(run)
            loads.append(os.getloadavg()[0])
            print(
                f"repeat {repeat + 1} {version}: fit {run['fit']:.1f} s wall, "
                f"{run['fit cpu']:.1f} s CPU, in fused_e_step {run['fit: in fused_e_step']:.1f} s; "
                f"1-minute load {loads[-1]:.1f}",
                flush=True,
            )
    threads = os.environ.get("NUMBA_NUM_THREADS", "numba's default")
    print(
        f"\n{args.data} ({len(bench_sequences(args.data, args.data_dir, args.n_sequences)[0])} sequences), "
        f"medians of {args.repeats} runs, NUMBA_NUM_THREADS {threads}, before = {args.before}; "
        f"1-minute load average {min(loads):.1f}..{max(loads):.1f} on {os.cpu_count()} CPUs\n"
    )
    print(_table(runs))
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
