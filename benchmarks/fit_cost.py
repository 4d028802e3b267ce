"""Benchmark: where a whole LDHMM fit spends its E-step work, and how it compares with hmmlearn.

For every (K, seed) it fits ``LDHMM(K, n_symbols=V, seed=seed, n_init=N, guide=G)`` with the
package defaults and prints one row: the final training ELBO per token, EM iterations, the
E-step work in *sequence-sweeps per sequence* (one sweep of one sequence's coordinate ascent;
the unit the compiled kernel repeats), split into the E-steps that run every start (the
first one and each refresh: ``starts``), those that run one start beside each sequence's warm
run (the rotating start: ``one start``) and the warm ones alone (``plain``), and CPU and wall
seconds. Work is counted, not timed, so the split holds on a busy machine too.

``--hmmlearn`` first fits hmmlearn's ``CategoricalHMM(K)`` to the same data until the relative
change of its total log-likelihood falls below the EM tolerance (1e-4), in the same process,
and reports each LDHMM fit's CPU time as a multiple of it. Run with ``NUMBA_NUM_THREADS=1`` for
a CPU-time comparison with the single-threaded hmmlearn::

    NUMBA_NUM_THREADS=1 python benchmarks/fit_cost.py --data-dir ../shared/data \\
        --dataset entree --states 2 4 6 --seeds 0 1 2 3
    NUMBA_NUM_THREADS=1 python benchmarks/fit_cost.py --data-dir ../shared/data \\
        --dataset msnbc --states 8 --hmmlearn
"""

from __future__ import annotations

import collections
import time

import numpy as np
from _common import benchmark_parser, print_table_header
from hmmlearn import base
from hmmlearn.hmm import CategoricalHMM

from ldhmm.data import load_dataset, load_paper_subset, resolve_data_dir
from ldhmm.experiments.datasets import synthetic_database
from ldhmm.inference.cavi import expectation
from ldhmm.inference.distributed import workers
from ldhmm.models import LDHMM

__all__ = ["DATASETS", "main", "instrument", "hmmlearn_fit", "hmmlearn_model", "sequences"]

#: ``--dataset`` name -> what :func:`sequences` loads (``--n-sequences N``: its first N sequences).
DATASETS = {
    "synthetic": "1,000 sequences of the built-in synthetic LDHMM (seed 0)",
    "entree": "the Entree paper subset (422 sessions)",
    "msnbc": "the MSNBC paper subset (20..100 page views)",
    "msnbc-short": "the MSNBC sequences of length >= 2",
}


def sequences(name: str, data_dir, n: int | None) -> tuple[list, int]:
    """(sequences, vocabulary size) of a data set of :data:`DATASETS`: its first ``n``
    sequences (all of them for None)."""
    if name == "synthetic":
        db = synthetic_database(1000, seed=0)
        return db.sequences[:n], len(db.vocabulary)
    if name in ("entree", "msnbc"):
        db = load_paper_subset(name, data_dir)
    elif name == "msnbc-short":
        db = load_dataset("msnbc", data_dir, min_length=2)
    else:
        raise ValueError(f"unknown data set {name!r}; known: {', '.join(DATASETS)}")
    return db.sequences[:n], len(db.vocabulary)


def instrument() -> collections.Counter:
    """Count sequence-sweeps of the compiled E-step, split by E-steps with every start
    (``starts``), with one (``one start``) and without (``plain``) (wraps the functions in place;
    returns the counter they add to)."""
    work = collections.Counter()
    compiled, e_step = expectation._e_step_compiled, workers.e_step

    def counting_compiled(*args, **kwargs):
        result = compiled(*args, **kwargs)
        work["sweeps"] += int(result["sweeps"].sum())
        return result

    def counting_e_step(*args, **kwargs):
        before = work["sweeps"]
        result = e_step(*args, **kwargs)
        n_starts = len(kwargs.get("starts") or ())
        kind = "plain" if not n_starts else "one start" if n_starts == 1 else "starts"
        work[kind] += work["sweeps"] - before
        work[kind + " calls"] += 1
        return result

    expectation._e_step_compiled = counting_compiled
    workers.e_step = counting_e_step
    return work


