"""Benchmark: real vocabularies. Seconds per EM iteration and peak memory against V.

A synthetic click log: ``--n-sequences`` sequences whose lengths follow the MSNBC length
distribution (read from the data directory when it holds ``msnbc990928.seq.gz``, else a
geometric law with MSNBC's mean, 4.7) and whose symbols are Zipf-distributed (exponent 1.1)
over V symbols, each sequence drawing mostly from its own few favourites. For each V, in a
fresh subprocess (so that its peak RSS is its own):

* ``ldhmm``: ``LDHMM(K, n_symbols=V, n_init=1, max_iter=ITERS).fit(seqs)``; seconds per EM
  iteration and the process's peak RSS. When the memory estimate refuses the fit (it is about
  ``2 M K V`` float64 values of per-sequence emission counts while the state is dense), the row
  says so with the estimate;
* ``hmmlearn``: ``CategoricalHMM(K, n_iter=ITERS)`` on the same data, where it runs.

Run: ``python -m ldhmm.experiments.bench_vocab --vocab 1000 50000 1000000 --n-sequences 100000``
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np
from hmmlearn.hmm import CategoricalHMM

from ..data import read_msnbc, resolve_data_dir
from ..models import LDHMM
from ..models.memory import MemoryEstimateError

__all__ = ["click_log", "msnbc_lengths", "main"]

MSNBC_FILE = "msnbc990928.seq.gz"


def msnbc_lengths(n: int, seed: int = 0, data_dir=None) -> np.ndarray:
    """``n`` sequence lengths drawn from the MSNBC length distribution (capped at 100)."""
    rng = np.random.default_rng(seed)
    directory = resolve_data_dir(data_dir, default=".", must_exist=False)
    path = directory / MSNBC_FILE
    if path.is_file():
        pool = np.minimum(read_msnbc(path).lengths, 100)
    else:
        pool = np.minimum(rng.geometric(1 / 4.7, size=100_000), 100)
    return rng.choice(pool, size=n)


def click_log(
    n_sequences: int, n_symbols: int, seed: int = 0, data_dir=None, lengths: str = "msnbc"
) -> list[np.ndarray]:
    """A synthetic click log: Zipf(1.1) symbols, per-sequence favourites; lengths from MSNBC
    (``lengths="msnbc"``) or uniform on A..B (``"uniform:A:B"``)."""
    rng = np.random.default_rng(seed)
    if lengths == "msnbc":
        lengths = msnbc_lengths(n_sequences, seed, data_dir)
    else:
        _, low, high = lengths.split(":")
        lengths = rng.integers(int(low), int(high) + 1, size=n_sequences)
    ranks = np.arange(1, n_symbols + 1, dtype=np.float64)
    p = ranks**-1.1
    p /= p.sum()
    # All draws at once (a draw from p costs O(V) set-up: per sequence it would dominate at
    # V = 10^6): 3 favourites per sequence, then each token its own favourite (60%) or a draw.
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    favourites = rng.choice(n_symbols, size=(lengths.size, 3), p=p)
    draws = rng.choice(n_symbols, size=total, p=p)
    owner = np.repeat(np.arange(lengths.size), lengths)
    own = rng.random(total) < 0.6
    draws[own] = favourites[owner[own], rng.integers(0, 3, size=int(own.sum()))]
    return [a.astype(np.int64) for a in np.split(draws, np.cumsum(lengths)[:-1])]


def _one(args) -> dict:
    """Fit in this process; print the row as JSON."""
    seqs = click_log(args.n_sequences, args.one_vocab, seed=0, data_dir=args.data_dir, lengths=args.lengths)
    row = {"V": args.one_vocab, "model": args.one_model, "n_sequences": len(seqs), "K": args.states}
    t0 = time.perf_counter()
    try:
        if args.one_model == "ldhmm":
            model = LDHMM(
                args.states,
                n_symbols=args.one_vocab,
                n_init=1,
                max_iter=args.iters,
                seed=0,
                emission_layout=args.layout,
            )
            model.fit(seqs)
            n_iter = model.n_iter_
        else:
            X = np.concatenate(seqs)[:, None]
            hmm = CategoricalHMM(
                args.states, n_iter=args.iters, tol=0, random_state=0, n_features=args.one_vocab
            )
            hmm.fit(X, [len(s) for s in seqs])
            n_iter = args.iters
        row["seconds_per_iter"] = (time.perf_counter() - t0) / max(1, n_iter)
    except (MemoryEstimateError, MemoryError) as err:
        row["refused"] = " ".join(str(err).split())[:160]
    row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vocab", nargs="+", type=int, default=[1000, 50000, 1000000])
    p.add_argument("--n-sequences", type=int, default=100_000)
    p.add_argument("--states", type=int, default=8)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--models", nargs="+", default=["ldhmm", "hmmlearn"])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--lengths", default="msnbc", help="msnbc (default) or uniform:A:B")
    p.add_argument("--layout", default="auto", help="LDHMM's emission_layout: auto, dense or sparse")
    p.add_argument("--one-vocab", type=int, help=argparse.SUPPRESS)
    p.add_argument("--one-model", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one_vocab:
        print(json.dumps(_one(args)))
        return []
    rows = []
    print(f"lengths: {args.lengths}; LDHMM emission_layout: {args.layout}")
    print("| model | V | sequences | K | s / EM iteration | peak RSS (MB) | note |")
    print("|---|---|---|---|---|---|---|")
    for V in args.vocab:
        for model in args.models:
            cmd = [sys.executable, "-m", "ldhmm.experiments.bench_vocab", "--one-vocab", str(V)]
            cmd += [
                "--one-model",
                model,
                "--n-sequences",
                str(args.n_sequences),
                "--states",
                str(args.states),
            ]
            cmd += ["--iters", str(args.iters), "--lengths", args.lengths, "--layout", args.layout]
            if args.data_dir:
                cmd += ["--data-dir", args.data_dir]
            out = subprocess.run(cmd, capture_output=True, text=True)
            try:
                row = json.loads(out.stdout.strip().splitlines()[-1])
            except (IndexError, ValueError):
                row = {
                    "V": V,
                    "model": model,
                    "refused": (out.stderr.strip().splitlines() or ["failed"])[-1][:160],
                }
            rows.append(row)
            secs = f"{row['seconds_per_iter']:.2f}" if "seconds_per_iter" in row else "-"
            rss = f"{row.get('peak_rss_mb', float('nan')):.0f}"
            note = row.get("refused", "")
            print(
                f"| {model} | {V} | {args.n_sequences} | {args.states} | {secs} | {rss} | {note} |",
                flush=True,
            )
    return rows


if __name__ == "__main__":
    main()
