"""Benchmark: where LDHMM-PF's splice AUCs come from: each start policy's class fits and AUCs.

Table 3's protocol at one K (``--states``, default 2: a path's first K is a fit of its own, so
these are the harness's fits there): the same ``--folds`` stratified folds of all 3,190
sequences (seeded as ``ldhmm classify`` seeds them), one ``LDHMM(K, n_symbols=V, seed=--seed,
n_init=3)`` per class and fold for each candidate, each candidate's test scores
(``score_samples``, the held-out bound) giving the AUC of every pair of classes. Besides the
AUCs it prints what the fits reach: per class, the mean training ELBO per token, the mean
held-out bound per token of the class's own test sequences, where the kept run started and the
CPU seconds, each against the reference candidate's (``--reference``, paired over folds).

A candidate is ``LABEL=JSON``: the fit's settings (``{}``: the defaults), or a JSON list of
settings, the fits of which race as one start policy: the one with the highest final training
ELBO kept (the first on a tie), their CPU seconds summed. The default candidates are the
defaults (``standard``), the v4 defaults (``thorough``), v3's starts (``restarts``: the random
restarts without the symbol-seeded start) and the defaults with one random restart raced
beside (``standard+restart``)::

    NUMBA_NUM_THREADS=1 python benchmarks/splice_starts.py --data-dir ../shared/data --states 2
"""

from __future__ import annotations

import json
import time

import numpy as np
from _common import benchmark_parser, parse_candidate, print_table_header
from sklearn.metrics import roc_auc_score

from ldhmm.data import kfold_indices, resolve_data_dir
from ldhmm.data.uci import load_splice
from ldhmm.models import LDHMM

__all__ = ["main", "fit_candidate", "auc_rows", "class_rows", "DEFAULT_CANDIDATES"]

#: (label, settings or a list of settings raced) of the default candidates.
DEFAULT_CANDIDATES = [
    ("standard", {}),
    ("thorough", {"effort": "thorough"}),
    ("restarts", {"effort": "thorough", "seeded_start": "none"}),
    ("standard+restart", [{}, {"start_policy": "restarts", "n_init": 1, "seeded_start": "none"}]),
]


def fit_candidate(settings, K: int, V: int, seed: int, sequences) -> tuple[LDHMM, float]:
    """The kept fit of a candidate (``settings``: a dict, or a list of dicts raced by final
    training ELBO, the first kept on a tie) and the CPU seconds of all its fits."""
    races = settings if isinstance(settings, list) else [settings]
    kept, cpu = None, 0.0
    for options in races:
        start = time.process_time()
        model = LDHMM(K, n_symbols=V, seed=seed, **{"n_init": 3, **options}).fit(sequences)
        cpu += time.process_time() - start
        if kept is None or model.elbo_history_[-1] > kept.elbo_history_[-1]:
            kept = model
    return kept, cpu