def hmmlearn_fit(
    seqs, K: int, V: int, tol: float = 1e-4, implementation: str = "log", seed: int = 0
) -> tuple[float, int]:
    """CPU seconds and iterations of hmmlearn's CategoricalHMM(K) to a relative tolerance."""
    seconds, model = hmmlearn_model(seqs, K, V, tol, implementation, seed)
    return seconds, model.monitor_.iter


def hmmlearn_model(seqs, K: int, V: int, tol: float = 1e-4, implementation: str = "log", seed: int = 0):
    """hmmlearn's CategoricalHMM(K, implementation=...) fitted until the relative change of its
    total log-likelihood falls below ``tol``: (CPU seconds, the fitted model)."""
    X = np.concatenate(seqs)[:, None]
    lengths = [len(s) for s in seqs]

    class Relative(base.ConvergenceMonitor):
        @property
        def converged(self):
            h = self.history
            return self.iter == self.n_iter or (len(h) >= 2 and abs(h[-1] - h[-2]) <= tol * abs(h[-1]))

    model = CategoricalHMM(K, n_iter=1000, random_state=seed, n_features=V, implementation=implementation)
    model.monitor_ = Relative(0.0, 1000, False)
    start = time.process_time()
    model.fit(X, lengths)
    return time.process_time() - start, model


def main(argv=None) -> int:
    p = benchmark_parser(__doc__)
    p.add_argument("--dataset", default="entree", choices=DATASETS, help="default: entree")
    p.add_argument("--n-sequences", type=int, default=None, help="the first N sequences only")
    p.add_argument("--states", type=int, nargs="+", default=[4])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--n-init", type=int, default=None, help="restarts (default: the package's)")
    p.add_argument("--guide", default="pf")
    p.add_argument("--hmmlearn", action="store_true")
    args = p.parse_args(argv)
    seqs, V = sequences(args.dataset, resolve_data_dir(args.data_dir), args.n_sequences)
    n_tokens = sum(map(len, seqs))
    LDHMM(2, n_symbols=V, seed=0, n_init=1, max_iter=2).fit(seqs[:50])  # numba's caches loaded
    work = instrument()
    options = {} if args.n_init is None else {"n_init": args.n_init}
    print(f"{args.dataset}: {len(seqs)} sequences, {n_tokens} tokens, V = {V}, guide {args.guide}, {options}")
    print_table_header(
        "| K | seed | ELBO/tok | iters | sweeps/seq | starts (E-steps) | one start (E-steps) | "
        "plain (E-steps) | CPU s | wall s |" + (" CPU / hmmlearn |" if args.hmmlearn else "")
    )
    for K in args.states:
        reference = hmmlearn_fit(seqs, K, V) if args.hmmlearn else None
        for seed in args.seeds:
            work.clear()
            cpu, wall = time.process_time(), time.perf_counter()
            model = LDHMM(K, n_symbols=V, seed=seed, guide=args.guide, **options).fit(seqs)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            M = len(seqs)
            row = (
                f"| {K} | {seed} | {model.elbo_history_[-1] / n_tokens:.6f} | {len(model.elbo_history_)} | "
                f"{work['sweeps'] / M:.0f} | {work['starts'] / M:.0f} ({work['starts calls']}) | "
                f"{work['one start'] / M:.0f} ({work['one start calls']}) | "
                f"{work['plain'] / M:.0f} ({work['plain calls']}) | {cpu:.1f} | {wall:.1f} |"
            )
            if reference is not None:
                row += f" {cpu / reference[0]:.2f}x ({reference[0]:.1f} s, {reference[1]} it) |"
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
