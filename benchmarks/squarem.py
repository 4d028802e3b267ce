"""Benchmark: SQUAREM on the learned priors (``acceleration="squarem"``) against plain EM.

For every cell (a data set, K, a guide) and every seed it fits ``LDHMM(K, n_symbols=V,
seed=seed, guide=G, effort=E, acceleration=A)`` with ``A`` plain (``"none"``) and
``"squarem"``, one after the other (interleaved, the seeds in turn), and prints one Markdown row
per fit: the EM iterations of the kept run (its recorded iterations), the E-steps of every
LDHMM run of the fit (the runs from the HMM and from the seeded start; with SQUAREM a rejected
extrapolation is one E-step more than its iterations), the extrapolations tried and kept, the
sweeps per sequence of the whole fit (the compiled E-step's unit of work, the database-level
HMM's included; deterministic), CPU seconds and the final training ELBO per token (and its
difference to the plain fit of the same seed). A summary table of the medians over the seeds
follows.

Run with ``NUMBA_NUM_THREADS=1`` (CPU seconds with one thread, the unit of issue 44's targets)::

    NUMBA_NUM_THREADS=1 python benchmarks/squarem.py --data-dir ../shared/data \\
        --datasets entree msnbc:3000 --states 4 8 --guides pf --seeds 0 1 2

``--csv FILE`` also writes one row per fit.
"""

from __future__ import annotations

import statistics
import time

from _common import add_grid_arguments, benchmark_parser, print_table_header, write_rows
from effort_grid import dataset_sequences
from fit_cost import instrument

from ldhmm.data import resolve_data_dir
from ldhmm.inference import acceleration
from ldhmm.inference.acceleration import ACCELERATIONS
from ldhmm.inference.distributed.workers import PartitionWorker
from ldhmm.models import LDHMM
from ldhmm.models.fit_settings import EFFORTS

__all__ = ["main", "count_em_work", "summary_rows"]


def count_em_work(work) -> None:
    """Count into ``work`` (a Counter) the E-steps of LDHMM runs (``"e_steps"``: of parameters
    with a per-sequence group, so not the database-level HMM's) and SQUAREM's extrapolations
    tried and kept (``"tried"``, ``"kept"``): wraps the functions in place."""
    e_step, accepts = PartitionWorker.e_step, acceleration.accepts

    def counting_e_step(self, params, *args, **kwargs):
        work["e_steps"] += params.sharing.has_sequence_groups
        return e_step(self, params, *args, **kwargs)

    def counting_accepts(candidate, plain):
        kept = accepts(candidate, plain)
        work["tried"] += 1
        work["kept"] += kept
        return kept

    PartitionWorker.e_step = counting_e_step
    acceleration.accepts = counting_accepts


def summary_rows(fits: list[dict]) -> list[dict]:
    """Medians over the seeds of every (data, K, guide, acceleration) of ``fits``, in order."""
    groups: dict[tuple, list] = {}
    for f in fits:
        groups.setdefault((f["data"], f["K"], f["guide"], f["acceleration"]), []).append(f)
    rows = []
    for (data, K, guide, acc), runs in groups.items():
        row = {"data": data, "K": K, "guide": guide, "acceleration": acc, "seeds": len(runs)}
        for name in ("iters", "e_steps", "sweeps", "cpu", "elbo", "diff"):
            values = [f[name] for f in runs if f[name] is not None]
            row[name] = statistics.median(values) if values else None
        rows.append(row)
    return rows


def main(argv=None) -> int:
    p = benchmark_parser(__doc__)
    add_grid_arguments(p, seeds=(0, 1, 2))
    p.add_argument("--effort", default="standard", choices=EFFORTS)
    p.add_argument("--accelerations", nargs="+", default=list(ACCELERATIONS), choices=ACCELERATIONS)
    p.add_argument("--csv", default=None, help="write one row per fit here")
    args = p.parse_args(argv)
    data_dir = resolve_data_dir(args.data_dir)
    work = instrument()
    count_em_work(work)
    fits = []
    print_table_header(
        "| data | K | guide | seed | acceleration | EM iterations (kept run) | E-steps (LDHMM runs) | "
        "extrapolations kept / tried | sweeps/seq | CPU s | ELBO/tok | - plain |",
        flush=True,
    )
    for dataset, seqs, V in dataset_sequences(args.datasets, data_dir):
        n_tokens, M = sum(map(len, seqs)), len(seqs)
        LDHMM(2, n_symbols=V, seed=0, n_init=1, max_iter=2).fit(seqs[:50])  # numba's caches loaded
        for K in args.states:
            for guide in args.guides:
                for seed in args.seeds:
                    plain = None
                    for acc in args.accelerations:
                        work.clear()
                        cpu = time.process_time()
                        model = LDHMM(
                            K, n_symbols=V, seed=seed, guide=guide, effort=args.effort, acceleration=acc
                        )
                        model.fit(seqs)
                        cpu = time.process_time() - cpu
                        elbo = float(model.elbo_history_[-1]) / n_tokens
                        plain = elbo if acc == "none" else plain
                        fit = {
                            "data": dataset, "K": K, "guide": guide, "seed": seed, "acceleration": acc,
                            "iters": len(model.elbo_history_), "e_steps": work["e_steps"],
                            "tried": work["tried"], "kept": work["kept"], "sweeps": work["sweeps"] / M,
                            "cpu": cpu, "elbo": elbo, "diff": None if plain is None else elbo - plain,
                            "start": model.start_kind_,
                        }  # fmt: skip
                        fits.append(fit)
                        diff = "" if fit["diff"] is None else f"{fit['diff']:+.6f}"
                        cells = [dataset, K, guide, seed, acc, fit["iters"], fit["e_steps"]]
                        cells += [f"{fit['kept']} / {fit['tried']}", f"{fit['sweeps']:.0f}", f"{cpu:.1f}"]
                        print("| " + " | ".join(map(str, [*cells, f"{elbo:.6f}", diff])) + " |", flush=True)
    print()
    print_table_header(
        "| data | K | guide | acceleration | seeds | EM iterations (median) | E-steps | sweeps/seq | CPU s | "
        "ELBO/tok | - plain (median of the seeds' differences) |"
    )
    for row in summary_rows(fits):
        diff = "" if row["diff"] is None or row["acceleration"] == "none" else f"{row['diff']:+.6f}"
        print(
            f"| {row['data']} | {row['K']} | {row['guide']} | {row['acceleration']} | {row['seeds']} | "
            f"{row['iters']:.0f} | {row['e_steps']:.0f} | {row['sweeps']:.0f} | {row['cpu']:.1f} | "
            f"{row['elbo']:.6f} | {diff} |"
        )
    if args.csv:
        write_rows(args.csv, fits)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