def auc_rows(aucs: dict, reference: str) -> list[dict]:
    """Per task and candidate: the mean AUC over folds with its standard error, and the mean
    paired difference to ``reference``'s with its standard error.

    ``aucs``: (task, candidate) -> list of AUCs, one per fold, the folds in the same order."""
    rows = []
    for (task, label), values in aucs.items():
        v, ref = np.asarray(values), np.asarray(aucs[(task, reference)])
        diff = v - ref
        rows.append(
            {
                "task": task,
                "candidate": label,
                "auc": float(v.mean()),
                "se": float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0,
                "diff": float(diff.mean()),
                "diff_se": float(diff.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0,
            }
        )
    return rows


def class_rows(fits: dict, reference: str) -> list[dict]:
    """Per class and candidate: means over folds of the training ELBO per token, the held-out
    bound per token of the class's own test sequences and the CPU seconds; the training ELBO's
    paired difference to ``reference``'s (mean, min, max); how often each start was kept.

    ``fits``: (class, candidate) -> list (one per fold, in order) of dicts with ``elbo``,
    ``held_out``, ``cpu`` and ``start``."""
    rows = []
    for (cls, label), runs in fits.items():
        ref = fits[(cls, reference)]
        diff = np.array([r["elbo"] - q["elbo"] for r, q in zip(runs, ref)])
        starts = [r["start"] for r in runs]
        rows.append(
            {
                "class": cls,
                "candidate": label,
                "elbo": float(np.mean([r["elbo"] for r in runs])),
                "diff": float(diff.mean()),
                "diff_low": float(diff.min()),
                "diff_high": float(diff.max()),
                "held_out": float(np.mean([r["held_out"] for r in runs])),
                "cpu": float(np.mean([r["cpu"] for r in runs])),
                "starts": ", ".join(f"{s} {starts.count(s)}" for s in sorted(set(starts), key=starts.index)),
            }
        )
    return rows


def main(argv=None) -> int:
    p = benchmark_parser(__doc__)
    p.add_argument("--states", type=int, default=2, help="K (default 2)")
    p.add_argument("--folds", type=int, default=10)
    p.add_argument("--seed", type=int, default=0, help="seed of the folds and of every fit")
    p.add_argument("--candidates", nargs="+", type=parse_candidate, default=DEFAULT_CANDIDATES)
    p.add_argument("--reference", default="standard", help="a candidate's label")
    args = p.parse_args(argv)
    if args.reference not in [label for label, _ in args.candidates]:
        p.error(f"--reference {args.reference!r} is no candidate's label")
    db = load_splice(resolve_data_dir(args.data_dir))
    names, V = db.label_names, db.n_symbols
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    aucs: dict = {(f"{a}-{b}", label): [] for a, b in pairs for label, _ in args.candidates}
    fits: dict = {(c, label): [] for c in names for label, _ in args.candidates}
    for fold, (train, test) in enumerate(kfold_indices(db, args.folds, seed=args.seed)):
        test_seqs, test_labels = db.subset(test).sequences, db.labels[test]
        for label, settings in args.candidates:
            scores = {}
            for ci, cls in enumerate(names):
                sequences = db.subset(train[db.labels[train] == ci]).sequences
                model, cpu = fit_candidate(settings, args.states, V, args.seed, sequences)
                scores[cls] = np.asarray(model.score_samples(test_seqs), dtype=np.float64)
                own = test_labels == ci
                fits[(cls, label)].append(
                    {
                        "elbo": float(model.elbo_history_[-1]) / sum(map(len, sequences)),
                        "held_out": float(scores[cls][own].sum())
                        / sum(len(s) for s, o in zip(test_seqs, own) if o),
                        "cpu": cpu,
                        "start": model.start_kind_,
                    }
                )
            for a, b in pairs:
                mask = np.isin(test_labels, [names.index(a), names.index(b)])
                truth = (test_labels[mask] == names.index(a)).astype(int)
                aucs[(f"{a}-{b}", label)].append(float(roc_auc_score(truth, (scores[a] - scores[b])[mask])))
        print(f"fold {fold} done", flush=True)
    candidates = json.dumps(dict(args.candidates))
    print(f"\nK = {args.states}, {args.folds} folds, seed {args.seed}; candidates: {candidates}\n")
    print_table_header("| task | candidate | AUC (mean +- SE) | minus the reference (mean +- SE, paired) |")
    for r in auc_rows(aucs, args.reference):
        print(
            f"| {r['task']} | {r['candidate']} | {r['auc']:.3f} +- {r['se']:.3f} | "
            f"{r['diff']:+.3f} +- {r['diff_se']:.3f} |"
        )
    print()
    print_table_header(
        "| class | candidate | training ELBO/tok (mean) | minus the reference (mean; min..max) | "
        "held-out bound/tok, own class (mean) | kept start (folds) | CPU s (mean) |"
    )
    for r in class_rows(fits, args.reference):
        print(
            f"| {r['class']} | {r['candidate']} | {r['elbo']:.5f} | {r['diff']:+.5f}; {r['diff_low']:+.5f}.."
            f"{r['diff_high']:+.5f} | {r['held_out']:.5f} | {r['starts']} | {r['cpu']:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
