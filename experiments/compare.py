"""``ldhmm compare``: cross-validated held-out log-likelihood of the models against K.

The paper's Section 5.1 (Figures 4 and 5). For every model, K and fold, the model is fitted on
the other folds and the held-out fold is scored.

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

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy.stats import ttest_rel

from ..data import kfold_indices
from .datasets import data_fingerprint, select_database
from .lineup import is_models, ldhmm_names, model_from_settings, model_names, model_order, resolve_models
from .tables import fmt_pm, mean_std
from .tasks import (
    atomic_write_text,
    default_out,
    parse_states,
    prepare_out_dir,
    run_tasks,
    seed_everything,
    timed,
)

__all__ = ["run_compare", "compare_task", "write_reports", "ttests", "SCORE_COLUMNS", "CSV_COLUMNS"]

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
def compare_task(task, payload) -> dict:
    """Fit one model on the training folds and score the held-out fold."""
    db, folds, s = payload["db"], payload["folds"], payload["settings"]
    name, K, fold = task["model"], int(task["K"]), int(task["fold"])
    tr, te = folds[fold]
    train = db.subset(tr).sequences
    test = db.subset(te).sequences
    n_tokens = int(sum(len(x) for x in test))
    seed_everything(s["seed"])
    model = model_from_settings(name, K, db.n_symbols, s)
    _, fit_s = timed(model.fit, train)
    scores, score_s = timed(model.score_samples, test)
    scores = np.asarray(scores, dtype=np.float64)
    total = float(scores.sum())
    is_total, is_s = math.nan, 0.0
    if s["is_samples"] > 0 and name in is_models() and hasattr(model, "log_marginal_is"):
        is_scores, is_s = timed(
            model.log_marginal_is, test, n_samples=s["is_samples"], seed=s["seed"] + 1000 * fold + K
        )
        is_total = float(np.sum(is_scores))
    n_iter = getattr(model, "n_iter_", None)
    return {
        "score_kind": type(model).score_kind,
        "n_train": len(train),
        "n_test": len(test),
        "n_test_tokens": n_tokens,
        "heldout_elbo": total,
        "heldout_elbo_per_seq": total / len(test),
        "heldout_elbo_per_token": total / n_tokens,
        "heldout_is": is_total,
        "heldout_is_per_seq": is_total / len(test),
        "heldout_is_per_token": is_total / n_tokens,
        "is_samples": s["is_samples"] if math.isfinite(is_total) else 0,
        "fit_seconds": fit_s,
        "score_seconds": score_s,
        "is_seconds": is_s,
        "n_iter": None if n_iter is None else int(n_iter),
        "converged": bool(getattr(model, "converged_", False)),
    }


# ------------------------------------------------------------------------ the command
def run_compare(
    dataset=None,
    file=None,
    data_dir=None,
    n_sequences=None,
    states=("2..6",),
    folds=10,
    models=("all",),
    out=None,
    jobs=1,
    quiet=False,
    seed=0,
    max_iter=None,
    tol=None,
    m_step="collapsed",
    restarts=3,
    is_samples=100,
    force=False,
) -> int:
    """Run ``ldhmm compare``: every (model, K, fold) task not yet done, then the reports.

    Parameters
    ----------
    dataset : {"entree", "msnbc", "splice", "synthetic"}, optional
        A named data set; with neither ``dataset`` nor ``file``: Entree when its files are in
        the data directory, else the built-in synthetic database (:func:`select_database`).
    file : str or Path, optional
        A user's sequence file (:func:`ldhmm.data.load_path`).
    data_dir : str or Path, optional
        Data directory (default ``$LDHMM_DATA``).
    n_sequences : int, optional
        Use a seeded random sample of this many sequences.
    states : list of int or str
        K values; strings may be ranges like ``"2..6"`` (:func:`parse_states`).
    folds : int
        Cross-validation folds.
    models : list of str
        ``["all"]`` or harness names (:func:`resolve_models`).
    out : str or Path, optional
        Output directory (default ``results/compare-<data>``).
    jobs : int
        Worker processes.
    quiet : bool
        No progress bar.
    seed : int
        Seed of folds, models and sampling.
    max_iter, tol : optional
        EM settings (None: each model's own).
    m_step : {"collapsed", "paper"}
        M-step of the LDHMM models.
    restarts : int
        Restart budget of every model that takes restarts (``n_init``; all built-in models):
        the same for all, so that no model wins a comparison by its number of starts.
    is_samples : int
        Importance samples per test sequence for ``heldout_is`` (0: skip).
    force : bool
        Reuse an ``out`` that holds results of another configuration.

    Returns
    -------
    int
        0 when every task finished, 1 when some failed (rerun to retry them). Writes
        ``folds.csv``, ``summary.md``, ``ttests.csv`` and ``loglik_vs_K.png`` under ``out``.
    """
    models = resolve_models(models)
    states = parse_states(states)
    if is_samples < 0:
        raise ValueError(f"--is-samples must be >= 0, got {is_samples}")
    db, what = select_database(dataset, file, data_dir, n_sequences, seed)
    print(f"data: {what}", flush=True)
    fold_index = kfold_indices(len(db), folds, seed=seed)
    settings = {
        "data": {
            "name": db.name,
            "description": what,
            "n_sequences": len(db),
            "n_symbols": db.n_symbols,
            "fingerprint": data_fingerprint(db),
        },
        "folds": folds,
        "seed": seed,
        "max_iter": max_iter,
        "tol": tol,
        "m_step": m_step,
        "restarts": restarts,
        "is_samples": is_samples,
    }
    out = Path(out) if out else default_out("compare", db.name)
    digest = prepare_out_dir(
        out, "compare", settings, extra={"models": models, "states": states, "jobs": jobs}, force=force
    )
    tasks = [
        {"key": f"{m}__K{K}__fold{f}", "model": m, "K": K, "fold": f}
        for K in states
        for m in models
        for f in range(folds)
    ]
    payload = {"db": db, "folds": fold_index, "settings": settings}
    records, errors = run_tasks(
        tasks, compare_task, payload, out, digest, jobs=jobs, quiet=quiet, desc="compare"
    )
    resumed = sum(r.get("resumed", False) for r in records)
    if resumed:
        print(f"resumed: {resumed} of {len(tasks)} tasks were already done in {out}", flush=True)
    for e in errors:
        print(f"ldhmm compare: warning: task failed: {e}", file=sys.stderr)
    if not records:
        raise RuntimeError("no task finished")
    df = pd.DataFrame(records)
    for c in CSV_COLUMNS:
        if c not in df:
            df[c] = np.nan
    df = df[CSV_COLUMNS].sort_values(
        ["K", "model", "fold"], key=lambda c: c.map(model_order) if c.name == "model" else c
    )
    df.to_csv(out / "folds.csv", index=False)
    summary_md, best_lines = write_reports(df, out, what, settings, models, states)
    print(summary_md.split("\n## Best")[0].rstrip() + "\n")
    print(f"results: {out}/folds.csv, summary.md, ttests.csv, loglik_vs_K.png")
    for line in best_lines:
        print(line)
    if errors:
        print(
            f"ldhmm compare: error: {len(errors)} task(s) failed (see the warnings); rerun to retry them",
            file=sys.stderr,
        )
        return 1
    return 0


KIND_LABEL = {"exact": "exact log-lik", "lower_bound": "lower bound (ELBO)", "estimate": "estimate"}


def _tight_measure(df):
    """The tightest comparable score per row: IS estimate where there is one, else heldout_elbo."""
    tight = df["heldout_is"].where(np.isfinite(df["heldout_is"]), df["heldout_elbo"])
    kind = np.where(np.isfinite(df["heldout_is"]), "IS estimate", df["score_kind"].map(KIND_LABEL))
    return tight, kind


def ttests(df, models) -> pd.DataFrame:
    """Paired two-tailed t-tests (over folds) of each LDHMM variant against every other model."""
    rows = []
    ldhmm = ldhmm_names()
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
        lines.append(f"| {m} | {kinds(m, dm)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_reports(df, out: Path, what: str, settings: dict, models, states):
    """summary.md, ttests.csv and loglik_vs_K.png from the per-fold table; returns
    (markdown text, closing lines naming the best model)."""
    out = Path(out)
    present = [m for m in models if m in set(df["model"])]
    tt = ttests(df, present)
    tt.to_csv(out / "ttests.csv", index=False)
    kind_of = lambda m, dm: KIND_LABEL.get(str(dm["score_kind"].iloc[0]), str(dm["score_kind"].iloc[0]))
    is_kind = lambda m, dm: "IS estimate"
    lines = [
        "# ldhmm compare",
        "",
        f"Data: {what}.  ",
        f"{settings['folds']}-fold cross-validation, seed {settings['seed']}, EM max_iter "
        f"{settings['max_iter'] or 'model default'}, tol {settings['tol'] or 'model default'}, "
        f"{settings.get('restarts') or 'model default'} restarts for every model (n_init), "
        f"M-step {settings.get('m_step') or 'collapsed'}, "
        f"{settings['is_samples']} importance samples per test sequence.",
        "",
        "## Held-out log-likelihood, the paper's measure (nats per test fold, mean ± std over folds)",
        "",
        "`heldout_elbo` = sum of `score_samples` over the test fold. **Mixed kinds**: the HMM row is "
        "the exact log-likelihood; every other row is a variational lower bound (ELBO) on it, "
        "so a bound below HMM's value does not mean the model is worse.",
        "",
        _table(df, "heldout_elbo", present, states, kind_of),
        "",
        "## Importance-sampled log p(x) (nats per test fold)",
        "",
        "`heldout_is`: importance sampling with the fitted q(theta) as proposal; comparable with "
        "HMM's exact log-likelihood (repeated here) up to the estimator's small downward bias.",
        "",
    ]
    with_is = [m for m in present if m in is_models()]
    if with_is and np.isfinite(df["heldout_is"].to_numpy(float)).any():
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
    best = best_lines(df, present)
    lines += ["", "## Best", ""] + [f"- {b}" for b in best]
    md = "\n".join(lines) + "\n"
    atomic_write_text(out / "summary.md", md)
    plot_loglik(df, present, states, out / "loglik_vs_K.png", title=settings["data"]["name"] or "data")
    return md, best


def _exact_models(df, models) -> list[str]:
    """The models without an IS estimate whose rows are exact log-likelihoods (HMM): shown
    beside the IS estimates, which estimate the same quantity."""
    with_is = is_models()
    return [
        m
        for m in models
        if m not in with_is and set(df.loc[df["model"] == m, "score_kind"].astype(str)) == {"exact"}
    ]


def best_lines(df, models):
    out = []
    g = df.groupby(["model", "K"])["heldout_elbo"].mean()
    g = g[np.isfinite(g)]
    if len(g):
        (m, K), v = g.idxmax(), g.max()
        kind = df[df["model"] == m]["score_kind"].iloc[0]
        out.append(
            f"Best by the paper's measure (mean held-out score per fold): {m} with K={K} "
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
            f"{m} with K={K} ({v:.2f} nats, {kind})."
        )
    return out


def plot_loglik(df, models, states, path, title=""):
    """Held-out log-likelihood against K per model (the paper's Figures 4/5): left the paper's
    measure, right the IS estimates (with HMM's exact value); dashed = lower bound."""
    has_is = np.isfinite(df["heldout_is"].to_numpy(float)).any()
    # a bare Figure (not pyplot): no global backend or figure registry to touch
    fig = Figure(figsize=(12 if has_is else 6.5, 4.5))
    axes = fig.subplots(1, 2 if has_is else 1, squeeze=False)
    markers = dict(zip(model_names(), "osD^vP"))
    with_is, exact = is_models(), _exact_models(df, models)
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
                label=f"{m} ({tag})",
            )
        ax.set_xlabel("K (hidden states / topics)")
        ax.set_ylabel("held-out log-likelihood per test fold (nats)")
        ax.set_title(f"{title}: {label}", fontsize=9)
        ax.set_xticks(states)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
