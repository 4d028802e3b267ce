"""Fit LDHMM on the full MSNBC file (989,818 sequences) and report time and peak memory.

    python -m ldhmm.experiments.full_msnbc [--data-dir DIR] [--states 8] [--max-iter 10] [--guide pf]

Peak resident memory is read from ``resource.getrusage`` at the end (the whole process: data,
buckets, per-sequence state, temporaries).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

from ..data import load_msnbc
from ..models import LDHMM


def main(argv=None) -> int:
    """Parse the options, fit, print the report; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--states", type=int, default=8)
    parser.add_argument("--max-iter", type=int, default=10)
    parser.add_argument("--guide", default="pf", choices=["pf", "ff"])
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    db = load_msnbc(args.data_dir)
    seqs = db.sequences
    loaded = time.perf_counter()
    model = LDHMM(
        args.states,
        n_symbols=db.n_symbols,
        guide=args.guide,
        max_iter=args.max_iter,
        e_step_max_iter=50,
        e_step_tol=1e-5,
        verbose=not args.quiet,
    )
    model.fit(seqs)
    fitted = time.perf_counter()
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"sequences {len(seqs):,}  tokens {db.n_tokens:,}  K={args.states}  guide={args.guide}")
    print(
        f"load {loaded - start:.1f} s  fit {fitted - loaded:.1f} s  "
        f"({model.n_iter_} EM iterations, {(fitted - loaded) / model.n_iter_:.1f} s each)"
    )
    print(f"final ELBO {model.elbo_history_[-1]:.6g}  converged {model.converged_}")
    print(f"peak resident memory {peak_mib:,.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
