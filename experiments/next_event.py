"""``ldhmm next-event``: predict each held-out sequence's last event from its prefix.

An experiment beyond the paper that users of click-stream models care about. For every
model, K and fold, the model is fitted on the training folds; each test sequence
``x_1..x_n`` is cut into its prefix ``x_1..x_(n-1)`` and its last event ``x_n``, and the model
predicts ``p(x_n | x_1..x_(n-1))`` with ``predict_next_proba``:

* LDHMM-PF / LDHMM-FF (and VBHMM, a member of the family): the sequence's own posterior
  ``q(theta_m)`` after the held-out E-step on the prefix (docs/math.md, next-event prediction);
* HMM: the forward filter with the fitted parameters;
* MARKOV: a first-order Markov chain of the symbols with add-0.5 smoothing (the simplest
  baseline; it has no K, so its rows repeat across K).

Columns of ``folds.csv``: ``log_loss`` (mean ``-log p(x_n | prefix)`` over test sequences,
nats), ``hit1`` / ``hit3`` (fraction whose last event is the top-1 / among the top-3
predictions), ``n_test``, ``fit_seconds``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..baselines import MarkovChain
from ..data import kfold_indices
from .datasets import resolve_data, run_settings
from .lineup import model_from_settings, resolve_models
from .tables import failure_lines, fmt_pm, mean_std
from .tasks import (
    atomic_savefig,
    atomic_write_csv,
    atomic_write_text,
    check_run_settings,
    default_out,
    holds_out_dir_lock,
    parse_states,
    prepare_out_dir,
    run_tasks,
    seed_everything,
    timed,
)

__all__ = ["next_event", "NextEventResult", "next_event_task", "prediction_scores", "MARKOV"]

#: The name of the Markov-chain baseline in this experiment's tables.
MARKOV = "MARKOV"
DEFAULT_MODELS = ("LDHMM-PF", "LDHMM-FF", "HMM", "VBHMM", MARKOV)


def prediction_scores(proba: np.ndarray, targets: np.ndarray) -> dict:
    """Log loss, hit@1 and hit@3 of next-event predictions.

    Parameters
    ----------
    proba : np.ndarray, shape (M, V)
        Predictive distributions.
    targets : np.ndarray, shape (M,)
        The events that happened.
    """
    proba = np.asarray(proba, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.int64)
    if not np.isfinite(proba).all():
        raise ValueError("the predictive distributions hold non-finite values")
    p = proba[np.arange(targets.size), targets]
    # rank of the target: how many symbols are strictly more probable (ties in its favour)
    rank = (proba > p[:, None]).sum(axis=1)
    return {
        "log_loss": float(-np.mean(np.log(np.maximum(p, 1e-300)))),
        "hit1": float(np.mean(rank < 1)),
        "hit3": float(np.mean(rank < 3)),
    }


def next_event_task(task, payload) -> dict:
    """Fit one model on the training folds; predict the test sequences' last events."""
    db, folds, s = payload["db"], payload["folds"], payload["settings"]
    name, K, fold = task["model"], int(task["K"]), int(task["fold"])
    tr, te = folds[fold]
    train = db.subset(tr).sequences
    test = [x for x in db.subset(te).sequences if len(x) >= 2]
    seed_everything(s["seed"])
    if name == MARKOV:
        model = MarkovChain(K, n_symbols=db.n_symbols, seed=s["seed"])
    else:
        model = model_from_settings(name, K, db.n_symbols, s)
    _, fit_s = timed(model.fit, train)
    prefixes = [x[:-1] for x in test]
    targets = np.array([int(x[-1]) for x in test])
    proba, predict_s = timed(model.predict_next_proba, prefixes)
    return {
        **prediction_scores(proba, targets),
        "n_train": len(train),
        "n_test": len(test),
        "fit_seconds": fit_s,
        "predict_seconds": predict_s,
    }


@dataclass
class NextEventResult:
    """What :func:`next_event` returns (``folds.csv``, ``summary.md``, ``next_event.png`` under ``out``)."""

    folds: pd.DataFrame
    summary: str
    out: Path
    errors: list
    config: dict
    data: str


