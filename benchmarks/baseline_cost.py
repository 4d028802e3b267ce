"""Benchmark: what the baselines cost, against their reference implementations and their own settings.

Two tables, each from one process, the fits interleaved:

1. **Per iteration** (``--per-iteration``): CPU seconds per EM iteration of the ``HMM`` baseline
   against hmmlearn's ``CategoricalHMM(implementation="scaling")`` and of ``VBHMM`` against
   hmmlearn's ``VariationalCategoricalHMM`` (``"scaling"``; ``"log"`` where the scaled recursion
   underflows, as hmmlearn asks), each run for a fixed number of iterations from its own start
   (the minimum over ``--repeats``), and the ratio that issue 44 bounds by 1.5.
2. **Settings** (``--model NAME --candidates LABEL=JSON ...``): for every cell (data set, K) and
   seed, one fit of the baseline per candidate setting (the first candidate is the reference,
   normally its defaults ``{}``): the median over the seeds of the final training objective per
   token (HMM: the MAP objective of Baum-Welch; VBHMM, HMMV: the ELBO), its spread, the median
   difference to the reference's and whether it meets the quality rule (at least the
   reference's median minus ``--allowed``, default 0.002), the median CPU seconds and EM
   iterations. ``--held-out FOLDS``: instead, by K-fold cross-validation (seeded splits, seed 0
   of every fit), the held-out score per token of each candidate (the HMM's exact log p(x), the
   VB baselines' bound and importance-sampled log p(x)), the mean fold difference to the
   reference with its standard error and the held-out rule's verdicts
   (:func:`effort_held_out.fold_verdicts`).
3. **Identical sequences** (``--copies``): CPU seconds per EM iteration of the ``HMM`` baseline,
   whose E-step computes each distinct sequence once and weighs it by its copies, against the
   same fit with every copy computed (:func:`every_copy_buckets`, the E-step's buckets before),
   interleaved, the minimum over ``--repeats``; the share of distinct sequences and the
   largest relative difference between the two fits' objective histories (the same trajectory
   up to rounding).

Run with ``NUMBA_NUM_THREADS=1`` (CPU seconds with one thread each)::

    NUMBA_NUM_THREADS=1 python benchmarks/baseline_cost.py --data-dir ../shared/data --per-iteration
    NUMBA_NUM_THREADS=1 python benchmarks/baseline_cost.py --data-dir ../shared/data --model HMM \\
        --candidates 'v5={}' 'screen1e-4={"screen_tol": 1e-4}'
    NUMBA_NUM_THREADS=1 python benchmarks/baseline_cost.py --data-dir ../shared/data --model HMMV \\
        --candidates 'thorough={}' 'standard={"effort": "standard"}' 'quick={"effort": "quick"}'
    NUMBA_NUM_THREADS=1 python benchmarks/baseline_cost.py --data-dir ../shared/data --model HMM \
        --candidates 'v5={}' 'screen1e-5={"screen_tol": 1e-5}' --held-out 5 --states 4 8
    NUMBA_NUM_THREADS=1 python benchmarks/baseline_cost.py --data-dir ../shared/data --copies \
        --datasets entree msnbc msnbc-short:100000 --states 8
"""

from __future__ import annotations

import json
import logging
import time
import warnings

import numpy as np
import torch
from _common import benchmark_parser, parse_candidate, print_table_header
from effort_grid import cell_rows, dataset_sequences
from effort_held_out import fold_verdicts
from hmmlearn.hmm import CategoricalHMM
from hmmlearn.vhmm import VariationalCategoricalHMM

from ldhmm.baselines import hmm as hmm_module
from ldhmm.baselines.hmm import HMM, TrainingBuckets
from ldhmm.baselines.hmmv import HMMV
from ldhmm.baselines.vbhmm import VBHMM
from ldhmm.data import kfold_indices, resolve_data_dir
from ldhmm.inference import make_buckets

__all__ = [
    "main",
    "parse_candidate",
    "final_objective",
    "per_iteration_row",
    "copies_row",
    "every_copy_buckets",
    "BASELINES",
]

#: ``--model`` name -> class
BASELINES = {"HMM": HMM, "VBHMM": VBHMM, "HMMV": HMMV}


def final_objective(model) -> float:
    """The quantity a baseline's fit increases, at its end: the HMM's MAP objective, the ELBO."""
    if isinstance(model, HMM):
        return float(model.objective_history_[-1])
    return float(model.elbo_history_[-1])


def _hmmlearn_per_iteration(cls, X, lengths, K, V, iterations) -> tuple[float, str]:
    """CPU seconds per iteration of hmmlearn's ``cls`` (fixed ``iterations``), and the
    implementation used ("scaling", or "log" where scaling underflows)."""
    for implementation in ("scaling", "log"):
        model = cls(
            K, n_features=V, n_iter=iterations, tol=-np.inf, implementation=implementation, random_state=0
        )
        start = time.process_time()
        try:
            model.fit(X, lengths)
        except ValueError:  # "forward pass failed with underflow; consider using implementation='log'"
            continue
        return (time.process_time() - start) / model.monitor_.iter, implementation
    raise RuntimeError("hmmlearn failed with both implementations")


