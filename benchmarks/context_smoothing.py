"""Benchmark: next-event log loss of the contextual variants against ``context_smoothing``.

Fits ``ContextualLDHMM(K, emission_context=order, context_smoothing=s)`` on the first ``--n``
training sequences of fold 0 of the MSNBC subset (``kfold_indices(M, 5, seed=0)``), predicts
the last event of up to 2,000 held-out sequences from their prefixes, and prints log loss and
hit@1 beside the interpolated Markov chains'::

    python benchmarks/context_smoothing.py --data-dir ../shared/data --n 6000 --orders 1 3 \\
        --smoothing 0 0.3 1 3 10 30 100 300 chain

Backs the smoothing sweep of experiments/README.md ("emissions that see the previous event").
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import print_table_header

from ldhmm.baselines.markov_smoothed import SmoothedMarkovChain
from ldhmm.data import kfold_indices
from ldhmm.experiments.datasets import select_database
from ldhmm.models.contextual import ContextualLDHMM
from ldhmm.models.predictive_scores import prediction_scores

__all__ = ["main", "parse_smoothing", "next_event_split"]


def parse_smoothing(text: str):
    """A ``--smoothing`` value: ``chain`` or a number."""
    return text if text == "chain" else float(text)


def next_event_split(sequences: list, n_train: int, n_test: int = 2000, seed: int = 0):
    """(training sequences, held-out prefixes, their last events) of fold 0 of 5."""
    train_idx, test_idx = kfold_indices(len(sequences), 5, seed=seed)[0]
    train = [sequences[i] for i in train_idx[:n_train]]
    test = [sequences[i] for i in test_idx if len(sequences[i]) >= 2][:n_test]
    return train, [s[:-1] for s in test], np.array([s[-1] for s in test])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="the UCI data (default $LDHMM_DATA)")
    parser.add_argument("--n", type=int, default=6000, help="training sequences (default 6000)")
    parser.add_argument("--states", type=int, default=4, help="K (default 4)")
    parser.add_argument("--orders", type=int, nargs="+", default=[1, 3], help="context orders (default 1 3)")
    parser.add_argument(
        "--smoothing",
        type=parse_smoothing,
        nargs="+",
        default=[0.0, 1.0, 10.0, 100.0, "chain"],
        help="context_smoothing values: numbers or chain (default 0 1 10 100 chain)",
    )
    args = parser.parse_args(argv)
    db, _ = select_database("msnbc", None, args.data_dir, None, 0)
    train, prefixes, targets = next_event_split(db.sequences, args.n)
    V = db.n_symbols
    print(
        f"MSNBC fold 0 of 5: {len(train)} training sequences, {len(prefixes)} predictions, K = {args.states}"
    )
    print_table_header("| model | context_smoothing | log loss | hit@1 | fit CPU s | EM iterations |")
    for order in (1, 3):
        s = prediction_scores(
            SmoothedMarkovChain(n_symbols=V, order=order).fit(train).predict_next_proba(prefixes), targets
        )
        print(f"| MARKOV{order} | — | {s['log_loss']:.4f} | {s['hit1']:.3f} | — | — |", flush=True)
    for order in args.orders:
        for smoothing in args.smoothing:
            t0 = time.process_time()
            model = ContextualLDHMM(
                args.states, n_symbols=V, emission_context=order, context_smoothing=smoothing
            ).fit(train)
            cpu = time.process_time() - t0
            s = prediction_scores(model.predict_next_proba(prefixes), targets)
            print(
                f"| ctx{order} | {smoothing} | {s['log_loss']:.4f} | {s['hit1']:.3f} | {cpu:.1f} | "
                f"{model.n_iter_} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
