"""Benchmark: the symbol-seeded start (v4 defaults) against the restarts alone (v3.1).

For each K, ``LDHMM(K, n_symbols=V, seed=SEED)`` fitted with ``seeded_start="none"`` (the
``n_init`` restarts alone, v3.1) and with the default ``"symbols"`` (one more start, each state's
emission row seeded on one of the K most frequent symbols; docs/math.md, "Restarts and
initialization"), on a paper subset; with ``--path`` both fitted along K
(:meth:`ldhmm.models.LDHMM.fit_path`, as the harness fits). One row per K: the training ELBO per
token of each, where the kept run started, the seconds and the difference::

    python -m ldhmm.experiments.bench_seeded_start --data-dir ../shared/data --dataset entree \\
        --states 2 3 4 5 6
    python -m ldhmm.experiments.bench_seeded_start --data-dir ../shared/data --dataset msnbc \\
        --n-sequences 3000 --states 4 8
    python -m ldhmm.experiments.bench_seeded_start --data-dir ../shared/data --dataset entree \\
        --states 2 3 4 5 6 7 8 --path
"""

from __future__ import annotations

import argparse
import time

from ..data import load_paper_subset, resolve_data_dir
from ..models import LDHMM

__all__ = ["main"]

#: The two settings compared, in the table's order.
SETTINGS = ("none", "symbols")


def _fits(seqs, V: int, states: list, seed: int, seeded_start: str, path: bool, guide: str) -> dict:
    """{K: (model, seconds)}: independent fits, or a path's fits with the seconds of each K."""
    options = {"n_symbols": V, "seed": seed, "seeded_start": seeded_start, "guide": guide}
    if not path:
        out = {}
        for K in states:
            start = time.perf_counter()
            model = LDHMM(K, **options).fit(seqs)
            out[K] = (model, time.perf_counter() - start)
        return out
    marks = [time.perf_counter()]
    models = LDHMM.fit_path(seqs, states, callback=lambda *_: marks.append(time.perf_counter()), **options)
    return {K: (m, marks[i + 1] - marks[i]) for i, (K, m) in enumerate(models.items())}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--dataset", choices=("entree", "msnbc"), default="entree")
    parser.add_argument("--n-sequences", type=int, default=None, help="a seeded sample of the subset")
    parser.add_argument("--states", type=int, nargs="+", default=[2, 3, 4, 5, 6])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--guide", choices=("pf", "ff"), default="pf")
    parser.add_argument("--path", action="store_true", help="fit along K (fit_path), as the harness does")
    args = parser.parse_args(argv)
    db = load_paper_subset(args.dataset, resolve_data_dir(args.data_dir), n=args.n_sequences)
    seqs, V = list(db.sequences), db.n_symbols
    tokens = sum(len(s) for s in seqs)
    how = "along K (fit_path)" if args.path else "independent fits"
    print(
        f"{args.dataset}: {len(seqs)} sequences, {tokens} tokens; {args.guide.upper()}, {how}; "
        "training ELBO per token"
    )
    fits = {s: _fits(seqs, V, args.states, args.seed, s, args.path, args.guide) for s in SETTINGS}
    print(
        "| K | restarts alone (v3.1) | kept | seconds | with the seeded start (v4) | kept | seconds "
        "| v4 - v3.1 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for K in args.states:
        (a, sa), (b, sb) = fits["none"][K], fits["symbols"][K]
        ea, eb = a.elbo_history_[-1] / tokens, b.elbo_history_[-1] / tokens
        print(
            f"| {K} | {ea:.6f} | {a.start_kind_} | {sa:.1f} | {eb:.6f} | {b.start_kind_} | {sb:.1f} | "
            f"{eb - ea:+.6f} |",
            flush=True,
        )
    totals = [sum(s for _, s in fits[name].values()) for name in SETTINGS]
    print(f"seconds in all: v3.1 {totals[0]:.1f}, v4 {totals[1]:.1f} ({totals[1] / totals[0]:.2f}x)")


if __name__ == "__main__":
    main()
