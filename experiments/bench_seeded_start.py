"""Benchmark: one start seeded on the K most frequent symbols against the default restarts.

For each K, ``LDHMM(K, n_symbols=V, seed=SEED)`` fitted with the defaults (its ``n_init``
restarts) and fitted once from :func:`ldhmm.experiments.fit_quality.symbol_seeded_start`, on a
paper subset; one row per K: the training ELBO per token of each, the best and worst restart,
and the seconds. A candidate start measured (docs/math.md, "Where the defaults still fail"), not
one the estimator uses::

    python -m ldhmm.experiments.bench_seeded_start --data-dir ../shared/data --dataset entree \
        --states 2 3 4 5 6
    python -m ldhmm.experiments.bench_seeded_start --data-dir ../shared/data --dataset msnbc \
        --n-sequences 3000 --states 4 8
"""

from __future__ import annotations

import argparse
import time

from ..data import load_paper_subset, resolve_data_dir
from ..models import LDHMM
from .fit_quality import symbol_seeded_start

__all__ = ["main"]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--dataset", choices=("entree", "msnbc"), default="entree")
    parser.add_argument("--n-sequences", type=int, default=None, help="a seeded sample of the subset")
    parser.add_argument("--states", type=int, nargs="+", default=[2, 3, 4, 5, 6])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    db = load_paper_subset(args.dataset, resolve_data_dir(args.data_dir), n=args.n_sequences)
    seqs, V = list(db.sequences), db.n_symbols
    tokens = sum(len(s) for s in seqs)
    print(f"{args.dataset}: {len(seqs)} sequences, {tokens} tokens; training ELBO per token")
    print("| K | default | its restarts (best, worst) | seconds | seeded start | seconds | seeded wins |")
    print("|---|---|---|---|---|---|---|")
    for K in args.states:
        start = time.perf_counter()
        default = LDHMM(K, n_symbols=V, seed=args.seed).fit(seqs)
        default_seconds = time.perf_counter() - start
        start = time.perf_counter()
        seeded = LDHMM(K, n_symbols=V, seed=args.seed)
        seeded.fit(seqs, init_params=symbol_seeded_start(seqs, K, V).params_)
        seeded_seconds = time.perf_counter() - start
        runs = [h[-1] / tokens for h in default.restart_elbo_histories_]
        a, b = default.elbo_history_[-1] / tokens, seeded.elbo_history_[-1] / tokens
        print(
            f"| {K} | {a:.5f} | {max(runs):.5f}, {min(runs):.5f} | {default_seconds:.1f} | {b:.5f} | "
            f"{seeded_seconds:.1f} | {'yes' if b > a else 'no'} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
