"""Benchmark: the effort presets against each other and against hmmlearn, cell by cell.

For every cell of the check grid (a data set, K, a guide) and every seed it fits
``LDHMM(K, n_symbols=V, seed=seed, guide=G, effort=E)`` for each effort ``E`` (interleaved: the
efforts of one seed run one after the other, the seeds in turn), and hmmlearn's
``CategoricalHMM(K, implementation="scaling")`` to a relative tolerance of 1e-4 beside them (the
peer at its fastest, in the same process; ``--no-hmmlearn`` to skip it). One table row per
cell and effort: the median over the seeds of the final training ELBO per token, its spread
(min..max), the median difference to the reference effort (``--reference``, default
``thorough``: the v4 defaults) and whether it meets the quality rule of issue 44 (median at
least the reference's minus ``--allowed``, default 0.002), the median CPU seconds, EM iterations
and sweeps per sequence (the compiled E-step's unit of work; deterministic), and the median CPU
time as a multiple of hmmlearn's.

Run with ``NUMBA_NUM_THREADS=1`` (CPU seconds with one thread each, the unit of the targets)::

    NUMBA_NUM_THREADS=1 python benchmarks/effort_grid.py --data-dir ../shared/data \\
        --datasets entree msnbc:3000 --states 2 4 8 --guides pf ff --seeds 0 1 2 3 4

``--candidates LABEL=JSON ...`` adds a row per candidate: the fit at ``--candidate-effort``
(default ``standard``) with those settings besides (the frontier around a preset; ``--reference``
may name a candidate's label). ``--csv FILE`` also writes one row per fit (hmmlearn's too, its
log-likelihood per token in the ``elbo`` column); a line per fit goes to stderr as it ends
(``--quiet``: the table only). ``--identical-sequences once each`` fits every effort both ways
(rows ``standard/once``, ``standard/each``; ``--reference standard/each``).
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import time

from _common import (
    add_candidate_arguments,
    add_grid_arguments,
    benchmark_parser,
    labelled_fits,
    print_table_header,
    write_rows,
)
from fit_cost import hmmlearn_model, instrument, sequences

from ldhmm.data import resolve_data_dir
from ldhmm.models import LDHMM
from ldhmm.models.fit_settings import EFFORTS

__all__ = ["main", "hmmlearn_scaling_fit", "parse_dataset", "cell_rows"]


def parse_dataset(text: str) -> tuple[str, int | None]:
    """``"msnbc:3000"`` -> ("msnbc", 3000): a data set of :data:`fit_cost.DATASETS`, its first N
    sequences where given."""
    name, _, n = text.partition(":")
    return name, (int(n) if n else None)


def dataset_sequences(datasets, data_dir):
    """``(data set, its sequences, V)`` for every data set of ``datasets`` (``NAME`` or
    ``NAME:N``, see :func:`parse_dataset`), each read once."""
    for dataset in datasets:
        name, n = parse_dataset(dataset)
        yield (dataset, *sequences(name, data_dir, n))


def hmmlearn_scaling_fit(seqs, K: int, V: int, seed: int = 0, tol: float = 1e-4) -> tuple[float, int, float]:
    """hmmlearn's ``CategoricalHMM(K, implementation="scaling")`` to a relative change of its
    total log-likelihood of ``tol``: (CPU seconds, iterations, final log-likelihood per token)."""
    seconds, model = hmmlearn_model(seqs, K, V, tol, "scaling", seed)
    return seconds, model.monitor_.iter, float(model.monitor_.history[-1]) / sum(map(len, seqs))


def cell_rows(
    fits: list[dict], reference: str, allowed: float, hmmlearn_cpu: float | None, key: str = "effort"
) -> list[dict]:
    """One summary per effort (per value of ``key``) of one cell's ``fits`` (dicts with effort,
    seed, elbo, cpu, iters, sweeps): medians over seeds, the difference to ``reference``'s
    median, the rule's verdict."""
    by_effort: dict[str, list] = {}
    for f in fits:
        by_effort.setdefault(f[key], []).append(f)
    ref = statistics.median(f["elbo"] for f in by_effort[reference]) if reference in by_effort else None
    rows = []
    for effort, runs in by_effort.items():
        elbo = statistics.median(f["elbo"] for f in runs)
        cpu = statistics.median(f["cpu"] for f in runs)
        rows.append(
            {
                key: effort,
                "median": elbo,
                "low": min(f["elbo"] for f in runs),
                "high": max(f["elbo"] for f in runs),
                "diff": None if ref is None else elbo - ref,
                "holds": None if ref is None else elbo >= ref - allowed,
                "cpu": cpu,
                "iters": statistics.median(f["iters"] for f in runs),
                "sweeps": statistics.median(f["sweeps"] for f in runs),
                "ratio": None if not hmmlearn_cpu else cpu / hmmlearn_cpu,
            }
        )
    return rows