def per_iteration_row(seqs, K: int, V: int, iterations: int) -> dict:
    """One repeat of the per-iteration comparison on ``seqs`` at ``K``: CPU seconds per
    iteration of HMM, hmmlearn's CategoricalHMM, VBHMM and hmmlearn's VariationalCategoricalHMM."""
    X = np.concatenate(seqs).reshape(-1, 1)
    lengths = [len(s) for s in seqs]
    row = {}
    row["hmmlearn"], _ = _hmmlearn_per_iteration(CategoricalHMM, X, lengths, K, V, iterations)
    start = time.process_time()
    model = HMM(K, n_symbols=V, max_iter=iterations, tol=0.0, n_init=1, seeded_start="none").fit(seqs)
    row["HMM"] = (time.process_time() - start) / model.n_iter_
    row["hmmlearn VB"], row["VB implementation"] = _hmmlearn_per_iteration(
        VariationalCategoricalHMM, X, lengths, K, V, iterations
    )
    start = time.process_time()
    model = VBHMM(K, n_symbols=V, max_iter=iterations, tol=0.0, n_init=1, effort="thorough").fit(seqs)
    row["VBHMM"] = (time.process_time() - start) / len(model.elbo_history_)
    return row


def every_copy_buckets(sequences: list, max_cells: int = 1 << 18) -> TrainingBuckets:
    """The HMM's E-step buckets with every input sequence a row of its own (weight 1): what
    :func:`ldhmm.baselines.hmm.training_buckets` gave before it computed identical sequences
    once, the reference of the ``--copies`` table."""
    buckets = make_buckets(sequences, max_cells=max_cells)
    for bucket in buckets:
        bucket.weights = torch.ones(bucket.n_sequences, dtype=torch.float64)
    emitted = [bucket.tokens[bucket.mask] for bucket in buckets]
    return TrainingBuckets(buckets, emitted, int(sum(len(s) for s in sequences)))


def copies_row(seqs, K: int, V: int, iterations: int) -> dict:
    """One repeat of the ``--copies`` comparison: CPU seconds per iteration of the HMM baseline
    (one run from seed 0, ``iterations`` iterations) with its E-step over the distinct sequences
    (``"once"``) and over every copy (``"each"``), and the two objective histories."""
    row = {}
    for label in ("each", "once"):
        original = hmm_module.training_buckets
        if label == "each":
            hmm_module.training_buckets = every_copy_buckets
        try:
            start = time.process_time()
            model = HMM(K, n_symbols=V, max_iter=iterations, tol=0.0, n_init=1, seeded_start="none").fit(seqs)
            row[label] = (time.process_time() - start) / model.n_iter_
        finally:
            hmm_module.training_buckets = original
        row[f"{label} history"] = np.asarray(model.objective_history_)
    return row


def _copies(args, data_dir) -> None:
    print_table_header(
        "| data | K | sequences | distinct | HMM s/iter, every copy | HMM s/iter, each distinct once | "
        "ratio | objective histories: largest relative difference |"
    )
    for dataset, seqs, V, K in cells(args.datasets, args.states, data_dir):
        reps = [copies_row(seqs, K, V, args.iterations) for _ in range(args.repeats)]
        each, once = (min(r[label] for r in reps) for label in ("each", "once"))
        a, b = reps[0]["each history"], reps[0]["once history"]
        n_distinct = len({s.tobytes() for s in seqs})
        print(
            f"| {dataset} | {K} | {len(seqs):,} | {n_distinct / len(seqs):.0%} | {each:.4f} | {once:.4f} | "
            f"{once / each:.2f}x | {float(np.max(np.abs(a - b) / np.abs(a))):.1e} |",
            flush=True,
        )


def cells(datasets, states, data_dir):
    """``(data set name, its sequences, V, K)`` for every data set of ``datasets`` (``NAME`` or
    ``NAME:N``) and every K of ``states``, each data set read once."""
    for dataset, seqs, V in dataset_sequences(datasets, data_dir):
        for K in states:
            yield dataset, seqs, V, K


def _per_iteration(args, data_dir) -> None:
    print_table_header(
        "| data | K | HMM s/iter | hmmlearn scaling s/iter | ratio | VBHMM s/iter | "
        "hmmlearn VB s/iter (impl.) | ratio |"
    )
    for dataset, seqs, V, K in cells(args.datasets, args.states, data_dir):
        reps = [per_iteration_row(seqs, K, V, args.iterations) for _ in range(args.repeats)]
        best = {key: min(r[key] for r in reps) for key in ("HMM", "hmmlearn", "VBHMM", "hmmlearn VB")}
        print(
            f"| {dataset} | {K} | {best['HMM']:.4f} | {best['hmmlearn']:.4f} | "
            f"{best['HMM'] / best['hmmlearn']:.2f}x | {best['VBHMM']:.4f} | {best['hmmlearn VB']:.4f} "
            f"({reps[0]['VB implementation']}) | {best['VBHMM'] / best['hmmlearn VB']:.2f}x |",
            flush=True,
        )


