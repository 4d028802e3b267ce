"""``ldhmm next-event``: predict each held-out sequence's last event from its prefix.

An experiment beyond the paper that users of click-stream models care about. For every
model, K and fold, the model is fitted on the training folds; each test sequence
``x_1..x_n`` is cut into its prefix ``x_1..x_(n-1)`` and its last event ``x_n``, and the model
predicts ``p(x_n | x_1..x_(n-1))`` with ``predict_next_proba``:

* LDHMM-PF / LDHMM-FF (and VBHMM, a member of the family): the sequence's own posterior
  ``q(theta_m)`` after the held-out E-step on the prefix (docs/math.md, next-event prediction);
* HMM: the forward filter with the fitted parameters;
* MARKOV1, MARKOV3: Markov chains over the symbols (first order; interpolated orders 0..3)
  with their smoothing chosen on the training folds (:mod:`ldhmm.baselines.markov_smoothed`);
* MARKOV: the first-order chain with a fixed add-0.5 smoothing (:class:`ldhmm.baselines.MarkovChain`).

The chains have no K: each is fitted once per fold, its row has an empty ``K`` in
``folds.csv``, and the tables show its value at every K, marked "(no K)".

The task unit is (model, fold): one task fits the model along its K values
(:mod:`ldhmm.experiments.along_k`; LDHMM-FF from the LDHMM-PF fit of each K in the same task)
and saves each (model, K, fold) row as it goes, so a run resumes at K granularity.

Columns of ``folds.csv``: ``log_loss`` (mean ``-log p(x_n | prefix)`` over test sequences,
nats), ``hit1`` / ``hit3`` (fraction whose last event is the top-1 / among the top-3
predictions), ``n_test``, ``fit_seconds``.

The run is the pipeline of :func:`ldhmm.experiments.cross_validated.run_experiment`; what is
next-event's own is :class:`NextEvent`: the line-up with :data:`MARKOV`, the measure
(:func:`prediction_row`) and the tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure

from ..baselines import MarkovChain
from ..models.predictive_scores import prediction_scores
from .along_k import Fitter, budget_rules, fold_groups, has_states
from .cross_validated import (
    Experiment,
    ExperimentResult,
    ExperimentSettings,
    RunOutcome,
    fit_task,
    run_experiment,
    write_fold_table,
)
from .lineup import model_from_settings, resolve_models
from .significance import runner_up_test
from .tables import NO_K, effort_words, failure_lines, fmt_pm, mean_std, spread_over_k
from .tasks import atomic_savefig, atomic_write_text, holds_out_dir_lock, timed

__all__ = [
    "next_event",
    "NextEventResult",
    "prediction_scores",
    "MARKOV",
]

#: The name of the Markov-chain baseline in this experiment's tables.
MARKOV = "MARKOV"
DEFAULT_MODELS = ("LDHMM-PF", "LDHMM-FF", "HMM", "VBHMM", "MARKOV1", "MARKOV3", MARKOV)
#: The columns of ``folds.csv``.
FOLD_COLUMNS = [
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


def _stateless(name: str) -> bool:
    """A model without a K: the fixed MARKOV chain or a registered one with ``has_states = False``."""
    return name == MARKOV or not has_states(name)


def _build(payload):
    """The run's models by name: the Markov chain, or a registered model with the run's settings."""
    db, s = payload["db"], payload["settings"]

    def build(name, K):
        if name == MARKOV:
            return MarkovChain(1, n_symbols=db.n_symbols, seed=s["seed"])  # no K: n_states ignored
        return model_from_settings(name, K, db.n_symbols, s)

    return build


def _fold(payload, fold: int):
    """The fold's training sequences and its test sequences of length >= 2."""
    db = payload["db"]
    tr, te = payload["folds"][fold]
    return db.subset(tr).sequences, [x for x in db.subset(te).sequences if len(x) >= 2]


def prediction_row(model, n_train: int, test, fit_seconds: float) -> dict:
    """The row of a fitted model: its predictions of the test sequences' last events."""
    prefixes = [x[:-1] for x in test]
    targets = np.array([int(x[-1]) for x in test])
    proba, predict_s = timed(model.predict_next_proba, prefixes)
    return {
        **prediction_scores(proba, targets),
        "n_train": n_train,
        "n_test": len(test),
        "fit_seconds": fit_seconds,
        "predict_seconds": predict_s,
    }


