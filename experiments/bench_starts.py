"""Benchmark: the E-steps that run every start, run by run (which start wins, and what an early
stop of the losing runs would save and lose).

A default fit spends most of its sweeps in the E-steps that run every per-sequence start (the
first E-step and each refresh; ``bench_fit_cost`` counts them). This script fits one
``LDHMM(K, n_init=1)`` with every such E-step instrumented: for each bucket it records every
run's per-sequence ELBO after each sweep (the kernel's trace; recording changes no number).
It prints two tables:

1. Per run (the warm continuation first, then each start in the E-step's order) over the
   refreshes: sweeps per sequence (mean, median, 90th percentile), and on how many sequences
   the run ends above every run before it by more than ``1e-6`` relative (the warm run: above
   nothing; a start: a new per-sequence optimum the warm run would not have reached).
2. An early stop of runs that cannot win, simulated on the recorded traces: a run (not the
   first) stops on a sequence at sweep ``t >= min`` when its ELBO, extrapolated geometrically
   from its last two gains (``e_t + g_t q / (1 - q)``, ``q = g_t / g_(t-1)``), stays below
   the best final ELBO of the runs before it plus ``margin`` (relative). Columns: the share of
   these E-steps' sweeps saved, the ELBO lost per token and per E-step against the full runs
   (the per-sequence maximum with the stopped runs at their stopping value), and the
   sequence-E-steps that end below the full runs' best (by more than 1e-9 relative). It is a
   simulation on one EM path: it shows the first-order cost of the rule, not the fit it would give.
3. Whether a start's wins stay with the same sequences: at each refresh, the (sequence,
   start) pairs split by whether that start won the sequence at an earlier E-step of the fit,
   with their win rates and the ELBO they gain over the runs before them. Equal rates mean
   that running each start only where it won before would lose most of the gain.

    NUMBA_NUM_THREADS=1 python -m ldhmm.experiments.bench_starts --data-dir ../shared/data \\
        --dataset msnbc --n-sequences 3000 --states 8
"""

from __future__ import annotations

import argparse

import numpy as np

from ..data import resolve_data_dir
from ..inference.cavi import expectation
from ..models import LDHMM
from .earlier_commit import bench_sequences

__all__ = ["main", "record_starts", "run_table", "early_stop_table", "persistence_table"]

#: A run "wins" a sequence when it ends above every run before it by more than this (relative).
WIN_MARGIN = 1e-6


def record_starts() -> list:
    """Wrap the E-step so that every :func:`best_of_starts` call records its runs.

    Returns the list the calls append to: one entry per call (one bucket of one E-step),
    ``(labels, traces, first)``: the run labels (``"warm"`` and the expanded starts), each
    run's ELBO trace (M_b, sweeps), NaN after the sequence stopped, and the bucket's first
    sequence index (a new E-step begins where the first bucket comes again). For guides whose
    starts run no E-step of their own (PF's: prior, mean, random)."""
    calls = []
    current = []
    compiled, best_of_starts = expectation._e_step_compiled, expectation.best_of_starts

    def tracing_compiled(family, bucket, params, counts, phi, max_iter, tol, record_trace):
        out = compiled(family, bucket, params, counts, phi, max_iter, tol, True)
        current.append(out["trace"].numpy().copy())
        if not record_trace:
            out["trace"] = None
        return out

    def recording_best_of_starts(bucket, params, guide, starts, warm=None, *args, **kwargs):
        current.clear()
        result = best_of_starts(bucket, params, guide, starts, warm, *args, **kwargs)
        labels = (["warm"] if warm is not None else []) + list(
            expectation.expand_starts(starts, params.n_states)
        )
        if len(current) != len(labels):
            raise SystemExit(f"bench_starts: the starts {starts} run E-steps of their own; use the PF guide")
        calls.append((labels, list(current), int(bucket.index[0])))
        return result

    expectation._e_step_compiled = tracing_compiled
    expectation.best_of_starts = recording_best_of_starts
    return calls


def final_values(trace: np.ndarray) -> np.ndarray:
    """Each sequence's last recorded ELBO, shape (M_b,)."""
    last = (~np.isnan(trace)).sum(1) - 1
    return trace[np.arange(len(trace)), last]


def run_table(calls: list) -> list[str]:
    """Table 1 (see the module docstring) over the calls that have a warm run (the refreshes)."""
    refreshes = [c[:2] for c in calls if c[0][0] == "warm"]
    if not refreshes:
        return ["(no refresh E-step in this fit)"]
    labels = refreshes[0][0]
    rows = ["| run | sweeps/seq mean | median | p90 | sequences it wins |", "|---|---|---|---|---|"]
    n_seq = sum(len(t[0]) for _, t in refreshes)
    for r, label in enumerate(labels):
        sweeps = np.concatenate([(~np.isnan(t[r])).sum(1) for _, t in refreshes])
        wins = 0
        for _, traces in refreshes:
            finals = np.stack([final_values(t) for t in traces[: r + 1]])
            if r > 0:
                before = finals[:r].max(0)
                wins += int((finals[r] > before + WIN_MARGIN * np.abs(before)).sum())
        rows.append(
            f"| {label} | {sweeps.mean():.1f} | {np.median(sweeps):.0f} | {np.percentile(sweeps, 90):.0f} | "
            + (f"{wins} of {n_seq} ({wins / n_seq:.1%}) |" if r else "- |")
        )
    return rows


