"""``ldhmm compare``: cross-validated held-out log-likelihood of the models against K.

The paper's Section 5.1 (Figures 4 and 5). For every model, K and fold, the model is fitted on
the other folds and the held-out fold is scored. The task unit is (model, fold): one task fits
a model along its K values (:mod:`ldhmm.experiments.along_k`: LDHMM-PF along one path where
its class has ``fit_path``, LDHMM-FF in the same task from the PF fit of each K, the baselines
each K on its own) and saves each (model, K, fold) row as it is scored, so a run resumes at K
granularity. ``fit_seconds`` of an LDHMM-FF row is its own fit from the PF fit (not the PF
fit's seconds, which are in the LDHMM-PF row).

Score columns of ``folds.csv`` (all in nats, summed over the test fold unless ``_per_seq`` /
``_per_token``):

``heldout_elbo``
    ``score(test)`` = sum of ``score_samples``: the paper's measure. What it is depends on the
    model and is given by ``score_kind`` in the same row: ``"lower_bound"`` (a variational
    bound: LDHMM-FF/PF, VBHMM, HMMV, LDA) or ``"exact"`` (HMM's exact log-likelihood).
``heldout_is``
    Importance-sampled estimate of log p(x) (``log_marginal_is`` with ``--is-samples``
    samples per sequence; a stochastic lower bound that tightens as S grows, at least the
    ELBO on average), only for LDHMM-FF/PF, VBHMM and HMMV; NaN for HMM and LDA.

The summary keeps the two measures in separate tables and marks every row's kind.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy.stats import ttest_rel

from ..data import kfold_indices
from .along_k import (
    Fitter,
    budget_rules,
    fit_along_k,
    fit_plans,
    fold_groups,
    has_states,
    model_label,
    part_k,
    row_key,
    store_for,
)
from .datasets import resolve_data, run_settings
from .lineup import ldhmm_names, model_names, model_order
from .plugins import build_model, check_scores, check_sendable, plugin_settings, resolve_lineup
from .tables import NO_K, failure_lines, fmt_pm, mean_std, spread_over_k, with_k_column
from .tasks import (
    MODELS_DIR,
    atomic_savefig,
    atomic_write_csv,
    atomic_write_text,
    check_run_settings,
    default_out,
    holds_out_dir_lock,
    parse_states,
    prepare_out_dir,
    run_task_groups,
    seed_everything,
    timed,
)

__all__ = [
    "compare",
    "ComparisonResult",
    "compare_task",
    "compare_group",
    "compare_groups",
    "score_fit",
    "write_reports",
    "console_table",
    "failure_lines",
    "ttests",
    "SCORE_COLUMNS",
    "CSV_COLUMNS",
]

SCORE_COLUMNS = [
    "heldout_elbo",
    "heldout_elbo_per_seq",
    "heldout_elbo_per_token",
    "heldout_is",
    "heldout_is_per_seq",
    "heldout_is_per_token",
]
CSV_COLUMNS = (
    ["model", "K", "fold", "score_kind", "n_train", "n_test", "n_test_tokens"]
    + SCORE_COLUMNS
    + ["is_samples", "fit_seconds", "score_seconds", "is_seconds", "n_iter", "converged"]
)


# ------------------------------------------------------------------------ the task
def score_fit(model, name: str, K: int, fold: int, test, s: dict, fit_seconds: float) -> dict:
    """The row of a fitted model: its scores of the held-out fold ``test`` (see the module
    docstring), with its fit statistics."""
    n_tokens = int(sum(len(x) for x in test))
    scores, score_s = timed(model.score_samples, test)
    scores = check_scores(scores, len(test), name)
    total = float(scores.sum())
    is_total, is_s = math.nan, 0.0
    if s["is_samples"] > 0 and callable(getattr(model, "log_marginal_is", None)):
        is_scores, is_s = timed(
            model.log_marginal_is, test, n_samples=s["is_samples"], seed=s["seed"] + 1000 * fold + K
        )
        is_total = float(np.sum(check_scores(is_scores, len(test), name, "log_marginal_is")))
    n_iter = getattr(model, "n_iter_", None)
    return {
        "score_kind": model.score_kind,
        "n_test": len(test),
        "n_test_tokens": n_tokens,
        "heldout_elbo": total,
        "heldout_elbo_per_seq": total / len(test),
        "heldout_elbo_per_token": total / n_tokens,
        "heldout_is": is_total,
        "heldout_is_per_seq": is_total / len(test),
        "heldout_is_per_token": is_total / n_tokens,
        "is_samples": s["is_samples"] if math.isfinite(is_total) else 0,
        "fit_seconds": fit_seconds,
        "score_seconds": score_s,
        "is_seconds": is_s,
        "n_iter": None if n_iter is None else int(n_iter),
        "converged": bool(getattr(model, "converged_", False)),
    }


def _fold_fitter(payload, fold: int):
    """The fold's training and test sequences, and its :class:`Fitter` (the run's models)."""
    db, s, entries = payload["db"], payload["settings"], payload["entries"]
    tr, te = payload["folds"][fold]
    train = db.subset(tr).sequences
    test = db.subset(te).sequences
    fitter = Fitter(train, db.n_symbols, s, lambda m, K: build_model(entries.get(m, m), K, db.n_symbols, s))
    return train, test, fitter


def compare_task(task, payload) -> dict:
    """One model with one K on its own (``task``: ``model``, ``K``, ``fold``): fitted on the
    training folds, scored on the held-out fold (the row :func:`compare_group` makes of it
    when the model is fitted on its own)."""
    name, K, fold = task["model"], int(task["K"]), int(task["fold"])
    train, test, fitter = _fold_fitter(payload, fold)
    seed_everything(payload["settings"]["seed"])
    model, fit_s = fitter.one(name, K)
    return {"n_train": len(train), **score_fit(model, name, K, fold, test, payload["settings"], fit_s)}


def compare_group(group, payload, output) -> None:
    """One task: a fit plan (:class:`ldhmm.experiments.along_k.FitPlan`) on one fold, fitted
    along the run's K values; each (model, K, fold) row is saved the moment it is scored."""
    plan, fold, states = group["plan"], int(group["fold"]), list(group["states"])
    s = payload["settings"]
    train, test, fitter = _fold_fitter(payload, fold)
    rows = {(p["model"], part_k(p["K"])): p["key"] for p in group["parts"]}

    def emit(name, K, model, seconds):
        row = {"n_train": len(train), **score_fit(model, name, K, fold, test, s, seconds)}
        output.save(rows[(name, K)], row)

    store = store_for(plan, output.out / MODELS_DIR, output.digest, states, lambda m, K: row_key(m, K, fold))
    fit_along_k(plan, states, rows, output.todo, fitter, store, emit, lambda: seed_everything(s["seed"]))