def _next_event_group(group, payload, output) -> None:
    """One task: a fit plan on one fold, fitted along the run's K values
    (:func:`ldhmm.experiments.cross_validated.fit_task`); each row is saved as soon as it is
    computed (:func:`prediction_row`)."""
    train, test = _fold(payload, int(group["fold"]))
    fitter = Fitter(train, payload["db"].n_symbols, payload["settings"], _build(payload))

    def measure(name, K, model, seconds) -> dict:
        return prediction_row(model, len(train), test, seconds)

    fit_task(group, output, fitter, measure)


class NextEvent(Experiment):
    """``next_event``'s part of :func:`ldhmm.experiments.cross_validated.run_experiment`: the
    registered models and the fixed Markov chain :data:`MARKOV` (no K: fitted once per fold) on
    every fold, each test sequence's last event predicted (:func:`_next_event_group`);
    ``folds.csv``, ``summary.md`` and ``next_event.png``.

    Parameters
    ----------
    models : str or iterable of str
        Registered model names and/or ``"MARKOV"`` (any case).
    """

    task = staticmethod(_next_event_group)

    def __init__(self, models):
        given = [str(m) for m in ([models] if isinstance(models, str) else models)]
        others = [m for m in given if m.upper() != MARKOV]
        with_markov = len(others) < len(given)
        super().__init__([], (resolve_models(others) if others else []) + ([MARKOV] if with_markov else []))

    def record(self, settings: dict, states) -> dict:
        budget = budget_rules([p for p in self.plans if p.base != MARKOV], settings, states)
        if MARKOV in self.names:
            budget[MARKOV] = {"fit": "once per fold", "restarts": None, "rule": "no K: fitted once per fold"}
        return {"budget": budget}

    def groups(self, states, folds: int) -> list[dict]:
        # a Markov chain has no K: its task fits it once, with K = None
        return fold_groups(self.plans, states, folds, stateless=_stateless)

    def tables(self, outcome: RunOutcome) -> NextEventResult:
        names, states = self.names, outcome.states
        df = write_fold_table(outcome.out, outcome.records, FOLD_COLUMNS, ["K", "model", "fold"], names.index)
        md = _summary(df, outcome.what, outcome.settings, names, states, outcome.errors)
        atomic_write_text(outcome.out / "summary.md", md)
        _plot(df, names, states, outcome.out / "next_event.png", outcome.db.name)
        return NextEventResult.of(outcome, df, md)


@dataclass
class NextEventResult(ExperimentResult):
    """What :func:`next_event` returns (``folds.csv``, ``summary.md``, ``next_event.png`` under
    ``out``; the attributes of :class:`ldhmm.experiments.cross_validated.ExperimentResult`)."""


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
    effort: str | None = None,
    force: bool = False,
    quiet: bool = False,
    backend: str = "local",
    client=None,
) -> NextEventResult:
    """Next-event prediction by cross-validation (resumable, like :func:`ldhmm.compare`).

    Parameters
    ----------
    models : iterable of str
        Registered model names with ``predict_next_proba`` and/or ``"MARKOV"``.
    data
        As for :func:`ldhmm.experiments.compare.compare` (default: the MSNBC paper subset).
    states, folds, jobs, out, seed, n_sequences, data_dir, max_iter, tol, restarts, effort, force, quiet
    backend, client
        As for :func:`ldhmm.experiments.compare.compare`.
    """
    # the call's arguments by name: the experiment functions name their shared ones alike
    run = ExperimentSettings.of("next-event", locals())
    return run_experiment(run, NextEvent(models))


