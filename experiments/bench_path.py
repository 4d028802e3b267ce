"""Benchmark: fitting along K, does the best training ELBO ever fall, and which start holds it.

Two parts, each one table:

- a paper subset with a hold-out (the training set of ``ldhmm fit --holdout FRACTION --seed
  SEED``: :func:`ldhmm.cli.fit_path.holdout_split`), ``LDHMM.fit_path(train, K range,
  n_symbols=V, seed=SEED, guide=G)``: each K's best training ELBO, the start of its kept run
  (``restart``, ``split:k``, ``continued``) and the seconds since the path began;
- ``--random-configs N`` models drawn at random (K* 2..5, V 3..20, every concentration one value
  in 0.2..20 log-uniform with A's diagonal 4x, 60-200 sequences of length 5..100), a path over
  K = 2..5 each with the defaults: whether it falls (relative tolerance 1e-6) and the starts kept.

::

    python -m ldhmm.experiments.bench_path --data-dir ../shared/data --dataset entree \\
        --holdout 0.2 --states 2 8 --guides pf ff --random-configs 12
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ..cli.fit_path import holdout_split
from ..data import load_paper_subset, resolve_data_dir
from ..models import LDHMM

__all__ = ["main", "random_model", "falls"]

#: Relative tolerance of "does not fall" (the issue's).
RTOL = 1e-6


def falls(elbos: list[float]) -> list[int]:
    """Positions ``i`` (into ``elbos``) where the path falls from ``i - 1``."""
    return [i for i in range(1, len(elbos)) if elbos[i] < elbos[i - 1] - RTOL * abs(elbos[i - 1])]


def random_model(config: int):
    """Configuration ``config``'s true model and its training sequences (seeded by it)."""
    rng = np.random.default_rng(100 + config)
    K, V = int(rng.integers(2, 6)), int(rng.integers(3, 21))
    conc = float(np.exp(rng.uniform(np.log(0.2), np.log(20.0))))
    alpha_A = np.full((K, K), conc) + np.eye(K) * conc * 3
    beta = rng.gamma(conc, 1.0, size=(K, V)) + 0.05
    truth = LDHMM.from_hyperparameters(np.full(K, conc), alpha_A, beta)
    n = int(rng.integers(60, 200))
    seqs = truth.sample(n, lengths=rng.integers(5, 100, size=n), seed=config)
    return (K, V, conc), seqs


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--dataset", choices=("entree", "msnbc", "none"), default="entree")
    parser.add_argument("--n-sequences", type=int, default=None, help="a seeded sample of the subset")
    parser.add_argument("--holdout", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--states", type=int, nargs=2, default=[2, 8], metavar=("FIRST", "LAST"))
    parser.add_argument("--guides", nargs="+", choices=("pf", "ff"), default=["pf", "ff"])
    parser.add_argument("--random-configs", type=int, default=0)
    args = parser.parse_args(argv)
    states = range(args.states[0], args.states[1] + 1)
    if args.dataset != "none":
        db = load_paper_subset(args.dataset, resolve_data_dir(args.data_dir), n=args.n_sequences)
        train_idx, _ = holdout_split(len(db), args.holdout, args.seed)
        train = [db.sequences[i] for i in train_idx]
        print(f"{args.dataset}: {len(train)} training sequences ({sum(map(len, train))} tokens)")
        print("| guide | K | training ELBO | start | seconds |")
        print("|---|---|---|---|---|")
        for guide in args.guides:
            start = time.perf_counter()

            def row(K, model, guide=guide, start=start):
                elbo = float(model.elbo_history_[-1])
                seconds = time.perf_counter() - start
                print(f"| {guide} | {K} | {elbo:.4f} | {model.path_start_} | {seconds:.0f} |", flush=True)

            LDHMM.fit_path(train, states, n_symbols=db.n_symbols, seed=args.seed, guide=guide, callback=row)
    if args.random_configs:
        print(
            "| config | K*, V, concentration | sequences | guide | training ELBO, K = 2..5 | starts | falls |"
        )
        print("|---|---|---|---|---|---|---|")
        for config in range(args.random_configs):
            (K, V, conc), seqs = random_model(config)
            for guide in args.guides:
                path = LDHMM.fit_path(seqs, range(2, 6), n_symbols=V, seed=config, guide=guide)
                elbos = [float(m.elbo_history_[-1]) for m in path.values()]
                kept = ", ".join(m.path_start_ for m in path.values())
                fell = ", ".join(str(2 + i) for i in falls(elbos))
                fell = f"at K = {fell}" if fell else "no"
                print(
                    f"| {config} | {K}, {V}, {conc:.2f} | {len(seqs)} | {guide} | "
                    f"{', '.join(f'{e:.2f}' for e in elbos)} | {kept} | {fell} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