def compare_groups(plans, states, folds: int) -> list[dict]:
    """The tasks of a run: one per (plan, fold), in plan order (the LDHMM plans, the costliest,
    first: with ``jobs`` workers the cheap tasks fill the end of the run); a model without
    states has one part per fold, ``K = None`` (:func:`ldhmm.experiments.along_k.fold_groups`)."""
    return fold_groups(plans, states, folds)


# ------------------------------------------------------------------------ the API
@dataclass
class ComparisonResult:
    """What :func:`compare` returns; the same files are under ``out``.

    Attributes
    ----------
    folds : pandas.DataFrame
        One row per (model, K, fold): the columns of ``folds.csv`` (:data:`CSV_COLUMNS`); a
        model without states (MARKOV1, MARKOV3) has one row per fold with an empty ``K``.
    ttests : pandas.DataFrame
        Paired t-tests over folds (``ttests.csv``).
    summary : str
        The Markdown report (``summary.md``).
    plot : Path
        ``loglik_vs_K.png``.
    out : Path
        The output directory (``config.json``, ``tasks/``, the files above).
    errors : list of str
        One line per failed task (``"KEY: reason"``); rerunning retries them.
    best : list of str
        The sentences that name the best model and K.
    config : dict
        The run's ``config.json``.
    data : str
        Which database was used.
    """

    folds: pd.DataFrame
    ttests: pd.DataFrame
    summary: str
    plot: Path
    out: Path
    errors: list
    best: list
    config: dict
    data: str

    @property
    def ok(self) -> bool:
        """Whether every task finished."""
        return not self.errors

    def table(self, column: str = "heldout_elbo") -> pd.DataFrame:
        """Mean over folds of ``column`` per model (rows, in table order) and K (columns)."""
        folds = spread_over_k(self.folds, self.config["states"])
        t = folds.pivot_table(index="model", columns="K", values=column, aggfunc="mean")
        order = sorted(t.index, key=lambda m: (list(self.config["models"]).index(m), m))
        return t.loc[order]


