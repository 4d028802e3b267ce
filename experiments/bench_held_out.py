"""Benchmark: the held-out E-step's extra starts, their cost and what they gain.

For every guide and K it fits ``LDHMM(K, n_symbols=V, guide=G, seed=0, n_init=1)`` on the
training part of one fold of a paper subset, then scores the held-out part with the held-out
E-step as it is and with :data:`ldhmm.inference.cavi.expectation.HELD_OUT_EXTRA_STARTS` emptied
(the E-step before the ``"constant"`` and ``"smoothed"`` starts), alternating the two,
and prints one row: the held-out bound per token of each and the median CPU seconds::

    NUMBA_NUM_THREADS=1 python -m ldhmm.experiments.bench_held_out --data-dir ../shared/data \\
        --dataset entree --states 2 4 6
"""

from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np

from ..data import kfold_indices, load_paper_subset, resolve_data_dir
from ..inference.cavi import expectation
from ..models import LDHMM

__all__ = ["main", "extra_starts"]


@contextlib.contextmanager
def extra_starts(starts: tuple):
    """Run the held-out E-step with ``starts`` as its extra starts (restored on exit)."""
    saved = expectation.HELD_OUT_EXTRA_STARTS
    expectation.HELD_OUT_EXTRA_STARTS = tuple(starts)
    try:
        yield
    finally:
        expectation.HELD_OUT_EXTRA_STARTS = saved


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--dataset", choices=("entree", "msnbc"), default="entree")
    parser.add_argument("--n-sequences", type=int, default=None, help="a seeded sample of the subset")
    parser.add_argument("--states", type=int, nargs="+", default=[2, 4, 6])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    db = load_paper_subset(args.dataset, resolve_data_dir(args.data_dir), n=args.n_sequences)
    seqs = list(db.sequences)
    train_idx, test_idx = kfold_indices(len(seqs), 10, seed=0)[0]
    train, held = [seqs[i] for i in train_idx], [seqs[i] for i in test_idx]
    tokens = sum(len(s) for s in held)
    print(f"{args.dataset}: {len(train)} training, {len(held)} held-out sequences ({tokens} tokens)")
    print("| guide | K | bound/token before | after | CPU s before | after |")
    print("|---|---|---|---|---|---|")
    for guide in ("pf", "ff"):
        for K in args.states:
            model = LDHMM(K, n_symbols=db.n_symbols, guide=guide, seed=0, n_init=1).fit(train)
            runs = {"before": [], "after": []}
            for _ in range(args.repeats):
                for name, starts in (("before", ()), ("after", expectation.HELD_OUT_EXTRA_STARTS)):
                    with extra_starts(starts):
                        start = time.process_time()
                        score = model.score_samples(held).sum() / tokens
                        runs[name].append((time.process_time() - start, score))
            b, a = runs["before"], runs["after"]
            print(
                f"| {guide} | {K} | {b[0][1]:.5f} | {a[0][1]:.5f} "
                f"| {np.median([t for t, _ in b]):.2f} | {np.median([t for t, _ in a]):.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
