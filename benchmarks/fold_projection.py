"""Benchmark: estimate a long ``compare`` run's wall time from some of its folds.

Figure 5 (the MSNBC subset, 10 folds, K = 2..6, six models) is too long to run whenever a
default changes. This runs :func:`ldhmm.experiments.compare.compare` with the full run's
settings and fold split, but only the tasks of the folds given by ``--run-folds`` (each task is
the full run's task: same training set, seeds and budget), then prints each model's task
seconds per fold and the projection to all folds::

    python benchmarks/fold_projection.py --dataset msnbc --data-dir ../shared/data --jobs 2 \\
        --run-folds 0 --out results/fold-projection-msnbc
    python benchmarks/fold_projection.py --dataset msnbc --data-dir ../shared/data --backend dask \\
        --workers 2 --run-folds 0 --out results/fold-projection-msnbc-dask

(``--backend dask --workers N``: the same tasks on a LocalCluster of N worker processes, one
numba thread each, as ``ldhmm compare --backend dask --workers N`` runs them.)

The projection is ``sum over models of (task seconds per fold) x folds / jobs``: it assumes
the other folds cost what the run ones did and the jobs stay busy to the end, so the full
run's wall time is longer by its tail (at most about one task).
"""

from __future__ import annotations

import argparse
import contextlib
import time

import pandas as pd
from _common import print_table_header

from ldhmm.cli.cluster import dask_client
from ldhmm.experiments import compare as compare_module

__all__ = ["main", "only_folds", "projection"]

FIGURE5_MODELS = ("LDHMM-FF", "LDHMM-PF", "HMM", "LDA", "VBHMM", "HMMV")
TIME_COLUMNS = ("fit_seconds", "score_seconds", "is_seconds")
#: The options passed on to :func:`~ldhmm.experiments.compare.compare` as its keywords of the same name.
COMPARE_OPTIONS = ("models", "data_dir", "states", "folds", "jobs", "out", "quiet", "backend")


def only_folds(groups: list[dict], folds: set[int]) -> list[dict]:
    """The task groups of ``groups`` (``compare_groups``' output) whose fold is in ``folds``."""
    return [g for g in groups if g["fold"] in folds]


def projection(folds_csv: pd.DataFrame, n_run: int, folds: int) -> pd.DataFrame:
    """Task seconds per fold of each model (fit, scoring and importance sampling) in a
    ``folds.csv`` of ``n_run`` folds, and the same projected to ``folds`` folds."""
    cols = [c for c in TIME_COLUMNS if c in folds_csv]
    per_model = folds_csv.groupby("model")[cols].sum().fillna(0.0).sum(axis=1) / n_run
    table = pd.DataFrame({"task_s_per_fold": per_model, "task_s_all_folds": per_model * folds})
    return table.sort_values("task_s_per_fold", ascending=False)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="msnbc")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--models", nargs="+", default=list(FIGURE5_MODELS))
    parser.add_argument("--states", nargs="+", default=["2..6"])
    parser.add_argument("--folds", type=int, default=10)
    parser.add_argument("--run-folds", type=int, nargs="+", default=[0], help="the folds to run (default 0)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--backend", choices=["local", "dask"], default="local")
    parser.add_argument("--workers", type=int, default=None, help="--backend dask: LocalCluster workers")
    parser.add_argument("--out", required=True)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    keep = set(args.run_folds)
    full_groups = compare_module.compare_groups

    def some_groups(plans, states, folds):
        return only_folds(full_groups(plans, states, folds), keep)

    # compare()'s tasks come from this module attribute (Comparison.groups calls it by name):
    # swapping it runs the full run's tasks (same fold split, seeds and budgets) for the chosen
    # folds only
    compare_module.compare_groups = some_groups
    cluster = argparse.Namespace(
        backend=args.backend,
        scheduler=None,
        workers=args.workers,
        worker_threads=1 if args.backend == "dask" else None,
        scheduler_timeout=None,
        quiet=args.quiet,
    )
    with contextlib.ExitStack() as stack:
        stack.callback(setattr, compare_module, "compare_groups", full_groups)
        start = time.perf_counter()
        client = stack.enter_context(dask_client(cluster))  # the cluster's start is in the wall time
        settings = {name: getattr(args, name) for name in COMPARE_OPTIONS}
        result = compare_module.compare(data=args.dataset, client=client, **settings)
        wall = time.perf_counter() - start
    table = projection(result.folds, len(keep), args.folds)
    where = f"{args.workers or 2} Dask workers" if args.backend == "dask" else f"{args.jobs} jobs"
    print(f"\nran folds {sorted(keep)} of {args.folds} in {wall:.0f} s wall ({where})")
    print_table_header("| model | task seconds per fold | projected task seconds, all folds |")
    for model, row in table.iterrows():
        print(f"| {model} | {row.task_s_per_fold:.0f} | {row.task_s_all_folds:.0f} |")
    total = table["task_s_all_folds"].sum()
    print(f"| all | {total / args.folds:.0f} | {total:.0f} |")
    lanes = (args.workers or 2) if args.backend == "dask" else args.jobs
    minutes = total / lanes / 60
    print(f"projected wall time of all {args.folds} folds with {where}: {minutes:.1f} min")


if __name__ == "__main__":
    main()