@holds_out_dir_lock
def compare(
    models="all",
    data=None,
    states=range(2, 7),
    folds: int = 10,
    jobs: int = 1,
    out=None,
    seed: int = 0,
    *,
    n_sequences: int | None = None,
    data_dir=None,
    sequence_col: str | None = None,
    event_col: str | None = None,
    time_col: str | None = None,
    max_iter: int | None = None,
    tol: float | None = None,
    m_step: str = "collapsed",
    restarts: int = 3,
    is_samples: int = 100,
    force: bool = False,
    quiet: bool = False,
    plugins=(),
) -> ComparisonResult:
    """Cross-validated held-out log-likelihood of several models against K (resumable).

    For every model, K and fold, the model is fitted on the other folds and scores the held-out
    fold; ``ldhmm compare`` is this function behind a parser.

    Parameters
    ----------
    models : str, list of str, or mapping name -> factory
        ``"all"`` (every registered model and installed plug-in), built-in names
        (``["LDHMM-PF", "HMM"]``), or ``{name: factory}`` where a factory is
        ``factory(n_states, n_symbols, seed) -> model``, a ``"package.module:factory"`` string,
        or None for the built-in model of that name (:mod:`ldhmm.experiments.plugins`).
    data : str, Path, SequenceDatabase or list of 1-D int arrays, optional
        A file any loader reads (:func:`ldhmm.data.load_path`; event logs need
        ``sequence_col`` and ``event_col``), a named data set (``"entree"``, ``"msnbc"``,
        ``"splice"``, ``"synthetic"``), a database, or integer sequences. None: Entree when
        its files are in the data directory, else the built-in synthetic database.
    states : iterable of int or str
        K values (strings may be ranges like ``"2..6"``).
    folds : int
        Cross-validation folds.
    jobs : int
        Worker processes (the factories must then be module-level functions or strings).
    out : str or Path, optional
        Output directory (default ``results/compare-<data>``).
    seed : int
        Seed of folds, models and sampling.
    n_sequences : int, optional
        Use a seeded random sample of this many sequences.
    data_dir : optional
        Data directory of the named data sets (default ``$LDHMM_DATA``).
    sequence_col, event_col, time_col : str, optional
        Columns of a CSV/Parquet event log.
    max_iter, tol : optional
        EM settings of the registered models (None: each model's own).
    m_step : {"collapsed", "paper"}
        M-step of the LDHMM models.
    restarts : int
        Restart budget (``n_init``) of every registered model that takes restarts.
    is_samples : int
        Importance samples per test sequence for ``heldout_is`` (0: skip).
    force : bool
        Reuse an ``out`` that holds results of another configuration.
    quiet : bool
        No progress bar.
    plugins : iterable of str
        ``"NAME=package.module:factory"`` strings added to ``models`` (the CLI's ``--model``).

    Returns
    -------
    ComparisonResult
        Failed tasks (a plug-in that raises, returns NaN or violates the protocol) are listed
        in ``errors`` and in ``summary.md``; the other tasks' results are kept.
    """
    entries = resolve_lineup(models, extra=plugins)
    check_sendable(entries, jobs)
    names = [e.name for e in entries]
    states = parse_states(states)
    check_run_settings(folds, jobs, max_iter, tol, m_step, restarts, is_samples)
    db, what = resolve_data(
        data, data_dir, n_sequences, seed, sequence_col=sequence_col, event_col=event_col, time_col=time_col
    )
    fold_index = kfold_indices(len(db), folds, seed=seed)
    settings = run_settings(
        db,
        what,
        states,
        folds,
        jobs,
        seed,
        max_iter,
        tol,
        m_step,
        restarts,
        is_samples=is_samples,
        **plugin_settings(entries),
    )
    out = default_out("compare", db.name, out)
    plans = fit_plans(names)
    extra = {"models": names, "states": states, "jobs": jobs, "budget": budget_rules(plans, settings, states)}
    digest = prepare_out_dir(out, "compare", settings, extra=extra, force=force)
    payload = {"db": db, "folds": fold_index, "settings": settings, "entries": {e.name: e for e in entries}}
    records, errors = run_task_groups(
        compare_groups(plans, states, folds), compare_group, payload, out, digest, jobs, quiet, "compare"
    )
    if not records:
        raise RuntimeError(f"no task finished ({len(errors)} failed; the first: {errors[0]})")
    resumed = sum(bool(r.get("resumed")) for r in records)
    df = pd.DataFrame(records)
    for c in CSV_COLUMNS:
        if c not in df:
            df[c] = np.nan
    df = with_k_column(df[CSV_COLUMNS]).sort_values(
        ["K", "model", "fold"], key=lambda c: c.map(model_order) if c.name == "model" else c
    )
    df = df.reset_index(drop=True)
    atomic_write_csv(df, out / "folds.csv")
    summary_md, best, tt = write_reports(df, out, what, settings, names, states, errors=errors)
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    config["resumed_tasks"] = resumed
    return ComparisonResult(
        folds=df,
        ttests=tt,
        summary=summary_md,
        plot=out / "loglik_vs_K.png",
        out=out,
        errors=list(errors),
        best=best,
        config=config,
        data=what,
    )