@holds_out_dir_lock
def next_event(
    models=DEFAULT_MODELS,
    data="msnbc",
    states=(2, 4, 8),
    folds: int = 5,
    jobs: int = 1,
    out=None,
    seed: int = 0,
    *,
    n_sequences: int | None = None,
    data_dir=None,
    max_iter: int | None = None,
    tol: float | None = None,
    restarts: int = 3,
    force: bool = False,
    quiet: bool = False,
) -> NextEventResult:
    """Next-event prediction by cross-validation (resumable, like :func:`ldhmm.compare`).

    Parameters
    ----------
    models : iterable of str
        Registered model names with ``predict_next_proba`` and/or ``"MARKOV"``.
    data
        As for :func:`ldhmm.experiments.compare.compare` (default: the MSNBC paper subset).
    states, folds, jobs, out, seed, n_sequences, data_dir, max_iter, tol, restarts, force, quiet
        As for :func:`ldhmm.experiments.compare.compare`.
    """
    check_run_settings(folds, jobs, max_iter, tol, None, restarts)
    given = [str(m) for m in ([models] if isinstance(models, str) else models)]
    with_markov = any(m.upper() == MARKOV for m in given)
    others = [m for m in given if m.upper() != MARKOV]
    names = (resolve_models(others) if others else []) + ([MARKOV] if with_markov else [])
    states = parse_states(states)
    db, what = resolve_data(data, data_dir, n_sequences, seed)
    settings = run_settings(db, what, states, folds, jobs, seed, max_iter, tol, "collapsed", restarts)
    out = default_out("next-event", db.name, out)
    digest = prepare_out_dir(
        out, "next-event", settings, extra={"models": names, "states": states, "jobs": jobs}, force=force
    )
    tasks = [
        {"key": f"{m}__K{K}__fold{f}", "model": m, "K": K, "fold": f}
        for K in states
        for m in names
        for f in range(folds)
        if not (m == MARKOV and K != states[0])  # the chain has no K: fitted once per fold
    ]
    payload = {"db": db, "folds": kfold_indices(len(db), folds, seed=seed), "settings": settings}
    records, errors = run_tasks(
        tasks, next_event_task, payload, out, digest, jobs=jobs, quiet=quiet, desc="next-event"
    )
    if not records:
        raise RuntimeError(f"no task finished ({len(errors)} failed; the first: {errors[0]})")
    df = pd.DataFrame(records)
    markov = df[df["model"] == MARKOV]
    df = pd.concat([df[df["model"] != MARKOV]] + [markov.assign(K=K) for K in states], ignore_index=True)
    cols = [
        "model",
        "K",
        "fold",
        "log_loss",
        "hit1",
        "hit3",
        "n_train",
        "n_test",
        "fit_seconds",
        "predict_seconds",
    ]
    df = df[cols].sort_values(
        ["K", "model", "fold"], key=lambda c: c.map(names.index) if c.name == "model" else c
    )
    df = df.reset_index(drop=True)
    atomic_write_csv(df, out / "folds.csv")
    md = _summary(df, what, settings, names, states, errors)
    atomic_write_text(out / "summary.md", md)
    _plot(df, names, states, out / "next_event.png", db.name)
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    return NextEventResult(folds=df, summary=md, out=out, errors=list(errors), config=config, data=what)


def _summary(df, what, settings, names, states, errors) -> str:
    lines = [
        "# ldhmm next-event",
        "",
        f"Data: {what}.  ",
        f"{settings['folds']}-fold cross-validation (seed {settings['seed']}); each test sequence's "
        f"last event predicted from its prefix; {settings['restarts']} restarts for every model "
        f"(n_init), EM max_iter {settings['max_iter'] or 'model default'}.",
        "",
    ]
    for col, title, digits in (
        ("log_loss", "Log loss (nats per predicted event, lower is better)", 4),
        ("hit1", "hit@1", 4),
        ("hit3", "hit@3", 4),
        ("fit_seconds", "Fit seconds per fold", 1),
    ):
        lines += [
            f"## {title} (mean ± std over folds)",
            "",
            "| model | " + " | ".join(f"K={K}" for K in states) + " |",
        ]
        lines.append("|---|" + "---|" * len(states))
        for m in names:
            cells = []
            for K in states:
                mean, std, n = mean_std(df[(df["model"] == m) & (df["K"] == K)][col].to_numpy(float))
                cells.append(fmt_pm(mean, std, digits) if n else "n/a")
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines.append("")
    if errors:
        lines += ["## Failed tasks", ""] + [f"- {f}" for f in failure_lines(errors)] + [""]
    return "\n".join(lines)


def _plot(df, names, states, path, title) -> None:
    fig = Figure(figsize=(12, 4.2))
    axes = fig.subplots(1, 3)
    for ax, (col, label) in zip(
        axes, (("log_loss", "log loss (nats)"), ("hit1", "hit@1"), ("hit3", "hit@3"))
    ):
        for m in names:
            ks, means, stds = [], [], []
            for K in states:
                mean, std, n = mean_std(df[(df["model"] == m) & (df["K"] == K)][col].to_numpy(float))
                if n:
                    ks.append(K), means.append(mean), stds.append(std)
            ax.errorbar(
                ks, means, yerr=stds, marker="o", capsize=3, label=m, linestyle="--" if m == MARKOV else "-"
            )
        ax.set_xlabel("K (hidden states)")
        ax.set_title(f"{title}: {label}", fontsize=9)
        ax.set_xticks(states)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=120)
