"""Benchmark: two sets of fitting settings side by side, by default the symbol-seeded start
(v4 defaults) against the restarts alone (v3.1).

For each K, ``LDHMM(K, n_symbols=V, seed=SEED, **BEFORE)`` and ``LDHMM(K, ..., **AFTER)``
(``--before``/``--after``, JSON; by default ``{"seeded_start": "none"}``, the ``n_init`` restarts
alone, against ``{}``, the defaults: one more start, each state's emission row seeded on one of
the K most frequent symbols; docs/math.md, "Restarts and initialization"), on a paper subset;
with ``--path`` both fitted along K (:meth:`ldhmm.models.LDHMM.fit_path`, as the harness fits).
One row per K: the training ELBO per token of each, where the kept run started, the CPU seconds
and the difference::

    python -m ldhmm.experiments.bench_seeded_start --data-dir ../shared/data --dataset entree \\
        --states 2 3 4 5 6
    python -m ldhmm.experiments.bench_seeded_start --data-dir ../shared/data --dataset msnbc \\
        --n-sequences 3000 --states 4 8
    python -m ldhmm.experiments.bench_seeded_start --data-dir ../shared/data --dataset entree \\
        --states 2 3 4 5 6 7 8 --path
    # one restart at each K of a path after the first (path_n_init) against the defaults
    python -m ldhmm.experiments.bench_seeded_start --data-dir ../shared/data --dataset msnbc \\
        --n-sequences 3000 --states 2 3 4 5 6 7 8 --path --before '{}' --after '{"path_n_init": 1}'
"""

from __future__ import annotations

import argparse
import json
import time

from ..data import load_paper_subset, resolve_data_dir
from ..models import LDHMM

__all__ = ["main"]


def _fits(seqs, V: int, states: list, seed: int, settings: dict, path: bool, guide: str) -> dict:
    """{K: (model, CPU seconds)}: independent fits, or a path's fits with the seconds of each K."""
    options = {"n_symbols": V, "seed": seed, "guide": guide, **settings}
    if not path:
        out = {}
        for K in states:
            start = time.process_time()
            model = LDHMM(K, **options).fit(seqs)
            out[K] = (model, time.process_time() - start)
        return out
    marks = [time.process_time()]
    models = LDHMM.fit_path(seqs, states, callback=lambda *_: marks.append(time.process_time()), **options)
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
    parser.add_argument("--before", type=json.loads, default={"seeded_start": "none"}, help="JSON settings")
    parser.add_argument("--after", type=json.loads, default={}, help="JSON settings (default: the defaults)")
    args = parser.parse_args(argv)
    db = load_paper_subset(args.dataset, resolve_data_dir(args.data_dir), n=args.n_sequences)
    seqs, V = list(db.sequences), db.n_symbols
    tokens = sum(len(s) for s in seqs)
    how = "along K (fit_path)" if args.path else "independent fits"
    print(
        f"{args.dataset}: {len(seqs)} sequences, {tokens} tokens; {args.guide.upper()}, {how}; "
        "training ELBO per token"
    )
    fits = [
        _fits(seqs, V, args.states, args.seed, o, args.path, args.guide) for o in (args.before, args.after)
    ]
    before, after = (json.dumps(o) for o in (args.before, args.after))
    print(f"| K | {before} | kept | CPU s | {after} | kept | CPU s | after - before |")
    print("|---|---|---|---|---|---|---|---|")
    for K in args.states:
        (a, sa), (b, sb) = fits[0][K], fits[1][K]
        ea, eb = a.elbo_history_[-1] / tokens, b.elbo_history_[-1] / tokens
        print(
            f"| {K} | {ea:.6f} | {a.start_kind_} | {sa:.1f} | {eb:.6f} | {b.start_kind_} | {sb:.1f} | "
            f"{eb - ea:+.6f} |",
            flush=True,
        )
    totals = [sum(s for _, s in f.values()) for f in fits]
    print(f"CPU seconds in all: before {totals[0]:.1f}, after {totals[1]:.1f} ({totals[1] / totals[0]:.2f}x)")


if __name__ == "__main__":
    main()
