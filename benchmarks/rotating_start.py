"""Benchmark: the rotating start stopped after a few sweeps (issue 44, direction 3).

At ``effort="standard"`` every E-step that is no refresh runs each sequence's warm run and one
new start (the *rotating start*, :func:`ldhmm.inference.cavi.sequence_starts.rotating_start`),
both to convergence, and keeps the better per sequence. On MSNBC that start is most of a default
fit's sweeps (``benchmarks/fit_cost.py``). This script asks whether the start needs to run to
convergence: with ``--caps S ...`` the start stops after ``S`` sweeps and is kept for a sequence
where its bound is then above the warm run's (the next E-step's warm run carries it on), so the
EM objective still never decreases. ``none`` is today's rotating start.

For every (data set, K, guide, seed, cap) it fits ``LDHMM(K, guide=G, seed=seed)`` (the
defaults) and prints the final training ELBO per token against the uncapped fit of the same
seed, and the work in sequence-sweeps per sequence (all E-steps; the rotating E-steps apart),
counted, not timed, so the table holds on a busy machine. ``--screen`` adds, per uncapped fit,
how the rotating start's runs go: how often and by how much a start ends above the warm run,
and for each S of ``--caps`` the share of sequences where it is still below the warm run after
S sweeps and the share of its final gains these hold (what a cap or a screen after S sweeps
gives up at that E-step)::

    NUMBA_NUM_THREADS=1 python benchmarks/rotating_start.py --data-dir ../shared/data \\
        --datasets entree msnbc:3000 --states 4 8 --guides pf ff --seeds 0 1 --caps none 3 5 --screen
"""

from __future__ import annotations

import numpy as np
import torch
from _common import add_grid_arguments, benchmark_parser, print_table_header
from effort_grid import dataset_sequences
from fit_cost import instrument

from ldhmm.data import resolve_data_dir
from ldhmm.inference.cavi import e_step_totals, sequence_starts
from ldhmm.inference.cavi.expectation import e_step_bucket
from ldhmm.models import LDHMM

__all__ = ["CappedStarts", "screen_summary", "main"]


class CappedStarts:
    """A stand-in for :func:`ldhmm.inference.cavi.sequence_starts.best_of_starts` (installed
    with :meth:`install`): the rotating E-step (a warm state and one start) stops the start
    after ``cap`` sweeps and keeps, per sequence, the better of the warm run and the start's;
    every other call, and every call with ``cap`` None, is today's. With ``screen`` set it also
    records, for each rotating E-step of an uncapped run, every sequence's warm bound, the
    start's bound after each of ``screen`` sweeps and at convergence, and its weight; these
    runs are left out of ``work`` (:func:`fit_cost.instrument`'s counter)."""

    def __init__(self, work, cap: int | None = None, screen: tuple = ()):
        self.work, self.cap, self.screen, self.records = work, cap, tuple(screen), []

    def install(self) -> None:
        """Route the E-step's best-of-starts calls through this object (in place)."""
        self.today = sequence_starts.best_of_starts
        e_step_totals.best_of_starts = self

    def __call__(
        self, bucket, params, guide, starts, warm=None, max_iter=100, tol=1e-6, iteration=None, log_sums=True
    ):
        if warm is None or len(starts) != 1 or self.cap is None:
            if self.screen and warm is not None and len(starts) == 1:
                self._record(bucket, params, guide, starts[0], warm, max_iter, tol, iteration)
            return self.today(
                bucket,
                params,
                guide,
                starts,
                warm,
                max_iter=max_iter,
                tol=tol,
                iteration=iteration,
                log_sums=log_sums,
            )
        run = e_step_bucket(
            bucket, params, guide, warm, max_iter=max_iter, tol=tol, consume_state=True, iteration=iteration
        )
        begin = sequence_starts.start_state(starts[0], bucket, params, guide, max_iter, tol, 1)
        start = e_step_bucket(
            bucket,
            params,
            guide,
            begin,
            max_iter=self.cap,
            tol=tol,
            consume_state=True,
            iteration=iteration,
        )
        return sequence_starts._best_per_sequence([run, start], bucket, params, guide, log_sums)

    def _record(self, bucket, params, guide, start, warm, max_iter, tol, iteration) -> None:
        """One rotating E-step's runs on copies (the fit's own runs follow unchanged), their
        sweeps not counted."""
        counted = self.work["sweeps"]

        def run(state, n_sweeps):
            return e_step_bucket(
                bucket, params, guide, state, max_iter=n_sweeps, tol=tol, iteration=iteration
            )

        def begin():
            return sequence_starts.start_state(start, bucket, params, guide, max_iter, tol, 1)

        warm_run = run(warm, max_iter)
        final = run(begin(), max_iter)
        weights = bucket.weights.double() if bucket.weights is not None else torch.ones(bucket.n_sequences)
        self.records.append(
            {
                "warm": warm_run.elbo.numpy(),
                "final": final.elbo.numpy(),
                "at": np.stack([run(begin(), s).elbo.numpy() for s in self.screen]),
                "weights": weights.numpy(),
                "iteration": iteration,
            }
        )
        self.work["sweeps"] = counted