KIND_LABEL = {"exact": "exact log-lik", "lower_bound": "lower bound (ELBO)", "estimate": "estimate"}


def _tight_measure(df):
    """The tightest comparable score per row: IS estimate where there is one, else heldout_elbo."""
    tight = df["heldout_is"].where(np.isfinite(df["heldout_is"]), df["heldout_elbo"])
    kind = np.where(np.isfinite(df["heldout_is"]), "IS estimate", df["score_kind"].map(KIND_LABEL))
    return tight, kind


def ttests(df, models) -> pd.DataFrame:
    """Paired two-tailed t-tests (over folds) of each LDHMM variant and each plug-in model
    against every other model."""
    rows = []
    registered = set(model_names())
    ldhmm = [m for m in ldhmm_names() if m in models] + [m for m in models if m not in registered]
    df = df.copy()
    df["tight"], df["tight_kind"] = _tight_measure(df)
    for K in sorted(df["K"].unique()):
        dk = df[df["K"] == K]
        for a in [m for m in ldhmm if m in models]:
            for b in [m for m in models if m != a]:
                if b in ldhmm and ldhmm.index(b) < ldhmm.index(a):
                    continue  # FF vs PF once
                for measure, col, kcol in (
                    ("paper (heldout_elbo)", "heldout_elbo", "score_kind"),
                    ("tightest (IS / exact)", "tight", "tight_kind"),
                ):
                    da = dk[dk["model"] == a].set_index("fold")
                    db_ = dk[dk["model"] == b].set_index("fold")
                    common = sorted(set(da.index) & set(db_.index))
                    xa = da.loc[common, col].to_numpy(float) if common else np.array([])
                    xb = db_.loc[common, col].to_numpy(float) if common else np.array([])
                    ok = np.isfinite(xa) & np.isfinite(xb)
                    xa, xb = xa[ok], xb[ok]
                    if xa.size >= 2 and np.any(xa - xb != 0):
                        t, p = ttest_rel(xa, xb)
                    else:
                        t, p = math.nan, math.nan
                    ka = str(da[kcol].iloc[0]) if len(da) else ""
                    kb = str(db_[kcol].iloc[0]) if len(db_) else ""
                    rows.append(
                        {
                            "K": int(K),
                            "model_a": a,
                            "model_b": b,
                            "measure": measure,
                            "kind_a": KIND_LABEL.get(ka, ka),
                            "kind_b": KIND_LABEL.get(kb, kb),
                            "n_folds": int(xa.size),
                            "mean_a": float(xa.mean()) if xa.size else math.nan,
                            "mean_b": float(xb.mean()) if xb.size else math.nan,
                            "mean_diff": float((xa - xb).mean()) if xa.size else math.nan,
                            "t": float(t),
                            "p_value": float(p),
                        }
                    )
    return pd.DataFrame(rows)