def report_fit(args, fit: str, per_token: float, cpu: float, iterations: int) -> None:
    """A line on stderr as each fit ends, unless ``--quiet`` (a cell of the full MSNBC subset
    takes an hour)."""
    if not args.quiet:
        print(
            f"{fit}: {per_token:.6f} per token, CPU {cpu:.1f} s, {iterations} iterations",
            file=sys.stderr,
            flush=True,
        )


def main(argv=None) -> int:
    p = benchmark_parser(__doc__)
    add_grid_arguments(p, states=(2, 4, 8), guides=("pf", "ff"), seeds=(0, 1, 2, 3, 4))
    p.add_argument("--efforts", nargs="+", default=list(EFFORTS), choices=EFFORTS)
    p.add_argument(
        "--reference", default="thorough", help="an effort, or EFFORT/VALUE (see --identical-sequences)"
    )
    p.add_argument("--allowed", type=float, default=0.002, help="nats/token below the reference's median")
    p.add_argument("--options", default="{}", help="further LDHMM settings as JSON, for every fit")
    p.add_argument(
        "--identical-sequences",
        nargs="+",
        default=[None],
        choices=["once", "each"],
        help="fit each effort with each of these (rows 'EFFORT/VALUE'; default: the preset's)",
    )
    p.add_argument("--no-hmmlearn", action="store_true")
    p.add_argument("--csv", default=None, help="write one row per fit here")
    p.add_argument("--quiet", action="store_true", help="no line per fit on stderr, the table only")
    add_candidate_arguments(p)
    args = p.parse_args(argv)
    options = json.loads(args.options)
    # (row label, effort, settings) of every fit of a seed, in the order they run
    fits = labelled_fits(
        p,
        args,
        [
            (effort if identical is None else f"{effort}/{identical}", effort,
             {} if identical is None else {"identical_sequences": identical})
            for effort, identical in itertools.product(args.efforts, args.identical_sequences)
        ],
        reference_required=False,
    )  # fmt: skip
    data_dir = resolve_data_dir(args.data_dir)
    work = instrument()
    records = []
    print_table_header(
        "| data | K | guide | effort | ELBO/tok median (min..max) | - reference | rule | CPU s | "
        "iterations | sweeps/seq | CPU / hmmlearn |"
    )
    for dataset, seqs, V in dataset_sequences(args.datasets, data_dir):
        n_tokens, M = sum(map(len, seqs)), len(seqs)
        LDHMM(2, n_symbols=V, seed=0, n_init=1, max_iter=2).fit(seqs[:50])  # numba's caches loaded
        for K in args.states:
            for guide in args.guides:
                cell, peer = [], []
                for seed in args.seeds:
                    if not args.no_hmmlearn:
                        cpu, iters, loglik = hmmlearn_scaling_fit(seqs, K, V, seed)
                        peer.append(cpu)
                        # the peer's own row in the CSV (its log-likelihood per token in "elbo")
                        records.append(
                            {"data": dataset, "K": K, "guide": guide, "seed": seed, "effort": "hmmlearn",
                             "elbo": loglik, "cpu": cpu, "iters": iters, "sweeps": iters, "start": "random"}
                        )  # fmt: skip
                        report_fit(args, f"{dataset} K={K} {guide} seed {seed} hmmlearn", loglik, cpu, iters)
                    for label, effort, setting in fits:
                        work.clear()
                        cpu = time.process_time()
                        model = LDHMM(
                            K, n_symbols=V, seed=seed, guide=guide, effort=effort, **{**options, **setting}
                        )
                        model.fit(seqs)
                        cpu = time.process_time() - cpu
                        fit = {
                            "data": dataset, "K": K, "guide": guide, "seed": seed,
                            "effort": label,
                            "elbo": float(model.elbo_history_[-1]) / n_tokens, "cpu": cpu,
                            "iters": len(model.elbo_history_), "sweeps": work["sweeps"] / M,
                            "start": model.start_kind_,
                        }  # fmt: skip
                        cell.append(fit)
                        report_fit(
                            args,
                            f"{dataset} K={K} {guide} seed {seed} {label}",
                            fit["elbo"],
                            cpu,
                            fit["iters"],
                        )
                        records.append(fit)
                hmmlearn_cpu = statistics.median(peer) if peer else None
                for row in cell_rows(cell, args.reference, args.allowed, hmmlearn_cpu):
                    diff = "" if row["diff"] is None else f"{row['diff']:+.6f}"
                    holds = "" if row["holds"] is None else ("holds" if row["holds"] else "**fails**")
                    ratio = "" if row["ratio"] is None else f"{row['ratio']:.1f}x ({hmmlearn_cpu:.2f} s)"
                    print(
                        f"| {dataset} | {K} | {guide} | {row['effort']} | {row['median']:.6f} "
                        f"({row['low']:.6f}..{row['high']:.6f}) | {diff} | {holds} | {row['cpu']:.1f} | "
                        f"{row['iters']:.0f} | {row['sweeps']:.0f} | {ratio} |",
                        flush=True,
                    )
    if args.csv:
        write_rows(args.csv, records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