def _early_stop(traces: list, margin: float, first: int) -> tuple[int, int, np.ndarray]:
    """Simulate the rule on one call: (sweeps run, sweeps saved, per-sequence best kept)."""
    best = np.full(len(traces[0]), -np.inf)
    total = saved = 0
    for r, trace in enumerate(traces):
        n = (~np.isnan(trace)).sum(1)
        got = final_values(trace)
        total += int(n.sum())
        for m in range(len(trace) if r else 0):
            e = trace[m, : n[m]]
            for t in range(max(2, first), n[m]):
                gain, before = e[t] - e[t - 1], e[t - 1] - e[t - 2]
                if gain <= 0:
                    limit = e[t]
                elif before > gain:
                    q = gain / before
                    limit = e[t] + gain * q / (1 - q)
                else:
                    continue
                if limit <= best[m] + margin * abs(best[m]):
                    saved += int(n[m]) - (t + 1)
                    got[m] = e[t]
                    break
        best = np.maximum(best, got)
    return total, saved, best


def early_stop_table(calls: list, n_tokens: int, margins=(1e-3, 1e-6), firsts=(2, 3)) -> list[str]:
    """Table 2 (see the module docstring)."""
    rows = [
        "| margin | stop from sweep | sweeps saved | ELBO lost per token per E-step | sequences below |",
        "|---|---|---|---|---|",
    ]
    n_e_steps = max(1, sum(c[2] == calls[0][2] for c in calls))
    for margin in margins:
        for first in firsts:
            total = saved = changed = n_seq = 0
            lost = 0.0
            for _, traces, _ in calls:
                run_total, run_saved, kept = _early_stop(traces, margin, first)
                full = np.stack([final_values(t) for t in traces]).max(0)
                total, saved = total + run_total, saved + run_saved
                lost += float((full - kept).sum())
                changed += int((full - kept > 1e-9 * np.abs(full)).sum())
                n_seq += len(full)
            rows.append(
                f"| {margin:g} | {first + 1} | {saved / max(total, 1):.1%} | "
                f"{lost / n_tokens / n_e_steps:.2e} | {changed} of {n_seq} |"
            )
    return rows


def persistence_table(calls: list) -> list[str]:
    """Table 3 (see the module docstring)."""
    won_before = {}  # bucket -> (starts, M_b) bool: the start won the sequence at an earlier E-step
    tally = {True: [0, 0, 0.0], False: [0, 0, 0.0]}  # pairs, wins, ELBO gained
    for labels, traces, first in calls:
        finals = np.stack([final_values(t) for t in traces])
        warm = labels[0] == "warm"
        starts = finals[1:] if warm else finals
        earlier = won_before.setdefault(first, np.zeros(starts.shape, bool))
        # the first E-step has no warm run: its first start beats nothing
        best = (finals[0] if warm else starts[0]).copy()
        won = np.zeros(starts.shape, bool)
        for s, run in enumerate(starts):
            if s == 0 and not warm:
                continue
            win = run > best + WIN_MARGIN * np.abs(best)
            if warm:
                for prior_win in (True, False):
                    pairs = earlier[s] == prior_win
                    tally[prior_win][0] += int(pairs.sum())
                    tally[prior_win][1] += int((win & pairs).sum())
                    tally[prior_win][2] += float((run - best)[win & pairs].sum())
            won[s] = win
            best = np.maximum(best, run)
        earlier |= won
    rows = [
        "| (sequence, start) pairs at a refresh | pairs | wins | win rate | ELBO gained |",
        "|---|---|---|---|---|",
    ]
    for prior_win, label in ((True, "the start won it at an earlier E-step"), (False, "it never did")):
        pairs, wins, gain = tally[prior_win]
        rows.append(f"| {label} | {pairs} | {wins} | {wins / max(pairs, 1):.2%} | {gain:.1f} |")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--dataset", default="msnbc", help="entree, msnbc or msnbc-short")
    p.add_argument("--n-sequences", type=int, default=3000, help="the first N sequences only (0: all)")
    p.add_argument("--states", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    seqs, V = bench_sequences(args.dataset, resolve_data_dir(args.data_dir), args.n_sequences or None)
    n_tokens = sum(map(len, seqs))
    calls = record_starts()
    model = LDHMM(args.states, n_symbols=V, seed=args.seed, n_init=1).fit(seqs)
    print(
        f"{args.dataset}: {len(seqs)} sequences, {n_tokens} tokens, V = {V}, K = {args.states}, "
        f"seed {args.seed}, n_init 1: {model.n_iter_} EM iterations, {len(calls)} bucket calls "
        "of the E-steps with every start\n"
    )
    print("\n".join(run_table(calls)))
    print()
    print("\n".join(early_stop_table(calls, n_tokens)))
    print()
    print("\n".join(persistence_table(calls)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
