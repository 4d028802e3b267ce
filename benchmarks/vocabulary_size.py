"""Benchmark: real vocabularies. Seconds per EM iteration and peak memory against V.

A synthetic click log (:func:`ldhmm.experiments.datasets.click_log`): ``--n-sequences``
sequences whose lengths follow the MSNBC length distribution (read from the data directory when
it holds ``msnbc990928.seq.gz``, else a geometric law with MSNBC's mean, 4.7) and whose symbols
are Zipf-distributed (exponent 1.1) over V symbols, each sequence drawing mostly from its own
few favourites. For each V, in a fresh subprocess (so that its peak RSS is its own):

* ``ldhmm``: ``LDHMM(K, n_symbols=V, n_init=1, max_iter=ITERS).fit(seqs)``; seconds per EM
  iteration and the process's peak RSS. When the memory estimate refuses the fit (it is about
  ``2 M K V`` float64 values of per-sequence emission counts while the state is dense), the row
  says so with the estimate;
* ``hmmlearn``: ``CategoricalHMM(K, n_iter=ITERS, implementation=...)`` on the same data, where it
  runs; ``implementation="scaling"`` by default, the peer at its fastest (``--hmmlearn-implementation
  log`` for the v2 table's setting).

Threads: LDHMM's numba kernels use ``NUMBA_NUM_THREADS`` (printed above the table); run with
``NUMBA_NUM_THREADS=1`` to compare CPU seconds with hmmlearn's one thread.

Run: ``python benchmarks/vocabulary_size.py --vocab 1000 50000 1000000 --n-sequences 100000``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _common import print_table_header
from hmmlearn.hmm import CategoricalHMM

from ldhmm.experiments.datasets import click_log
from ldhmm.models import LDHMM
from ldhmm.models.memory import MemoryEstimateError

__all__ = ["main"]


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
                args.states,
                n_iter=args.iters,
                tol=0,
                random_state=0,
                n_features=args.one_vocab,
                implementation=args.hmmlearn_implementation,
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
    p.add_argument("--hmmlearn-implementation", default="scaling", choices=["scaling", "log"])
    p.add_argument("--one-vocab", type=int, help=argparse.SUPPRESS)
    p.add_argument("--one-model", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one_vocab:
        print(json.dumps(_one(args)))
        return []
    rows = []
    threads = os.environ.get("NUMBA_NUM_THREADS", f"unset: numba's default, {os.cpu_count()} CPUs")
    print(
        f"lengths: {args.lengths}; LDHMM emission_layout: {args.layout}; NUMBA_NUM_THREADS: {threads}; "
        f"hmmlearn implementation: {args.hmmlearn_implementation}"
    )
    print_table_header("| model | V | sequences | K | s / EM iteration | peak RSS (MB) | note |")
    for V in args.vocab:
        for model in args.models:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--one-vocab", str(V)]
            cmd += [
                "--one-model",
                model,
                "--n-sequences",
                str(args.n_sequences),
                "--states",
                str(args.states),
            ]
            cmd += ["--iters", str(args.iters), "--lengths", args.lengths, "--layout", args.layout]
            cmd += ["--hmmlearn-implementation", args.hmmlearn_implementation]
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