def _table(df, col, models, states, kinds, digits=2):
    header = "| model | score | " + " | ".join(f"K={K}" for K in states) + " |"
    lines = [header, "|" + "---|" * (len(states) + 2)]
    for m in models:
        dm = df[df["model"] == m]
        if dm.empty or not np.isfinite(dm[col].to_numpy(float)).any():
            continue
        cells = []
        for K in states:
            mean, std, n = mean_std(dm[dm["K"] == K][col].to_numpy(float))
            cells.append(fmt_pm(mean, std, digits) if n else "n/a")
        lines.append(f"| {model_label(m)} | {kinds(m, dm)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _models_with_is(df, models) -> list[str]:
    """The models of the run whose rows carry an importance-sampled estimate."""
    return [m for m in models if np.isfinite(df.loc[df["model"] == m, "heldout_is"].to_numpy(float)).any()]


def write_reports(df, out: Path, what: str, settings: dict, models, states, errors=()):
    """summary.md, ttests.csv and loglik_vs_K.png from the per-fold table; returns
    (markdown text, closing lines naming the best model, the t-test table)."""
    out = Path(out)
    df = spread_over_k(df, states)  # a model without states: its fold rows at every K
    present = [m for m in models if m in set(df["model"])]
    tt = ttests(df, present)
    atomic_write_csv(tt, out / "ttests.csv")
    kind_of = lambda m, dm: KIND_LABEL.get(str(dm["score_kind"].iloc[0]), str(dm["score_kind"].iloc[0]))
    is_kind = lambda m, dm: "IS estimate"
    lines = [
        "# ldhmm compare",
        "",
        f"Data: {what}.  ",
        f"{settings['folds']}-fold cross-validation, seed {settings['seed']}, EM max_iter "
        f"{settings['max_iter'] or 'model default'}, tol {settings['tol'] or 'model default'}, "
        f"{settings.get('restarts') or 'model default'} restarts for every model that takes restarts "
        "(n_init), "
        f"M-step {settings.get('m_step') or 'collapsed'}, "
        f"{settings['is_samples']} importance samples per test sequence.",
        "",
        "## Held-out log-likelihood, the paper's measure (nats per test fold, mean ± std over folds)",
        "",
        "`heldout_elbo` = sum of `score_samples` over the test fold. **Mixed kinds**: the HMM row is "
        "the exact log-likelihood; every other row is a variational lower bound (ELBO) on it, "
        "so a bound below HMM's value does not mean the model is worse. The Markov chains "
        f"(MARKOV1, MARKOV3) are exact too; marked {NO_K}, they are fitted once per fold and their "
        "value fills every K column.",
        "",
        _table(df, "heldout_elbo", present, states, kind_of),
        "",
        "## Importance-sampled log p(x) (nats per test fold)",
        "",
        "`heldout_is`: importance sampling with the fitted q(theta) as proposal; comparable with "
        "HMM's exact log-likelihood (repeated here) up to the estimator's small downward bias.",
        "",
    ]
    with_is = _models_with_is(df, present)
    if with_is:
        lines.append(_table(df, "heldout_is", with_is, states, is_kind))
        exact = _exact_models(df, present)
        if exact:
            lines.append(_table(df, "heldout_elbo", exact, states, kind_of).split("\n", 2)[2])
    else:
        lines.append("(not computed: --is-samples 0 or no model with an IS estimate)")
    lines += [
        "",
        "## Per token (heldout_elbo / test tokens)",
        "",
        _table(df, "heldout_elbo_per_token", present, states, kind_of, digits=4),
        "",
        "## Fit time (seconds per fold) and EM iterations",
        "",
        _table(df, "fit_seconds", present, states, lambda m, dm: "fit s", digits=1),
        "",
        _table(df, "n_iter", present, states, lambda m, dm: "n_iter", digits=1),
        "",
    ]
    lines += [
        "## Paired two-tailed t-tests over folds (scipy.stats.ttest_rel)",
        "",
        "mean_diff = mean over folds of (model_a - model_b); measure 'paper' compares "
        "`heldout_elbo` (kinds as listed), 'tightest' uses the IS estimate where available, "
        "else `heldout_elbo`.",
        "",
    ]
    if len(tt):
        lines.append("| K | model_a | model_b | measure | kind_a | kind_b | mean_diff | t | p |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for r in tt.itertuples():
            lines.append(
                f"| {r.K} | {r.model_a} | {r.model_b} | {r.measure} | {r.kind_a} | {r.kind_b} | "
                f"{r.mean_diff:.2f} | {r.t:.3g} | {r.p_value:.3g} |"
            )
    else:
        lines.append("(no LDHMM variant with a baseline in this run)")
    if errors:
        lines += [
            "",
            "## Failed tasks",
            "",
            "These tasks left no result (the other models' results above are complete); a rerun "
            "retries them.",
            "",
        ] + [f"- {f}" for f in failure_lines(errors)]
    best = best_lines(df, present)
    lines += ["", "## Best", ""] + [f"- {b}" for b in best]
    md = "\n".join(lines) + "\n"
    atomic_write_text(out / "summary.md", md)
    plot_loglik(df, present, states, out / "loglik_vs_K.png", title=settings["data"]["name"] or "data")
    return md, best, tt


def _exact_models(df, models) -> list[str]:
    """The models without an IS estimate whose rows are exact log-likelihoods (HMM): shown
    beside the IS estimates, which estimate the same quantity."""
    with_is = _models_with_is(df, models)
    return [
        m
        for m in models
        if m not in with_is and set(df.loc[df["model"] == m, "score_kind"].astype(str)) == {"exact"}
    ]


def _at(model, K) -> str:
    return f"{model} with K={K}" if has_states(model) else f"{model} {NO_K}"


def best_lines(df, models):
    out = []
    g = df.groupby(["model", "K"])["heldout_elbo"].mean()
    g = g[np.isfinite(g)]
    if len(g):
        (m, K), v = g.idxmax(), g.max()
        kind = df[df["model"] == m]["score_kind"].iloc[0]
        out.append(
            f"Best by the paper's measure (mean held-out score per fold): {_at(m, K)} "
            f"({v:.2f} nats, {KIND_LABEL.get(kind, kind)}). Note: this ranks lower bounds and "
            f"HMM's exact log-likelihood on one scale; a bound that wins is a real win, "
            f"an exact value that wins over a bound may not be."
        )
    d = df.copy()
    d["tight"], d["tight_kind"] = _tight_measure(d)
    g2 = d.groupby(["model", "K"])["tight"].mean()
    g2 = g2[np.isfinite(g2)]
    if len(g2) and np.isfinite(d["heldout_is"].to_numpy(float)).any():
        (m, K), v = g2.idxmax(), g2.max()
        kind = d[d["model"] == m]["tight_kind"].iloc[0]
        out.append(
            f"Best by the tightest measure (IS estimate where available, else heldout_elbo): "
            f"{_at(m, K)} ({v:.2f} nats, {kind})."
        )
    markov = markov_line(g2)
    if markov:
        out.append(markov)
    return out


def markov_line(tight) -> str | None:
    """The sentence that says whether a model without states (a Markov chain over the symbols)
    beats every model with hidden states at its best K, by the tightest measure (``tight``:
    mean per fold by (model, K)); None when the run lacks either kind."""
    chains = [m for m in tight.index.get_level_values(0).unique() if not has_states(m)]
    hidden = tight[[has_states(m) for m in tight.index.get_level_values(0)]]
    if not chains or not len(hidden):
        return None
    chain = max(chains, key=lambda m: tight[m].max())
    value = float(tight[chain].max())
    (m, K), best = hidden.idxmax(), float(hidden.max())
    verdict = "wins" if value > best else "loses"
    return (
        f"Markov chain: {chain} (no hidden states, exact) {verdict} against the best model with hidden "
        f"states, {m} with K={K}, by {abs(value - best):.2f} nats per fold ({value:.2f} vs {best:.2f}; "
        f"the tightest measure: IS estimate where available, else heldout_elbo)."
        + (" The per-sequence dynamics do not pay on this data." if verdict == "wins" else "")
    )


def plot_loglik(df, models, states, path, title=""):
    """Held-out log-likelihood against K per model (the paper's Figures 4/5): left the paper's
    measure, right the IS estimates (with HMM's exact value); dashed = lower bound."""
    has_is = np.isfinite(df["heldout_is"].to_numpy(float)).any()
    # a bare Figure (not pyplot): no global backend or figure registry to touch
    fig = Figure(figsize=(12 if has_is else 6.5, 4.5))
    axes = fig.subplots(1, 2 if has_is else 1, squeeze=False)
    markers = dict(zip(model_names(), "osD^vPX*"))
    with_is, exact = _models_with_is(df, models), _exact_models(df, models)
    panels = [("heldout_elbo", "paper's measure: held-out ELBO (HMM: exact)")]
    if has_is:
        panels.append(("heldout_is", "importance-sampled log p(x) (HMM: exact)"))
    for ax, (col, label) in zip(axes[0], panels):
        for m in models:
            use_col = col
            dm = df[df["model"] == m]
            if col == "heldout_is" and m not in with_is:
                if m not in exact:  # an exact log-likelihood is drawn beside the estimates
                    continue
                use_col = "heldout_elbo"
            ks, means, stds = [], [], []
            for K in states:
                mean, std, n = mean_std(dm[dm["K"] == K][use_col].to_numpy(float))
                if n:
                    ks.append(K), means.append(mean), stds.append(std)
            if not ks:
                continue
            kind = str(dm["score_kind"].iloc[0])
            if use_col == "heldout_is":
                style, tag = ":", "IS"
            elif kind == "exact":
                style, tag = "-", "exact"
            else:
                style, tag = "--", "bound"
            ax.errorbar(
                ks,
                means,
                yerr=stds,
                linestyle=style,
                marker=markers.get(m, "o"),
                capsize=3,
                label=f"{m} ({tag})" if has_states(m) else f"{m} ({tag}, no K)",
            )
        ax.set_xlabel("K (hidden states / topics)")
        ax.set_ylabel("held-out log-likelihood per test fold (nats)")
        ax.set_title(f"{title}: {label}", fontsize=9)
        ax.set_xticks(states)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=120)


def console_table(df, models, states) -> str:
    """The one table a terminal shows: held-out score per model and K, each row's kind labelled.

    The paper's measure (``heldout_elbo``, nats per test fold, mean ± std over folds); an
    ``IS`` row under each model that has an importance-sampled estimate.
    """
    rows = [["model", "score"] + [f"K={K}" for K in states]]
    df = spread_over_k(df, states)
    for m in models:
        dm = df[df["model"] == m]
        if dm.empty:
            continue
        kind = str(dm["score_kind"].iloc[0])
        for col, label in (("heldout_elbo", KIND_LABEL.get(kind, kind)), ("heldout_is", "IS estimate")):
            values = dm[col].to_numpy(float)
            if not np.isfinite(values).any():
                continue
            cells = []
            for K in states:
                mean, std, n = mean_std(dm[dm["K"] == K][col].to_numpy(float))
                cells.append(fmt_pm(mean, std, 1) if n else "n/a")
            rows.append([model_label(m) if col == "heldout_elbo" else "", label] + cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
