"""Benchmark: a registered model's whole fit in this checkout against an earlier commit's.

For every K it fits the registered model ``MODEL`` (its harness entry, ``**options`` added) on
a benchmark data set (:data:`ldhmm.experiments.earlier_commit.BENCH_DATASETS`), a new process
per fit, before
(the commit ``--before``) and after (this working tree), alternating their order between
repeats, after a small warm-up fit in the same process (numba's caches loaded). It prints
the median CPU and wall seconds of each side, their ratio, and whether the two fits are the
same to the last bit (a SHA-256 of the fitted parameters and the training objective's history),
so a change that is meant to be a pure speed-up shows it is one::

    NUMBA_NUM_THREADS=1 python -m ldhmm.experiments.bench_baseline_fit --data-dir ../shared/data \\
        --model HMM --dataset msnbc --n-sequences 28000 --states 2 4 6 --before HEAD~1 --repeats 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .. import baselines  # noqa: F401  (registers the baselines under their harness names)
from ..data import resolve_data_dir
from ..models.registry import get_spec
from .earlier_commit import BENCH_DATASETS, bench_sequences, earlier_tree, run_benchmark_process

__all__ = ["main", "fitted_digest"]


def fitted_digest(model) -> str:
    """SHA-256 of a fitted model's learned arrays (attributes ending in ``_`` that are float
    arrays or lists of floats), in the order of their names."""
    digest = hashlib.sha256()
    for name in sorted(vars(model)):
        value = getattr(model, name)
        if not name.endswith("_") or name.startswith("_"):
            continue
        if isinstance(value, list) and value and all(isinstance(v, float) for v in value):
            value = np.asarray(value)
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(value).tobytes())
    return digest.hexdigest()


def _worker(config: dict) -> dict:
    """One fit in this process (the side is whatever ``ldhmm`` this process imports); the
    model's harness name and fixed options from the registry, ``options`` added."""
    seqs, V = bench_sequences(config["dataset"], config["data_dir"], config["n_sequences"])
    spec = get_spec(config["model"])
    spec.make(2, V, 0, **config["options"]).fit(seqs[:50])  # compiled kernels loaded
    cpu, wall = time.process_time(), time.perf_counter()
    model = spec.make(config["states"], V, 0, **config["options"]).fit(seqs)
    return {
        "cpu": time.process_time() - cpu,
        "wall": time.perf_counter() - wall,
        "digest": fitted_digest(model),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--model", default="HMM", help="a registered model name (default HMM)")
    p.add_argument("--dataset", default="msnbc", choices=sorted(BENCH_DATASETS))
    p.add_argument("--n-sequences", type=int, default=None, help="the first N sequences (default all)")
    p.add_argument("--states", type=int, nargs="+", default=[4])
    p.add_argument("--options", default="{}", help="constructor options as JSON, e.g. '{\"n_init\": 1}'")
    p.add_argument("--before", default="HEAD", help="the earlier commit (default HEAD)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(json.loads(args.worker))))
        return 0
    options = json.loads(args.options)
    cache = Path(tempfile.gettempdir()) / "ldhmm-bench-baseline-fit"
    cache.mkdir(exist_ok=True)
    before = earlier_tree(args.before, cache, Path(__file__))
    module = "ldhmm.experiments.bench_baseline_fit"
    print(
        f"{args.model} {options} on {args.dataset} ({args.n_sequences or 'all'} sequences): "
        f"before = {args.before}, after = this checkout; medians of {args.repeats}, one process per fit"
    )
    print("| K | before CPU s | after CPU s | after / before | before wall s | after wall s | same fit |")
    print("|---|---|---|---|---|---|---|")
    for K in args.states:
        config = {
            "dataset": args.dataset,
            "data_dir": str(resolve_data_dir(args.data_dir)),
            "n_sequences": args.n_sequences,
            "model": args.model,
            "states": K,
            "options": options,
        }
        runs = {"before": [], "after": []}
        for r in range(args.repeats):
            sides = ("before", "after") if r % 2 == 0 else ("after", "before")
            for side in sides:
                runs[side].append(run_benchmark_process(module, config, before if side == "before" else None))
        med = {s: {k: statistics.median(x[k] for x in runs[s]) for k in ("cpu", "wall")} for s in runs}
        same = len({x["digest"] for x in runs["before"] + runs["after"]}) == 1
        print(
            f"| {K} | {med['before']['cpu']:.2f} | {med['after']['cpu']:.2f} | "
            f"{med['after']['cpu'] / med['before']['cpu']:.2f}x | {med['before']['wall']:.2f} | "
            f"{med['after']['wall']:.2f} | {'yes' if same else 'NO'} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