def screen_summary(records: list, n_tokens: int, screen: tuple) -> dict:
    """What :class:`CappedStarts` recorded, over a fit's rotating E-steps: the share of sequences
    whose start ends above its warm run (``wins``), their gain in nats per token per rotating
    E-step, and for each S of ``screen`` the share of sequences still below the warm run after S
    sweeps (``behind``) and the share of the final gain that those sequences hold (``lost``)."""
    warm = np.concatenate([r["warm"] for r in records])
    final = np.concatenate([r["final"] for r in records])
    at = np.concatenate([r["at"] for r in records], axis=1)
    weights = np.concatenate([r["weights"] for r in records])
    gain = np.maximum(final - warm, 0.0) * weights
    out = {
        "wins": float(((final > warm) * weights).sum() / weights.sum()),
        "gain": float(gain.sum() / n_tokens / len({r["iteration"] for r in records})),
    }
    for i, s in enumerate(screen):
        behind = at[i] < warm
        out[f"behind after {s}"] = float((behind * weights).sum() / weights.sum())
        out[f"lost after {s}"] = float((gain * behind).sum() / gain.sum()) if gain.sum() > 0 else 0.0
    return out


def _cap(text: str) -> int | None:
    return None if text == "none" else int(text)


def main(argv=None) -> int:
    p = benchmark_parser(__doc__)
    add_grid_arguments(p)
    p.add_argument(
        "--caps", type=_cap, nargs="+", default=[None, 3, 5], help="sweeps, or none (default: none 3 5)"
    )
    p.add_argument("--screen", action="store_true", help="also how the uncapped fit's rotating starts go")
    args = p.parse_args(argv)
    caps = [None] + [c for c in args.caps if c is not None]
    screen = tuple(c for c in args.caps if c is not None)
    work = instrument()
    stand_in = CappedStarts(work)
    stand_in.install()
    print_table_header(
        "| data | K | guide | seed | rotating start | ELBO/tok | - uncapped | sweeps/seq | x uncapped | "
        "in rotating E-steps |"
    )
    screens = []
    for dataset, seqs, V in dataset_sequences(args.datasets, resolve_data_dir(args.data_dir)):
        n_tokens, M = sum(map(len, seqs)), len(seqs)
        for K in args.states:
            for guide in args.guides:
                for seed in args.seeds:
                    reference = None
                    for cap in caps:
                        stand_in.cap, stand_in.records = cap, []
                        stand_in.screen = screen if args.screen and cap is None else ()
                        work.clear()
                        model = LDHMM(K, n_symbols=V, seed=seed, guide=guide).fit(seqs)
                        elbo = model.elbo_history_[-1] / n_tokens
                        sweeps = work["sweeps"]
                        reference = reference or (elbo, sweeps)
                        label = "to convergence" if cap is None else f"{cap} sweeps"
                        print(
                            f"| {dataset} | {K} | {guide.upper()} | {seed} | {label} | {elbo:.6f} | "
                            f"{elbo - reference[0]:+.6f} | {sweeps / M:.0f} | {sweeps / reference[1]:.2f} | "
                            f"{work['one start'] / M:.0f} |",
                            flush=True,
                        )
                        if stand_in.records:
                            screens.append(
                                (dataset, K, guide, seed, screen_summary(stand_in.records, n_tokens, screen))
                            )
    if screens:
        keys = list(screens[0][4])
        print()
        print_table_header("| data | K | guide | seed | " + " | ".join(keys) + " |")
        for dataset, K, guide, seed, summary in screens:
            print(
                f"| {dataset} | {K} | {guide.upper()} | {seed} | "
                + " | ".join(f"{summary[k]:.4g}" for k in keys)
                + " |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
