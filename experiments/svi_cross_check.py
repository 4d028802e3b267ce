"""The SVI route's LDHMM fit against the closed-form fit, by importance-sampled log p(x).

The two routes fit the same model (LDHMM's Dirichlet hyper-parameters) under different
variational families: the closed form (LDHMM-PF) with a factorized ``q(Z)``, the SVI route
(:func:`ldhmm.models.pyro_model.ldhmm_sequence_model` with the per-sequence Dirichlet mean
field, started at the PF E-step) with the hidden chain summed out. Their held-out bounds are of
different families, so the bounds cannot say which fit is the better model of the data (the
route's is the tighter bound for the same hyper-parameters); their log p(x) can. Each model
estimates it by importance sampling with its own fitted ``q(theta_m)`` as the proposal, and
reports the estimate's standard error.

This is ``ldhmm.compare`` of two models, so the run resumes, writes ``folds.csv`` (with
``heldout_is``, ``is_std_error``, ``is_min_ess``), ``ttests.csv`` (paired by log p(x)) and
``summary.md``; :func:`log_px_table` condenses it::

    python -m ldhmm.experiments.svi_cross_check --data entree --states 2 3 4 5 6 --folds 10 --jobs 2

(experiments/README.md, "Variants written in Pyro", has the table and what it took.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..inference.svi.dirichlet_guide import DirichletMeanField
from ..models.pyro_model import ldhmm_init, ldhmm_pf_offsets, ldhmm_sequence_model
from ..models.pyro_sequence import PyroSequenceModel
from .compare import ComparisonResult, compare, ttests

__all__ = [
    "ROUTE",
    "CLOSED_FORM",
    "ldhmm_route",
    "cross_check",
    "finished_tasks",
    "log_px_table",
    "markdown",
    "main",
]

#: The names of the two fits in the run's tables.
ROUTE, CLOSED_FORM = "LDHMM-SVI", "LDHMM-PF"


def ldhmm_route(n_states: int, n_symbols: int, seed: int = 0, **options) -> PyroSequenceModel:
    """The harness factory of the SVI route's LDHMM: the model
    :func:`~ldhmm.models.pyro_model.ldhmm_sequence_model`, the closed form's seeded start
    (:func:`~ldhmm.models.pyro_model.ldhmm_init`), each sequence's ``q(theta_m)`` started at its
    PF E-step (options: those of :class:`~ldhmm.models.pyro_sequence.PyroSequenceModel`)."""
    guide = DirichletMeanField(ldhmm_sequence_model, init_offsets=ldhmm_pf_offsets)
    model = PyroSequenceModel(
        ldhmm_sequence_model, guide, n_states, n_symbols=n_symbols, init=ldhmm_init, seed=seed, **options
    )
    model.factory = f"{__name__}:ldhmm_route"  # what model.save records, to rebuild it on load
    return model


def cross_check(data="entree", states=(2, 3, 4, 5, 6), out=None, **settings) -> ComparisonResult:
    """``ldhmm.compare`` of the route's LDHMM fit (:func:`ldhmm_route`) and the closed form's, into
    ``out`` (default ``results/svi-cross-check-<data>``); ``settings``: the other keywords of
    :func:`ldhmm.compare` (``folds``, ``jobs``, ``seed``, ``data_dir``, ``restarts``, ``is_samples``)."""
    return compare(
        {ROUTE: ldhmm_route, CLOSED_FORM: None},
        data,
        states=list(states),
        out=out or f"results/svi-cross-check-{data}",
        quiet=True,
        **settings,
    )


def finished_tasks(out) -> pd.DataFrame:
    """The fold rows of the tasks of run ``out`` that have finished (``out/tasks/*.json``): the
    rows of ``folds.csv`` so far, to tabulate a run that is still going or was stopped."""
    rows = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(Path(out).glob("tasks/*.json"))]
    return pd.DataFrame([{k: v for k, v in row.items() if k != "path_states"} for row in rows])


def log_px_table(folds: pd.DataFrame) -> pd.DataFrame:
    """One row per K: each fit's importance-sampled log p(x) per test fold (mean ± std over the
    folds), the mean over folds of the estimate's standard error, and the paired difference
    (route - closed form) with its two-tailed t-test over the folds both have
    (:func:`ldhmm.experiments.compare.ttests`, by log p(x): the two bounds are of two families).

    Parameters
    ----------
    folds : pd.DataFrame
        Rows of ``folds.csv`` (:attr:`ComparisonResult.folds`, or :func:`finished_tasks`).

    Returns
    -------
    pd.DataFrame, index K, columns ``n_folds``, ``<model> log p(x)``, ``<model> IS s.e.`` (for
    both models), ``difference``, ``p``.
    """
    df = folds
    tt = ttests(df, [ROUTE, CLOSED_FORM])
    rows = []
    for K in sorted(df["K"].dropna().unique()):
        dk = df[df["K"] == K]
        row = {"K": int(K)}
        for name in (ROUTE, CLOSED_FORM):
            dm = dk[dk["model"] == name]
            est = dm["heldout_is"].to_numpy(float)
            spread = np.std(est, ddof=1) if len(est) > 1 else 0.0
            row[f"{name} folds"] = len(est)
            row[f"{name} log p(x)"] = f"{np.mean(est):.2f} ± {spread:.2f}" if len(est) else ""
            row[f"{name} IS s.e."] = (
                round(float(np.mean(dm["is_std_error"].to_numpy(float))), 3) if len(est) else ""
            )
        pair = tt["model_a"].isin([ROUTE, CLOSED_FORM]) & tt["model_b"].isin([ROUTE, CLOSED_FORM])
        test = tt[(tt["K"] == K) & pair & tt["measure"].str.startswith("log p(x)")]
        row.update({"paired folds": 0, "difference": "", "p": ""})
        if len(test) and int(test["n_folds"].iloc[0]) >= 2:
            sign = 1.0 if test["model_a"].iloc[0] == ROUTE else -1.0  # route - closed form
            row["paired folds"] = int(test["n_folds"].iloc[0])
            row["difference"] = round(sign * float(test["mean_diff"].iloc[0]), 2)
            row["p"] = float(f"{float(test['p_value'].iloc[0]):.2g}")
        rows.append(row)
    return pd.DataFrame(rows).set_index("K")


def markdown(table: pd.DataFrame) -> str:
    """``table`` (index K) as a Markdown table, as experiments/README.md quotes it."""
    columns = ["K", *table.columns]
    lines = ["| " + " | ".join(map(str, columns)) + " |", "|" + "---|" * len(columns)]
    for K, row in table.iterrows():
        lines.append("| " + " | ".join(str(v) for v in [K, *row.tolist()]) + " |")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="entree", help="entree, msnbc, synthetic or a data file")
    p.add_argument("--states", nargs="+", type=int, default=[2, 3, 4, 5, 6])
    p.add_argument("--folds", type=int, default=10)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--restarts", type=int, default=3, help="restarts of the closed-form fit")
    p.add_argument("--is-samples", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default=None)
    p.add_argument(
        "--finished",
        metavar="OUT",
        default=None,
        help="only tabulate the tasks of run OUT that have finished (a run still going, or stopped)",
    )
    return p.parse_args(argv)


def main(argv=None) -> pd.DataFrame:
    args = parse_args(argv)
    if args.finished:
        table = log_px_table(finished_tasks(args.finished))
        print(markdown(table))
        return table
    result = cross_check(**{k: v for k, v in vars(args).items() if k != "finished"})
    table = log_px_table(result.folds)
    print(markdown(table))
    if result.errors:
        print("\nfailed tasks:", *result.errors, sep="\n  ")
    print(f"\nfiles: {result.out}/summary.md, folds.csv, ttests.csv")
    return table


if __name__ == "__main__":
    main()
