"""Training ELBO against K on a real data set: does the restart policy keep the best bound
from falling as K grows?

A model with K + 1 states can imitate one with K (a state nobody visits), so the best training
ELBO per K should not fall by much as K grows; where it does, the fit stopped in a poorer
optimum. For every K this fits LDHMM with the defaults (``n_init`` restarts, FF started from
the PF fit) on all sequences of the data set and reports the final training ELBO per token; for
PF also every restart alone (the same starting points, one at a time: ``seed`` = each of
:meth:`ldhmm.models.LDHMM.restart_seeds`), so the spread between starts is visible.

    python -m ldhmm.experiments.elbo_vs_k --dataset entree [--states 2 3 4 5 6] [--guides pf ff]
        [--restarts 3] [--n-sequences N] [--data-dir DIR] [--quiet]
"""

from __future__ import annotations

import argparse
import time

from tqdm import tqdm

from ..data import load_paper_subset
from ..models import LDHMM

__all__ = ["fit_row", "falls", "main"]


def fit_row(seqs, n_symbols: int, K: int, guide: str, restarts: int, seed: int = 0) -> dict:
    """One K and guide: the default fit's final training ELBO per token, its seconds and EM
    iterations, and (PF) every restart's own final ELBO per token."""
    n_tokens = sum(len(s) for s in seqs)
    start = time.perf_counter()
    model = LDHMM(K, n_symbols=n_symbols, guide=guide, n_init=restarts, seed=seed).fit(seqs)
    row = {
        "K": K,
        "guide": guide,
        "elbo": float(model.elbo_history_[-1]) / n_tokens,
        "seconds": time.perf_counter() - start,
        "iters": int(model.n_iter_),
        "restarts": [],
    }
    if guide == "pf" and restarts > 1:
        for s in model.restart_seeds():
            single = LDHMM(K, n_symbols=n_symbols, guide=guide, n_init=1, seed=s).fit(seqs)
            row["restarts"].append(float(single.elbo_history_[-1]) / n_tokens)
    return row


def falls(rows: list[dict], guide: str, slack: float = 0.0) -> list[tuple[int, float]]:
    """The K whose best ELBO per token is below the best of any smaller K by more than
    ``slack``: (K, shortfall) pairs."""
    best = -float("inf")
    out = []
    for row in sorted((r for r in rows if r["guide"] == guide), key=lambda r: r["K"]):
        if row["elbo"] < best - slack:
            out.append((row["K"], best - row["elbo"]))
        best = max(best, row["elbo"])
    return out


def main(argv=None) -> int:
    """Parse the options, fit every (K, guide), print the table; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m ldhmm.experiments.elbo_vs_k", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--dataset", default="entree", choices=["entree", "msnbc"])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--n-sequences", type=int, default=None, help="a seeded sample of the subset")
    parser.add_argument("--states", type=int, nargs="+", default=[2, 3, 4, 5, 6])
    parser.add_argument("--guides", nargs="+", default=["pf", "ff"], choices=["pf", "ff"])
    parser.add_argument("--restarts", type=int, default=3, help="n_init of every fit (default 3)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.restarts < 1:
        parser.error("--restarts must be >= 1")
    if min(args.states) < 1:
        parser.error("--states must all be >= 1")
    db = load_paper_subset(args.dataset, args.data_dir, n=args.n_sequences)
    seqs = db.sequences
    print(
        f"{args.dataset}: {len(seqs)} sequences, {db.n_tokens} tokens, V = {db.n_symbols}; "
        f"{args.restarts} restarts, collapsed M-step (defaults)"
    )
    print(f"{'K':>2} {'guide':<5} {'ELBO/token':>11} {'iters':>5} {'sec':>7}  each restart alone (PF)")
    rows = []
    jobs = [(K, g) for K in args.states for g in args.guides]
    for K, guide in tqdm(jobs, desc="fits", disable=args.quiet, leave=False):
        row = fit_row(seqs, db.n_symbols, K, guide, args.restarts)
        rows.append(row)
        each = " ".join(f"{v:.5f}" for v in row["restarts"])
        tqdm.write(f"{K:>2} {guide:<5} {row['elbo']:11.5f} {row['iters']:>5} {row['seconds']:7.1f}  {each}")
    for guide in args.guides:
        fell = falls(rows, guide)
        text = ", ".join(f"K = {K} by {d:.5f}" for K, d in fell) if fell else "never"
        print(f"{guide}: best training ELBO per token below a smaller K's: {text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