def _summary(df, what, settings, names, states, errors) -> str:
    df = spread_over_k(df, states)  # a chain's fold rows at every K
    lines = [
        "# ldhmm next-event",
        "",
        f"Data: {what}.  ",
        f"{settings['folds']}-fold cross-validation (seed {settings['seed']}); each test sequence's "
        f"last event predicted from its prefix; {settings['restarts']} restarts for every model that "
        f"takes restarts (n_init) and the symbol-seeded start where the model has one, defaults "
        f"{settings.get('defaults') or 'before v4'}, EM max_iter {settings['max_iter'] or 'model default'}, "
        f"{effort_words(settings)}. "
        "Models marked "
        f"{NO_K} (the Markov chains) are fitted once per fold; their value fills every K column.",
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
            lines.append(f"| {m}{' ' + NO_K if _stateless(m) else ''} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Verdict", "", *verdict_lines(df, names), ""]
    if errors:
        lines += ["## Failed tasks", ""] + [f"- {f}" for f in failure_lines(errors)] + [""]
    return "\n".join(lines)


def verdict_lines(df, names) -> list[str]:
    """The verdict (``summary.md``'s last section, printed by ``ldhmm next-event``): the (model,
    K) of the lowest mean log loss, named the winner only where a paired t-test over the folds
    puts it below the runner-up at its K (:mod:`ldhmm.experiments.significance`), with both
    models' hit@1 and hit@3; then whether a Markov chain beats the models with hidden states.
    ``df``: the fold rows, a chain's at every K."""
    loss = df.groupby(["model", "K"])["log_loss"].mean()
    loss = loss[np.isfinite(loss.to_numpy(float))]
    if not len(loss):
        return ["No model has a finite log loss: no verdict."]
    m, K = loss.idxmin()
    test = runner_up_test(df, "log_loss", m, K, names, lower_is_better=True)
    at = _named(m, K)
    value = f"log loss {loss[(m, K)]:.4f} nats per event{_hits(df, m, K)}"
    if test is None:
        out = [f"Winner by log loss (the only model): {at}, {value}."]
    elif test.significant:
        out = [f"Winner by log loss: {at}, {value}; {test.clause(4, lambda r: _named(r, K))}."]
    else:
        out = [
            f"No winner by log loss: {at} is lowest ({value}) but {test.clause(4, lambda r: _named(r, K))}."
        ]
    if test is not None:
        out[0] = out[0][:-1] + f"; the runner-up's{_hits(df, test.runner_up, K)[1:]}."
    markov = _markov_verdict(df, names)
    return out + ([markov] if markov else [])


def _named(model, K) -> str:
    return f"{model} {NO_K}" if _stateless(model) else f"{model} with K={K}"


def _hits(df, model, K) -> str:
    """``", hit@1 0.463, hit@3 0.812"``: the model's means over folds at K."""
    rows = df[(df["model"] == model) & (df["K"] == K)]
    return f", hit@1 {rows['hit1'].mean():.3f}, hit@3 {rows['hit3'].mean():.3f}"


def _markov_verdict(df, names) -> str | None:
    """The sentence that says whether a Markov chain predicts better (lower mean log loss) than
    every model with hidden states at its best K; None without both kinds in the run."""
    loss = df.groupby(["model", "K"])["log_loss"].mean()
    chains = [m for m in names if _stateless(m) and m in loss.index.get_level_values(0)]
    hidden = loss[[not _stateless(m) for m in loss.index.get_level_values(0)]]
    if not chains or not len(hidden):
        return None
    chain = min(chains, key=lambda m: loss[m].min())
    value, (m, K), best = float(loss[chain].min()), hidden.idxmin(), float(hidden.min())
    verdict = "predicts better than" if value < best else "does not beat"
    test = runner_up_test(df, "log_loss", chain, K, [chain, m], lower_is_better=True)
    said = ""
    if test is not None and test.n_folds >= 2 and np.isfinite(test.p_value):
        said = " (significant" if test.significant else " (not significant"
        said += f": paired t-test over {test.n_folds} folds, p = {test.p_value:.2g})"
    return (
        f"Markov chain: {chain} (no hidden states) {verdict} the best model with hidden states, {m} "
        f"with K={K}: log loss {value:.4f} against {best:.4f}{said}."
    )


def _plot(df, names, states, path, title) -> None:
    df = spread_over_k(df, states)
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
                ks,
                means,
                yerr=stds,
                marker="o",
                capsize=3,
                label=f"{m} {NO_K}" if _stateless(m) else m,
                linestyle="--" if _stateless(m) else "-",
            )
        ax.set_xlabel("K (hidden states)")
        ax.set_title(f"{title}: {label}", fontsize=9)
        ax.set_xticks(states)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=120)
