"""Benchmark: the effort presets held out, by K-fold cross-validation (issue 44's held-out rule).

For every cell (a data set, K, a guide) and every fold of ``--folds`` (seeded splits), it fits
``LDHMM(K, n_symbols=V, seed=--seed, guide=G, effort=E)`` on the training folds for each effort
and scores the held-out fold: the held-out bound per token (``score_samples``) and the
importance-sampled log p(x) per token (``log_marginal_is``, ``--is-samples`` draws, the same
seed for every effort). One row per cell and effort: the mean over folds of both, the mean
fold difference to the reference effort (``--reference``, default ``thorough``) with its
standard error, and the rule's verdicts: the mean log p(x) at least the reference's minus one
standard error of the fold differences, the median bound at least the reference's minus 0.005.
``--candidates LABEL=JSON`` adds a row per candidate: the fit at ``--candidate-effort`` with
those settings besides (``--reference`` may name a candidate's label)::

    NUMBA_NUM_THREADS=1 python benchmarks/effort_held_out.py --data-dir ../shared/data \\
        --datasets entree msnbc:3000 --states 4 --guides pf
    NUMBA_NUM_THREADS=1 python benchmarks/effort_held_out.py --data-dir ../shared/data \\
        --efforts standard --reference standard --candidates 'one-draw={"random_starts": 1}'
"""

from __future__ import annotations

import numpy as np
from _common import (
    add_candidate_arguments,
    add_grid_arguments,
    benchmark_parser,
    labelled_fits,
    print_table_header,
)
from effort_grid import dataset_sequences

from ldhmm.data import kfold_indices, resolve_data_dir
from ldhmm.models import LDHMM
from ldhmm.models.fit_settings import EFFORTS

__all__ = ["main", "fold_verdicts"]


def fold_verdicts(per_fold: dict, reference: str) -> list[dict]:
    """Per effort: means over folds and the rule's verdicts against ``reference``.

    ``per_fold``: effort -> list (one per fold, the same folds in order) of (bound per token,
    log p(x) per token)."""
    ref = np.asarray(per_fold[reference])
    rows = []
    for effort, values in per_fold.items():
        v = np.asarray(values)
        diff = v[:, 1] - ref[:, 1]
        se = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0
        bound_median = float(np.median(v[:, 0]))
        rows.append(
            {
                "effort": effort,
                "bound": float(v[:, 0].mean()),
                "logp": float(v[:, 1].mean()),
                "diff": float(diff.mean()),
                "se": se,
                "logp_holds": bool(diff.mean() >= -se),
                "bound_holds": bool(bound_median >= float(np.median(ref[:, 0])) - 0.005),
            }
        )
    return rows


def main(argv=None) -> int:
    p = benchmark_parser(__doc__)
    add_grid_arguments(p, states=(4,), seeds=None)
    p.add_argument("--efforts", nargs="+", default=["standard", "thorough"], choices=EFFORTS)
    p.add_argument("--reference", default="thorough", help="an effort of --efforts or a candidate's label")
    add_candidate_arguments(p)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--is-samples", type=int, default=50)
    args = p.parse_args(argv)
    # (row label, effort, further settings) of every fit of a fold
    fits = labelled_fits(p, args, [(e, e, {}) for e in args.efforts])
    data_dir = resolve_data_dir(args.data_dir)
    print_table_header(
        "| data | K | guide | effort | held-out bound/tok (mean) | log p(x)/tok (mean, IS) | "
        "log p(x) - reference (mean +- SE over folds) | rule: log p(x) | rule: bound |"
    )
    for dataset, seqs, V in dataset_sequences(args.datasets, data_dir):
        seqs = [s for s in seqs if len(s) >= 1]
        splits = kfold_indices(len(seqs), args.folds, seed=args.seed)
        for K in args.states:
            for guide in args.guides:
                per_fold: dict[str, list] = {label: [] for label, _, _ in fits}
                for train_idx, test_idx in splits:
                    train = [seqs[i] for i in train_idx]
                    test = [seqs[i] for i in test_idx]
                    n_test = sum(map(len, test))
                    for label, effort, options in fits:
                        model = LDHMM(K, n_symbols=V, seed=args.seed, guide=guide, effort=effort, **options)
                        model.fit(train)
                        bound = float(model.score_samples(test).sum()) / n_test
                        logp = (
                            float(model.log_marginal_is(test, n_samples=args.is_samples, seed=0).sum())
                            / n_test
                        )
                        per_fold[label].append((bound, logp))
                for row in fold_verdicts(per_fold, args.reference):
                    logp_rule = "holds" if row["logp_holds"] else "**fails**"
                    bound_rule = "holds" if row["bound_holds"] else "**fails**"
                    print(
                        f"| {dataset} | {K} | {guide} | {row['effort']} | {row['bound']:.6f} | "
                        f"{row['logp']:.6f} | {row['diff']:+.6f} +- {row['se']:.6f} | {logp_rule} | "
                        f"{bound_rule} |",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
