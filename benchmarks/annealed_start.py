"""Benchmark: a deterministic-annealing start against the E-step's starts (issue 44, direction 3).

Where a fit runs every start (its refreshes) and where scoring does (the held-out E-step), each
sequence keeps the best of several coordinate ascents: today ``"prior"``, ``"mean"`` and three
random draws for PF (FF adds ``"chain"``). This script asks whether a *deterministic-annealing*
start (Ueda & Nakano 1998; Katahira et al. 2008 for HMMs) reaches the same per-sequence optima
for fewer sweeps, in place of the random draws. The annealed start runs q(Z) under the tempered
potentials ``t * (E log pi, E log A, E log B)`` (the guide's own update, so the tempered q(Z)
stays in its family and the bound stays a bound), ``t`` rising geometrically from ``t0`` to 1
over ``--anneal-sweeps`` sweeps from the cold start, then ordinary sweeps at ``t = 1`` until the
E-step's convergence rule stops it.

For every (data set, K, guide, seed) it fits ``LDHMM(K, guide=G, seed=seed)`` (the defaults),
then runs one E-step over the training sequences at the fitted priors from each start alone
and prints, for each *set* of starts, the bound a best-of-starts E-step reaches (each
sequence's maximum over the set's runs, :func:`ldhmm.inference.cavi.sequence_starts.best_of_starts`)
against today's set, per token; its work in sequence-sweeps per sequence (counted, not timed:
the split holds on a busy machine); and the share of sequences at or above today's optimum
(relative 1e-6). The annealed start runs the torch route (the compiled kernel has no
temperature); its sweeps are counted as the kernel's would be. Where the fit runs every start is
measured by ``benchmarks/fit_cost.py``::

    python benchmarks/annealed_start.py --data-dir ../shared/data --datasets entree msnbc:3000 \\
        --states 4 8 --guides pf ff --seeds 0 1
"""

from __future__ import annotations

import torch
from _common import add_grid_arguments, benchmark_parser, print_table_header
from effort_grid import dataset_sequences
from fit_cost import instrument

from ldhmm.data import resolve_data_dir
from ldhmm.inference.batch import make_buckets
from ldhmm.inference.cavi.expectation import e_step_bucket
from ldhmm.inference.cavi.guides import resolve_guide
from ldhmm.inference.cavi.sequence_starts import default_starts, start_state
from ldhmm.models import LDHMM

__all__ = ["AnnealedGuide", "temperature", "start_sets", "best_per_sequence", "main"]

#: Sequences whose bound is within this relative distance of today's count as at its optimum.
AT_OPTIMUM_RTOL = 1e-6


def temperature(sweep: int, t0: float, n_sweeps: int) -> float:
    """The temperature of the annealed start's ``sweep``-th sweep (1-based): ``t0`` at the
    first, rising geometrically to 1 at sweep ``n_sweeps + 1`` and held there."""
    if sweep > n_sweeps:
        return 1.0
    return t0 ** (1.0 - (sweep - 1) / n_sweeps)


class AnnealedGuide:
    """``base``'s q(Z) update under tempered potentials (:func:`temperature` of the sweep),
    counting sequence-sweeps in ``work``. The tempered q(Z) is a member of ``base``'s family, so
    the driver's bound stays a bound; from ``n_sweeps + 1`` on it is ``base``'s update itself."""

    compiled_update = None  # its own update: the torch route runs it

    def __init__(self, base, t0: float, n_sweeps: int):
        self.base, self.t0, self.n_sweeps = base, float(t0), int(n_sweeps)
        self.name = f"{base.name}-annealed"
        self.work = 0

    def init_state(self, log_initial, log_transition, log_obs, mask):
        t = self.t0
        return self.base.init_state(t * log_initial, t * log_transition, t * log_obs, mask)

    def update_hidden(self, state, log_initial, log_transition, log_obs, mask, *, iteration=None, sweep=1):
        self.work += int(log_obs.shape[0])
        t = temperature(sweep, self.t0, self.n_sweeps)
        return self.base.update_hidden(state, t * log_initial, t * log_transition, t * log_obs, mask)

    def select_state(self, state, index):
        return self.base.select_state(state, index)

    def scatter_state(self, state, index, part):
        return self.base.scatter_state(state, index, part)


