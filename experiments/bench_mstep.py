"""Benchmark: the collapsed M-step of this checkout against an earlier commit's, in whole fits.

Each fit is ``LDHMM(K, n_symbols=V, seed=0, n_init=1).fit(sequences)`` with the defaults
(EM tolerance 1e-4, at most 100 iterations), timed after a small warm-up fit in the same
process (numba's caches loaded). For every (data set, K) it reports, before (the commit
``--before``, default ``HEAD``) and after (this working tree):

* ``M s``: seconds in :func:`ldhmm.inference.cavi.maximization.m_step` (gathering the counts
  included), and ``fit s``: the whole fit;
* ``passes``: passes over one group's counts (pi, A or B) in the fit, and ``rounds/it``:
  rounds of the collapsed M-step per EM iteration (a round is one ``count_sums`` call of the
  driver: a synchronous round over the partitions on a cluster; the E-step adds one);
* ``ELBO/tok``: the final training ELBO per token, and its change ``after - before``.

The earlier commit runs from ``git archive`` of it, laid out as the installed package (its
sub-packages under ``src/ldhmm``) and put first on ``PYTHONPATH`` of the process that fits,
with this file copied in to drive it: the same driver, the other code. Every fit is its own
process; the before and after fits of a configuration run one after the other (their order
alternating between repeats), ``--repeats`` times; medians are reported. Run::

    python -m ldhmm.experiments.bench_mstep --data-dir ../shared/data
    NUMBA_NUM_THREADS=1 python -m ldhmm.experiments.bench_mstep --data-dir ../shared/data --repeats 3
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

import numpy as np

from ..inference import em
from ..inference.distributed import workers
from ..models import LDHMM
from .earlier_commit import bench_sequences, earlier_tree, run_benchmark_process

__all__ = ["DATASETS", "main"]


#: name -> what it loads (``--msnbc-n`` sequences for the MSNBC samples).
DATASETS = {
    "synthetic": "1,000 sequences of the built-in synthetic LDHMM (seed 0)",
    "entree": "the Entree paper subset (422 sessions)",
    "msnbc": "the first --msnbc-n sequences of the MSNBC paper subset (20..100 page views)",
    "msnbc-short": "the first --msnbc-n MSNBC sequences of length >= 2",
}


def _instrument() -> dict:
    """Count the M-step's rounds and group passes and time it, whatever the checkout's
    ``count_sums`` signature (one group per call before, every group in one call after)."""
    counts = {"m_seconds": 0.0, "rounds": 0, "passes": 0}
    call, m_step = workers.LocalBackend.call, em.m_step

    def counting_call(self, method, *args, **kwargs):
        if method == "count_sums":
            counts["rounds"] += 1
            rows = [True] if isinstance(args[0], str) else args[1].values()  # one group, or a dict of them
            counts["passes"] += sum(bool(np.any(r)) for r in rows)
        return call(self, method, *args, **kwargs)

    def timed_m_step(*args, **kwargs):
        start = time.perf_counter()
        try:
            return m_step(*args, **kwargs)
        finally:
            counts["m_seconds"] += time.perf_counter() - start

    workers.LocalBackend.call = counting_call
    em.m_step = timed_m_step
    return counts


def run_fit(name: str, K: int, data_dir, msnbc_n: int) -> dict:
    """One timed fit in this process (after a warm-up fit) and what it measured."""
    seqs, V = bench_sequences(name, data_dir, msnbc_n)
    LDHMM(2, n_symbols=V, seed=0, n_init=1, max_iter=2).fit(seqs[:50])  # numba's caches loaded
    counts = _instrument()
    start = time.perf_counter()
    model = LDHMM(K, n_symbols=V, seed=0, n_init=1).fit(seqs)
    seconds = time.perf_counter() - start
    n_tokens = sum(len(s) for s in seqs)
    return {
        "fit_seconds": seconds,
        "m_seconds": counts["m_seconds"],
        "rounds": counts["rounds"],
        "passes": counts["passes"],
        "n_iter": int(model.n_iter_),
        "elbo_per_token": float(model.elbo_history_[-1]) / n_tokens,
    }


def _table(results: dict) -> str:
    """Medians per (data set, K) and version, as a markdown table."""
    header = (
        "| data | K | M s before | M s after | passes before | passes after | rounds/it before "
        "| rounds/it after | iters before | iters after | fit s before | fit s after "
        "| ELBO/tok before | ELBO/tok after | after - before |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for (name, K), runs in results.items():
        med = {}
        for version in ("before", "after"):
            rs = runs[version]
            med[version] = {
                key: statistics.median(r[key] for r in rs)
                for key in ("m_seconds", "passes", "fit_seconds", "n_iter", "elbo_per_token")
            }
            med[version]["rounds_per_iter"] = statistics.median(r["rounds"] / r["n_iter"] for r in rs)
        b, a = med["before"], med["after"]
        lines.append(
            f"| {name} | {K} | {b['m_seconds']:.2f} | {a['m_seconds']:.2f} | {b['passes']:.0f} "
            f"| {a['passes']:.0f} | {b['rounds_per_iter']:.1f} | {a['rounds_per_iter']:.1f} "
            f"| {b['n_iter']:.0f} | {a['n_iter']:.0f} | {b['fit_seconds']:.1f} | {a['fit_seconds']:.1f} "
            f"| {b['elbo_per_token']:.6f} | {a['elbo_per_token']:.6f} "
            f"| {a['elbo_per_token'] - b['elbo_per_token']:+.6f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=os.environ.get("LDHMM_DATA"), help="UCI data (default $LDHMM_DATA)")
    p.add_argument(
        "--configs",
        nargs="+",
        default=["synthetic:2,4,8", "entree:2,4,6,8", "msnbc:8", "msnbc-short:8"],
        help="DATA:K,K,... with DATA one of " + ", ".join(DATASETS),
    )
    p.add_argument("--before", default="HEAD", help="the commit to compare with (default HEAD)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--msnbc-n", type=int, default=3000, help="sequences of the MSNBC samples")
    p.add_argument("--cache", default=None, help="where the earlier commit is unpacked (default: a temp dir)")
    p.add_argument("--json", default=None, help="also write every run's numbers to this file")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker is not None:
        config = json.loads(args.worker)
        print(json.dumps(run_fit(config["data"], config["K"], config["data_dir"], config["msnbc_n"])))
        return 0
    configs = []
    for spec in args.configs:
        name, _, ks = spec.partition(":")
        if name not in DATASETS or not ks:
            p.error(f"--configs: expected DATA:K,K,... with DATA one of {', '.join(DATASETS)}, got {spec!r}")
        configs += [(name, int(k)) for k in ks.split(",")]
    cache = Path(args.cache) if args.cache else Path(tempfile.mkdtemp(prefix="bench_mstep-"))
    cache.mkdir(parents=True, exist_ok=True)
    before = earlier_tree(args.before, cache, Path(__file__))
    results = {c: {"before": [], "after": []} for c in configs}
    for repeat in range(args.repeats):
        for name, K in configs:
            config = {"data": name, "K": K, "data_dir": args.data_dir, "msnbc_n": args.msnbc_n}
            order = ("before", "after") if repeat % 2 == 0 else ("after", "before")
            for version in order:
                run = run_benchmark_process(
                    "ldhmm.experiments.bench_mstep", config, before if version == "before" else None
                )
                results[(name, K)][version].append(run)
                print(
                    f"repeat {repeat + 1} {name} K={K} {version}: fit {run['fit_seconds']:.1f} s, "
                    f"M-step {run['m_seconds']:.2f} s, {run['n_iter']} iterations, "
                    f"{run['rounds']} rounds, ELBO/token {run['elbo_per_token']:.6f}",
                    flush=True,
                )
    threads = os.environ.get("NUMBA_NUM_THREADS", "numba's default")
    print(f"\nmedians of {args.repeats} runs (NUMBA_NUM_THREADS: {threads}; before = {args.before})\n")
    print(_table(results))
    if args.json:
        Path(args.json).write_text(
            json.dumps([{"data": n, "K": k, **v} for (n, k), v in results.items()], indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