def _candidates(args, header: str, note: str = "") -> tuple:
    """(the baseline's class, its candidates by label, the reference's label), with the table's
    first lines printed (``header``: its columns after data, K)."""
    candidates = dict(args.candidates)
    reference = args.candidates[0][0]
    print(f"{args.model}: candidates {json.dumps(candidates)}; reference {reference}{note}")
    print_table_header(f"| data | K | {header} |")
    return BASELINES[args.model], candidates, reference


def _settings(args, data_dir) -> None:
    cls, candidates, reference = _candidates(
        args, "candidate | objective/tok median (min..max) | - reference | rule | CPU s | iterations"
    )
    for dataset, seqs, V, K in cells(args.datasets, args.states, data_dir):
        n_tokens, fits = sum(map(len, seqs)), []
        for seed in args.seeds:
            for label, options in candidates.items():
                cpu = time.process_time()
                model = cls(K, n_symbols=V, seed=seed, **options).fit(seqs)
                cpu = time.process_time() - cpu
                iterations = model.n_iter_ if isinstance(model, HMM) else len(model.elbo_history_)
                fits.append(
                    {"candidate": label, "seed": seed, "elbo": final_objective(model) / n_tokens,
                     "cpu": cpu, "iters": iterations, "sweeps": 0}
                )  # fmt: skip
        for row in cell_rows(fits, reference, args.allowed, None, key="candidate"):
            holds = "holds" if row["holds"] else "**fails**"
            print(
                f"| {dataset} | {K} | {row['candidate']} | {row['median']:.6f} ({row['low']:.6f}.."
                f"{row['high']:.6f}) | {row['diff']:+.6f} | {holds} | {row['cpu']:.2f} | "
                f"{row['iters']:.0f} |",
                flush=True,
            )


def held_out_scores(model, test: list, is_samples: int) -> tuple[float, float]:
    """(held-out score, log p(x)) per token of ``test``: the HMM's exact log-likelihood twice;
    the VB baselines' bound and importance-sampled log p(x)."""
    n_test = sum(map(len, test))
    score = float(model.score_samples(test).sum()) / n_test
    if isinstance(model, HMM):
        return score, score
    return score, float(model.log_marginal_is(test, n_samples=is_samples, seed=0).sum()) / n_test


def _held_out(args, data_dir) -> None:
    cls, candidates, reference = _candidates(
        args,
        "candidate | held-out score/tok (mean) | log p(x)/tok (mean) | "
        "log p(x) - reference (mean +- SE over folds) | rule: log p(x) | rule: score",
        f"; {args.held_out} folds",
    )
    for dataset, seqs, V, K in cells(args.datasets, args.states, data_dir):
        per_fold: dict[str, list] = {label: [] for label in candidates}
        for train_idx, test_idx in kfold_indices(len(seqs), args.held_out, seed=0):
            train, test = [seqs[i] for i in train_idx], [seqs[i] for i in test_idx]
            for label, options in candidates.items():
                model = cls(K, n_symbols=V, seed=0, **options).fit(train)
                per_fold[label].append(held_out_scores(model, test, args.is_samples))
        for row in fold_verdicts(per_fold, reference):
            logp_rule, score_rule = (
                "holds" if row[r] else "**fails**" for r in ("logp_holds", "bound_holds")
            )
            print(
                f"| {dataset} | {K} | {row['effort']} | {row['bound']:.6f} | {row['logp']:.6f} | "
                f"{row['diff']:+.6f} +- {row['se']:.6f} | {logp_rule} | {score_rule} |",
                flush=True,
            )


def main(argv=None) -> int:
    p = benchmark_parser(__doc__)
    p.add_argument("--datasets", nargs="+", default=["entree", "msnbc:3000"], help="NAME or NAME:N (first N)")
    p.add_argument("--states", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--per-iteration", action="store_true", help="the per-iteration table")
    p.add_argument("--iterations", type=int, default=15, help="per-iteration table: iterations per fit")
    p.add_argument("--repeats", type=int, default=3, help="per-iteration table: the minimum of this many")
    p.add_argument("--copies", action="store_true", help="the identical-sequences table of the HMM")
    p.add_argument("--model", choices=sorted(BASELINES), help="the settings table of this baseline")
    p.add_argument("--candidates", nargs="+", type=parse_candidate, default=[("defaults", {})])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--allowed", type=float, default=0.002, help="nats/token below the reference's median")
    p.add_argument("--held-out", type=int, default=0, metavar="FOLDS", help="the held-out table, FOLDS folds")
    p.add_argument("--is-samples", type=int, default=50, help="held-out table: importance samples")
    args = p.parse_args(argv)
    if not (args.per_iteration or args.copies) and args.model is None:
        p.error("give --per-iteration, --copies or --model NAME (or several)")
    data_dir = resolve_data_dir(args.data_dir)
    logging.getLogger("hmmlearn").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="hmmlearn")
    if args.per_iteration:
        _per_iteration(args, data_dir)
    if args.copies:
        _copies(args, data_dir)
    if args.model is not None:
        (_held_out if args.held_out else _settings)(args, data_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