def start_sets(today: tuple, annealed: list[str]) -> dict:
    """The sets of starts compared: ``today``'s (the guide's :func:`default_starts`), each start
    alone, the deterministic ones (today's less its random draws), and those with each
    annealed start in place of the random draws, or beside the first."""
    deterministic = tuple(s for s in today if not s.startswith("random:"))
    sets = {"today: " + ", ".join(today): today}
    sets.update({s: (s,) for s in today + tuple(annealed)})
    sets[", ".join(deterministic)] = deterministic
    for a in annealed:
        sets[", ".join(deterministic + (a,))] = deterministic + (a,)
        sets[", ".join(deterministic + (a, "random:0"))] = deterministic + (a, "random:0")
    return sets


def best_per_sequence(runs: dict, members: tuple) -> tuple[torch.Tensor, float]:
    """Each sequence's best bound over the runs of ``members`` (what a best-of-starts E-step
    keeps) and their work: ``runs`` maps a start to (bounds (M,), sequence-sweeps)."""
    bounds = torch.stack([runs[s][0] for s in members]).max(0).values
    return bounds, float(sum(runs[s][1] for s in members))


def _runs(buckets, params, guide, starts, annealing, work) -> dict:
    """Per start: (every sequence's bound after one E-step from it, its sequence-sweeps)."""
    runs = {}
    for start in starts:
        before = work["sweeps"]
        states = [
            e_step_bucket(b, params, guide, start_state(start, b, params, guide, 100, 1e-6)) for b in buckets
        ]
        runs[start] = (torch.cat([s.elbo for s in states]), work["sweeps"] - before)
    for label, (t0, n_sweeps) in annealing.items():
        # the torch route: the same guide without its compiled declaration
        annealed = AnnealedGuide(type(guide)(compiled=False), t0, n_sweeps)
        states = [e_step_bucket(b, params, annealed, None, max_iter=100 + n_sweeps) for b in buckets]
        runs[label] = (torch.cat([s.elbo for s in states]), annealed.work)
    return runs


def main(argv=None) -> int:
    p = benchmark_parser(__doc__)
    add_grid_arguments(p)
    p.add_argument(
        "--t0", type=float, nargs="+", default=[0.05, 0.2], help="the annealed starts' first temperatures"
    )
    p.add_argument("--anneal-sweeps", type=int, default=10, help="sweeps until t = 1")
    args = p.parse_args(argv)
    data_dir = resolve_data_dir(args.data_dir)
    work = instrument()
    annealing = {f"annealed:{t0:g}": (t0, args.anneal_sweeps) for t0 in args.t0}
    print_table_header(
        "| data | K | guide | seed | starts | bound - today's, nats/token | sweeps/seq | x today's sweeps | "
        "sequences at today's optimum |"
    )
    for dataset, seqs, V in dataset_sequences(args.datasets, data_dir):
        n_tokens, M = sum(map(len, seqs)), len(seqs)
        buckets = make_buckets(seqs)
        for K in args.states:
            for guide_name in args.guides:
                for seed in args.seeds:
                    model = LDHMM(K, n_symbols=V, seed=seed, guide=guide_name).fit(seqs)
                    guide = resolve_guide(guide_name)
                    today = default_starts(guide)
                    runs = _runs(buckets, model.params_, guide, today, annealing, work)
                    reference, reference_work = best_per_sequence(runs, today)
                    for label, members in start_sets(today, list(annealing)).items():
                        bounds, sweeps = best_per_sequence(runs, members)
                        at = (bounds >= reference - AT_OPTIMUM_RTOL * reference.abs()).double().mean()
                        print(
                            f"| {dataset} | {K} | {guide_name.upper()} | {seed} | {label} | "
                            f"{float(bounds.sum() - reference.sum()) / n_tokens:+.6f} | {sweeps / M:.1f} | "
                            f"{sweeps / reference_work:.2f} | {float(at):.3f} |",
                            flush=True,
                        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
