"""``ldhmm classify``: generative sequence classification, the paper's Section 5.2 (Table 3).

For a binary task "A-B" and a fold: one model per class is fitted on that class's training
sequences; a test sequence is scored under both, and the AUC of the log-likelihood ratio
``score_A(x) - score_B(x)`` (class A positive) is reported. Ranking by the ratio is the same
as sweeping the class prior p(c) in ``argmax_c p(x|c) p(c)``, which is how the paper
obtains its AUCs. ``score`` is each model's ``score_samples``: exact for HMM, a variational
lower bound for the others (as in the paper).

The folds are stratified K-fold splits of the whole labelled database (all classes, seeded);
a binary task uses each fold's training and test sequences of its two classes, which is a
stratified K-fold of the two-class subset. This lets the per-class models be shared by the
tasks (the EI model of fold 3 serves EI-IE and EI-N), so every (model, K, fold, class) is
fitted once and saved as its own task file (resumable). The task unit is (model, fold, class):
one task fits the model along its K values (:mod:`ldhmm.experiments.along_k`; LDHMM-FF from
the LDHMM-PF fit of each K in the same task) and saves each K's row as it goes, so a run
resumes at K granularity.

The paper's future work, a discriminative classifier on LDHMM features: for LDHMM-FF/PF, one
model is fitted on the training sequences of both classes; each sequence's posterior means
of pi, of the rows of A and of the rows of B (normalized ``posterior()["g_pi"]``, ``g_A``,
``g_B``, flattened, K + K^2 + K V features) go through a standardized L2 logistic regression
(scikit-learn), whose test AUC is reported as model ``LDHMM-PF+LR`` / ``LDHMM-FF+LR``; one task
per (LDHMM plan, fold, binary task), fitted along K as the class models are.

The run is the pipeline of :func:`ldhmm.experiments.cross_validated.run_experiment`; what is
classify's own is :class:`Classification`: the labelled data and its tasks, their measures
(:func:`class_row`, :func:`lr_row`) and the AUC tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from .along_k import (
    Fitter,
    budget_rules,
    fit_plans,
    has_states,
    model_label,
    part_k,
    path_fields,
    plan_states,
)
from .cross_validated import (
    Experiment,
    ExperimentResult,
    ExperimentSettings,
    RunOutcome,
    fit_task,
    run_experiment,
    write_fold_table,
)
from .lineup import ldhmm_names, model_names, model_order
from .plugins import build_model, check_scores, resolve_lineup
from .significance import runner_up_test
from .tables import effort_words, failure_lines, mean_std, spread_over_k
from .tasks import atomic_write_text, holds_out_dir_lock, timed

__all__ = [
    "classify",
    "ClassificationResult",
    "PAPER_TABLE3",
    "posterior_features",
    "parse_tasks",
]

#: The models of the paper's Table 3, in its column order ("LDHMM-nf" in the paper is LDHMM-PF).
_TABLE3_MODELS = ("LDA", "HMM", "HMMV", "VBHMM", "LDHMM-FF", "LDHMM-PF")
#: The paper's Table 3, mean ± std of the AUC over 10 folds: ``{(task, K): {model: (mean, std)}}``,
#: written as its rows: the task, K, then the mean and std of each model of ``_TABLE3_MODELS``.
PAPER_TABLE3 = {
    (task, K): dict(zip(_TABLE3_MODELS, zip(cells[::2], cells[1::2])))
    for task, K, *cells in (
        ("EI-IE", 2, 0.829, 0.032, 0.838, 0.037, 0.829, 0.034, 0.829, 0.034, 0.828, 0.035, 0.834, 0.031),
        ("EI-IE", 3, 0.829, 0.032, 0.827, 0.046, 0.829, 0.034, 0.829, 0.034, 0.828, 0.035, 0.791, 0.044),
        ("EI-IE", 4, 0.829, 0.032, 0.81, 0.048, 0.829, 0.034, 0.829, 0.034, 0.828, 0.035, 0.803, 0.048),
        ("EI-N", 2, 0.67, 0.029, 0.679, 0.038, 0.67, 0.029, 0.67, 0.029, 0.677, 0.03, 0.689, 0.03),
        ("EI-N", 3, 0.667, 0.026, 0.649, 0.033, 0.669, 0.029, 0.67, 0.029, 0.677, 0.03, 0.671, 0.021),
        ("EI-N", 4, 0.671, 0.025, 0.659, 0.036, 0.67, 0.029, 0.67, 0.029, 0.677, 0.03, 0.678, 0.03),
        ("IE-N", 2, 0.724, 0.036, 0.739, 0.029, 0.724, 0.036, 0.724, 0.036, 0.734, 0.033, 0.743, 0.028),
        ("IE-N", 3, 0.725, 0.034, 0.66, 0.024, 0.724, 0.036, 0.724, 0.036, 0.734, 0.033, 0.733, 0.032),
        ("IE-N", 4, 0.729, 0.033, 0.721, 0.023, 0.723, 0.036, 0.724, 0.036, 0.734, 0.033, 0.725, 0.039),
    )
}
SPLICE_TASKS = ("EI-IE", "EI-N", "IE-N")


def parse_tasks(specs, label_names) -> list[tuple[str, str]]:
    """``["EI-IE", ...]`` -> ``[("EI", "IE"), ...]``; default: every pair of classes."""
    names = list(label_names)
    if not specs:
        return [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    out = []
    for spec in specs:
        found = None
        for i in range(1, len(spec)):
            if spec[i] == "-" and spec[:i] in names and spec[i + 1 :] in names:
                found = (spec[:i], spec[i + 1 :])
        if found is None or found[0] == found[1]:
            raise ValueError(
                f"--task {spec!r}: expected two different classes CLASS-CLASS of {', '.join(names)}"
            )
        if found not in out:
            out.append(found)
    return out


def posterior_features(model, sequences) -> np.ndarray:
    """Normalized posterior means of pi, the rows of A and the rows of B, flattened: (M, K+K^2+KV)."""
    post = model.posterior(sequences)
    parts = []
    for g in ("g_pi", "g_A", "g_B"):
        if g in post:
            a = np.asarray(post[g], dtype=np.float64)
            a = a / a.sum(axis=-1, keepdims=True)
            parts.append(a.reshape(a.shape[0], -1))
    return np.concatenate(parts, axis=1)


# ------------------------------------------------------------------------ tasks
def _fitter(payload, index) -> Fitter:
    """The :class:`Fitter` of a training set (database positions ``index``)."""
    db, s, entries = payload["db"], payload["settings"], payload["entries"]
    sequences = db.subset(index).sequences
    return Fitter(sequences, db.n_symbols, s, lambda m, K: build_model(entries.get(m, m), K, db.n_symbols, s))


def _class_training(payload, fold: int, c: str):
    db = payload["db"]
    tr, te = payload["folds"][fold]
    tr_c = tr[db.labels[tr] == db.label_names.index(c)]
    return tr_c, te


def class_row(model, name: str, payload, n_train: int, te, fit_seconds: float) -> dict:
    """The row of a class model: its scores of the fold's test sequences ``te``."""
    scores, score_s = timed(model.score_samples, payload["db"].subset(te).sequences)
    scores = check_scores(scores, te.size, name)
    n_iter = getattr(model, "n_iter_", None)
    return {
        "score_kind": model.score_kind,
        "n_train": int(n_train),
        "test_index": te.tolist(),
        "test_scores": [float(x) for x in scores],
        "fit_seconds": fit_seconds,
        "score_seconds": score_s,
        "n_iter": None if n_iter is None else int(n_iter),
    }


def _pair_split(payload, fold: int, task: str):
    db = payload["db"]
    a, b = task.split("|")
    ca, cb = db.label_names.index(a), db.label_names.index(b)
    tr, te = payload["folds"][fold]
    tr = tr[np.isin(db.labels[tr], [ca, cb])]
    te = te[np.isin(db.labels[te], [ca, cb])]
    return tr, te, ca


def lr_row(model, payload, tr, te, ca, fit_seconds: float) -> dict:
    """The row of an LDHMM fitted on both classes: posterior features -> logistic regression."""
    db, s = payload["db"], payload["settings"]
    x_tr = posterior_features(model, db.subset(tr).sequences)
    x_te = posterior_features(model, db.subset(te).sequences)
    y_tr = (db.labels[tr] == ca).astype(int)
    y_te = (db.labels[te] == ca).astype(int)
    clf = make_pipeline(StandardScaler(), LogisticRegression(C=s["lr_c"], max_iter=5000))
    clf.fit(x_tr, y_tr)
    auc = float(roc_auc_score(y_te, clf.decision_function(x_te)))
    n_iter = getattr(model, "n_iter_", None)
    return {
        "auc": auc,
        "n_train": int(tr.size),
        "n_test": int(te.size),
        "n_features": int(x_tr.shape[1]),
        "fit_seconds": fit_seconds,
        "n_iter": None if n_iter is None else int(n_iter),
    }


def _classify_group(group, payload, output) -> None:
    """One task: a fit plan on one class of a fold (``group["cls"]``) or, for the ``+LR`` rows,
    on both classes of a binary task of a fold (``group["task"]``), fitted along the run's K
    values (:func:`ldhmm.experiments.cross_validated.fit_task`); each row is saved as soon as it
    is computed."""
    fold = int(group["fold"])
    # key_of: the file key of a base fit, the key its row has (or would have)
    if "cls" in group:
        c = group["cls"]
        tr, te = _class_training(payload, fold, c)

        def measure(name, K, model, seconds):
            return class_row(model, name, payload, tr.size, te, seconds)

        def key_of(m, K):
            return f"{m}__K{K}__fold{fold}__class{c}"
    else:
        tr, te, ca = _pair_split(payload, fold, group["task"])
        pair = group["task"].replace("|", "-")

        def measure(name, K, model, seconds):
            return lr_row(model, payload, tr, te, ca, seconds)

        def key_of(m, K):
            return f"{m}+LR__K{K}__fold{fold}__task{pair}"

    fit_task(group, output, _fitter(payload, tr), measure, key_of)


def _class_key(model: str, K: int | None, fold: int, c: str) -> str:
    if K is None:
        return f"{model}__fold{fold}__class{c}"
    return f"{model}__K{K}__fold{fold}__class{c}"


def _classify_groups(plans, lr_plans, states, folds: int, classes, pairs) -> list[dict]:
    """The tasks of a run: one per (plan, fold, class) and one per (LDHMM plan, fold, binary
    task) for the ``+LR`` rows; the LDHMM tasks, the costliest, first."""

    def gen(plan):
        ks = plan_states(plan, states)  # [None] for a model without states: one fit per class
        return [
            {
                "key": f"{plan.key}__fold{f}__class{c}",
                "plan": plan,
                "fold": f,
                "cls": c,
                "states": ks,
                "parts": [
                    {"key": _class_key(m, K, f, c), "model": m, "K": K, "fold": f, "cls": c}
                    | path_fields(plan, ks, K)
                    for m in plan.names
                    for K in ks
                ],
            }
            for f in range(folds)
            for c in classes
        ]

    lr = [
        {
            "key": f"{plan.key}+LR__fold{f}__task{a}-{b}",
            "plan": plan,
            "fold": f,
            "task": f"{a}|{b}",
            "states": states,
            "parts": [
                {
                    "key": f"{m}+LR__K{K}__fold{f}__task{a}-{b}",
                    "base_model": m,
                    "model": f"{m}+LR",
                    "K": K,
                    "fold": f,
                    "task": f"{a}|{b}",
                }
                | path_fields(plan, states, K)
                for m in plan.names
                for K in states
            ],
        }
        for plan in lr_plans
        for f in range(folds)
        for a, b in pairs
    ]
    family = set(ldhmm_names())
    first = [g for p in plans if p.base in family for g in gen(p)]
    rest = [g for p in plans if p.base not in family for g in gen(p)]
    return first + lr + rest


#: The columns of ``folds.csv``.
FOLD_COLUMNS = ["task", "model", "K", "fold", "auc", "score_kind", "n_test", "n_train", "fit_seconds"]


class Classification(Experiment):
    """``classify``'s part of :func:`ldhmm.experiments.cross_validated.run_experiment`: a labelled
    database, one task per (plan, fold, class) and per (LDHMM plan, fold, binary task) for the
    ``+LR`` rows (:func:`_classify_group`); the AUCs of ``folds.csv`` and ``summary.md``.

    Parameters
    ----------
    entries : list of ModelEntry
        The line-up (:func:`ldhmm.experiments.plugins.resolve_lineup`).
    tasks : list of str or None
        The binary tasks ``"A-B"`` (None: every pair of the database's classes).
    lr : bool
        Add the ``+LR`` rows of the LDHMM models of the line-up.
    lr_c : float
        Inverse L2 strength of the logistic regression (a result-determining setting).
    """

    task = staticmethod(_classify_group)

    def __init__(self, entries, tasks, lr: bool, lr_c: float):
        super().__init__(entries)
        self.tasks, self.lr_c = tasks, lr_c
        self.lr_models = [m for m in ldhmm_names() if m in self.names] if lr else []
        self.lr_plans = fit_plans(self.lr_models)
        self.pairs, self.task_names, self.classes = [], [], []  # the data's: check_data

    def check_data(self, db, what: str) -> None:
        if db.labels is None:
            raise ValueError(
                f"{what}: the sequences have no class labels; classify needs a labelled database"
            )
        self.pairs = parse_tasks(self.tasks, db.label_names)
        self.task_names = [f"{a}-{b}" for a, b in self.pairs]
        self.classes = [c for c in db.label_names if any(c in p for p in self.pairs)]

    def more_settings(self) -> dict:
        return {"lr_c": self.lr_c, **super().more_settings()}

    def record(self, settings: dict, states) -> dict:
        budget = budget_rules(self.plans, settings, states, what="; one model per class")
        budget.update(
            budget_rules(self.lr_plans, settings, states, suffix="+LR", what="; fitted on both classes")
        )
        return {"budget": budget, "tasks": self.task_names, "lr_models": self.lr_models}

    def groups(self, states, folds: int) -> list[dict]:
        return _classify_groups(self.plans, self.lr_plans, states, folds, self.classes, self.pairs)

    def tables(self, outcome: RunOutcome) -> ClassificationResult:
        rows = _auc_rows(outcome, self.pairs, self.names) + _lr_rows(outcome.records)
        if not rows:
            first = f"; the first: {outcome.errors[0]}" if outcome.errors else ""
            raise RuntimeError(f"no task finished ({len(outcome.errors)} failed{first})")
        df = write_fold_table(outcome.out, rows, FOLD_COLUMNS, ["task", "K", "model", "fold"], model_order)
        col_models = self.names + [f"{m}+LR" for m in self.lr_models]
        md = summary_markdown(
            df,
            outcome.what,
            outcome.settings,
            self.task_names,
            outcome.states,
            col_models,
            outcome.db.name,
            errors=outcome.errors,
            class_fits=class_fit_cells(outcome, self.names),
        )
        atomic_write_text(outcome.out / "summary.md", md)
        return ClassificationResult.of(outcome, df, md)


def _auc_rows(outcome: RunOutcome, pairs, models) -> list[dict]:
    """The generative rows of ``folds.csv``: per binary task, K, model and fold, the AUC of the
    ratio of the two class models' scores of the fold's test sequences of the task's classes."""
    db, states, folds = outcome.db, outcome.states, outcome.settings["folds"]
    by_key = {
        (r["model"], part_k(r["K"]), int(r["fold"]), r["cls"]): r for r in outcome.records if "cls" in r
    }
    rows = []
    for a, b in pairs:
        ca, cb = db.label_names.index(a), db.label_names.index(b)
        for K in states:
            for m in models:
                if not has_states(m) and K != states[0]:
                    continue  # one row per fold, K empty
                k = K if has_states(m) else None
                for f in range(folds):
                    ra, rb = by_key.get((m, k, f, a)), by_key.get((m, k, f, b))
                    if ra is None or rb is None:
                        continue
                    idx = np.asarray(ra["test_index"])
                    llr = np.asarray(ra["test_scores"]) - np.asarray(rb["test_scores"])
                    keep = np.isin(db.labels[idx], [ca, cb])
                    y = (db.labels[idx][keep] == ca).astype(int)
                    score = llr[keep]
                    auc = math.nan
                    if np.all(np.isfinite(score)) and 0 < y.sum() < y.size:
                        auc = float(roc_auc_score(y, score))
                    rows.append(
                        {
                            "task": f"{a}-{b}",
                            "model": m,
                            "K": k,
                            "fold": f,
                            "auc": auc,
                            "score_kind": ra["score_kind"],
                            "n_test": int(keep.sum()),
                            "n_train": ra["n_train"] + rb["n_train"],
                            "fit_seconds": ra["fit_seconds"] + rb["fit_seconds"],
                        }
                    )
    return rows


def class_fit_cells(outcome: RunOutcome, models) -> dict:
    """How well each class model fits its own class held out: (class, K, model) -> (mean, std)
    over folds of the model's score (``score_kind``: a bound for the variational models, exact
    for the HMM and the chains) of the fold's test sequences of that class, per symbol. A model
    without states is placed at every K of the run (:func:`spread_over_k`, as its AUCs are)."""
    db, lengths = outcome.db, np.asarray(outcome.db.lengths)
    rows = []
    for r in outcome.records:
        if "cls" not in r or r["model"] not in models:
            continue
        idx = np.asarray(r["test_index"])
        own = db.labels[idx] == db.label_names.index(r["cls"])
        n_symbols = int(lengths[idx[own]].sum())
        if n_symbols:
            score = float(np.asarray(r["test_scores"], dtype=np.float64)[own].sum()) / n_symbols
            rows.append({"class": r["cls"], "K": part_k(r["K"]), "model": r["model"], "score": score})
    if not rows:
        return {}
    df = spread_over_k(pd.DataFrame(rows).astype({"K": "float64"}), outcome.states)
    return {
        (c, int(K), m): mean_std(g["score"].to_numpy(float))[:2]
        for (c, K, m), g in df.groupby(["class", "K", "model"], sort=False)
    }


def _lr_rows(records) -> list[dict]:
    """The ``+LR`` rows of ``folds.csv``: one per record of an LDHMM fitted on both classes."""
    return [
        {
            "task": r["task"].replace("|", "-"),
            "model": r["model"],
            "K": int(r["K"]),
            "fold": int(r["fold"]),
            "auc": r["auc"],
            "score_kind": "discriminative",
            "n_test": r["n_test"],
            "n_train": r["n_train"],
            "fit_seconds": r["fit_seconds"],
        }
        for r in records
        if "base_model" in r
    ]


# ------------------------------------------------------------------------ the command
@dataclass
class ClassificationResult(ExperimentResult):
    """What :func:`classify` returns; the same files are under ``out``.

    Attributes
    ----------
    folds : pandas.DataFrame
        One row per (task, model, K, fold): ``auc``, ``score_kind`` (``"discriminative"`` for
        the ``+LR`` rows), sizes and fit seconds (``folds.csv``).
    summary : str
        The Markdown report (``summary.md``).
    out : Path
    errors : list of str
        One line per failed task; rerunning retries them.
    config : dict
        The run's ``config.json``.
    data : str
        Which database was used.
    """

    def table(self) -> pd.DataFrame:
        """Mean AUC over folds per (task, K) (rows) and model (columns)."""
        folds = spread_over_k(self.folds, self.config["states"])
        return folds.pivot_table(index=["task", "K"], columns="model", values="auc", aggfunc="mean")


@holds_out_dir_lock
def classify(
    models="all",
    data=None,
    states=(2, 3, 4),
    folds: int = 10,
    jobs: int = 1,
    out=None,
    seed: int = 0,
    *,
    tasks=None,
    n_sequences: int | None = None,
    data_dir=None,
    sequence_col: str | None = None,
    event_col: str | None = None,
    time_col: str | None = None,
    max_iter: int | None = None,
    tol: float | None = None,
    m_step: str = "collapsed",
    effort: str | None = None,
    restarts: int = 3,
    lr: bool = True,
    lr_c: float = 1.0,
    force: bool = False,
    quiet: bool = False,
    plugins=(),
    backend: str = "local",
    client=None,
) -> ClassificationResult:
    """Generative classification AUCs per model and K, plus LDHMM features + logistic regression.

    ``ldhmm classify`` is this function behind a parser.

    Parameters
    ----------
    models, states, folds, jobs, out, seed, n_sequences, data_dir, sequence_col, event_col,
    time_col, max_iter, tol, m_step, effort, restarts, force, quiet, plugins, backend, client
        As for :func:`ldhmm.experiments.compare.compare` (``out`` default
        ``results/classify-<data>``).
    data : optional
        A labelled database: ``"splice"`` (default), ``"synthetic"`` (a built-in two-class
        database), a labelled file (ldhmm-sequences text format) or a labelled
        :class:`SequenceDatabase`.
    tasks : list of str, optional
        Binary tasks ``"A-B"`` (default: every pair of classes).
    lr : bool
        Add the LDHMM-features + logistic regression rows (``NAME+LR``).
    lr_c : float
        Inverse L2 strength C of the logistic regression.

    Returns
    -------
    ClassificationResult
    """
    # the call's arguments by name: the experiment functions name their shared ones alike
    run = ExperimentSettings.of("classify", locals(), labelled=True, default_data="splice")
    return run_experiment(run, Classification(resolve_lineup(models, extra=plugins), tasks, lr, lr_c))


def _mean_std_table(cells, task_names, states, col_models, bold=True, first: str = "task", digits: int = 3):
    """A Markdown table of ``cells`` ((row, K, model) -> (mean, std)): a line per row name of
    ``task_names`` and K, a column per model (headed ``first``, ``K``, the models), each cell
    ``mean ± std`` to ``digits`` decimals, the highest of each line in bold."""
    lines = [
        f"| {first} | K | " + " | ".join(model_label(m) for m in col_models) + " |",
        "|---|---|" + "---|" * len(col_models),
    ]
    for t in task_names:
        for K in states:
            vals = {m: cells.get((t, K, m)) for m in col_models}
            finite = [v[0] for v in vals.values() if v is not None and np.isfinite(v[0])]
            top = max(finite) if finite else None
            out = []
            for m in col_models:
                v = vals[m]
                if v is None or not np.isfinite(v[0]):
                    out.append("n/a")
                    continue
                s = f"{v[0]:.{digits}f} ± {v[1]:.{digits}f}"
                best = top is not None and round(v[0], digits) == round(top, digits)
                out.append(f"**{s}**" if bold and best else s)
            lines.append(f"| {t} | {K} | " + " | ".join(out) + " |")
    return "\n".join(lines)


def _verdicts(df, task_names, col_models) -> list[str]:
    """One line per task: the (model, K) of the highest mean AUC, named best only where a paired
    t-test over the folds puts it above the runner-up at its K
    (:func:`ldhmm.experiments.significance.runner_up_test`). ``df``: the fold rows, a model
    without K at every K."""
    out = []
    for t in task_names:
        dt = df[df["task"] == t]
        means = dt.groupby(["model", "K"])["auc"].mean()
        means = means[np.isfinite(means.to_numpy(float))]
        if not len(means):
            out.append(f"- {t}: no finite AUC: no verdict.")
            continue
        (m, K), value = means.idxmax(), float(means.max())
        K = int(K)

        def named(model, K=K):
            return f"{model} with K={K}" if has_states(model) else f"{model} (no K)"

        test = runner_up_test(dt, "auc", m, K, col_models)
        if test is None:
            out.append(f"- {t}: {named(m)} (AUC {value:.3f}), the only model.")
        elif test.significant:
            out.append(f"- {t}: best AUC: {named(m)} ({value:.3f}), {test.clause(3, named)}.")
        else:
            out.append(
                f"- {t}: no model named best: {named(m)} has the highest AUC ({value:.3f}) but "
                f"{test.clause(3, named)}."
            )
    return out


def _markov_verdicts(cells, task_names, states, col_models) -> list[str]:
    """Lines naming the tasks where a Markov chain (a model without states) has a higher mean AUC
    than every model with hidden states at every K; none when no chain wins or runs."""
    chains = [m for m in col_models if not has_states(m)]
    others = [m for m in col_models if has_states(m)]
    won = []
    for t in task_names:
        best_chain = max((cells.get((t, states[0], m), (-1.0,))[0] for m in chains), default=-1.0)
        rivals = [cells[(t, K, m)][0] for K in states for m in others if (t, K, m) in cells]
        if chains and rivals and best_chain > max(rivals):
            won.append(t)
    if not won:
        return []
    return [
        f"Markov chain: a chain without hidden states has the best AUC, above every model with "
        f"hidden states at every K, on {', '.join(won)}.",
        "",
    ]


def summary_markdown(
    df, what, settings, task_names, states, col_models, db_name, errors=(), class_fits=None
) -> str:
    cells = {}
    for (t, K, m), g in spread_over_k(df, states).groupby(["task", "K", "model"]):
        mean, std, n = mean_std(g["auc"].to_numpy(float))
        cells[(t, int(K), m)] = (mean, std)
    lines = [
        "# ldhmm classify",
        "",
        f"Data: {what}.  ",
        f"{settings['folds']}-fold stratified cross-validation (seed {settings['seed']}), EM max_iter "
        f"{settings['max_iter'] or 'model default'}, tol {settings['tol'] or 'model default'}, "
        f"{settings.get('restarts') or 'model default'} restarts for every model (n_init) and the "
        f"symbol-seeded start where the model has one, defaults {settings.get('defaults') or 'before v4'}, "
        f"M-step {settings.get('m_step') or 'collapsed'}, {effort_words(settings)}.",
        "",
        "## AUC (mean ± std over folds), highest of each row in bold",
        "",
        "Generative columns: one model per class, AUC of the ratio of held-out scores (class A of "
        "task A-B positive; HMM's score is exact, the others' are lower bounds). `+LR` columns: "
        "posterior means of pi, A, B of one LDHMM fitted on both classes -> logistic regression.",
        "",
        _mean_std_table(cells, task_names, states, col_models),
        "",
    ]
    if db_name == "splice":
        paper_cols = [m for m in model_names() if any(m in row for row in PAPER_TABLE3.values())]
        pcells = {(t, K, m): v for (t, K), row in PAPER_TABLE3.items() for m, v in row.items()}
        ks = [K for K in states if any((t, K) in PAPER_TABLE3 for t in task_names)]
        if ks:
            lines += [
                "## The paper's Table 3 (for reference; its LDHMM-nf is LDHMM-PF)",
                "",
                _mean_std_table(pcells, [t for t in task_names if t in SPLICE_TASKS], ks, paper_cols),
                "",
            ]
    if class_fits:
        classes = list(dict.fromkeys(c for c, _, _ in class_fits))
        fit_models = [m for m in col_models if any(m == key[2] for key in class_fits)]
        lines += [
            "## Held-out fit of each class model (score per symbol, mean ± std over folds)",
            "",
            "Each class model's score of its own class's test sequences of the fold, per symbol "
            "(higher is better; a lower bound for LDHMM, VBHMM, HMMV and LDA, exact for the HMM "
            "and the chains): how well the model fits the class, which the AUCs above do not "
            "measure (a better fit of each class can separate the classes less well).",
            "",
            _mean_std_table(class_fits, classes, states, fit_models, first="class", digits=4),
            "",
        ]
    lines += ["## Verdict (per task: the highest mean AUC against the runner-up at its K)", ""]
    lines += _verdicts(spread_over_k(df, states), task_names, col_models) + [""]
    lines += _markov_verdicts(cells, task_names, states, col_models)
    fit = df.groupby("model")["fit_seconds"].mean()
    lines += [
        "## Mean fit seconds per (task, fold) (both class models, or the +LR model)",
        "",
        "| model | seconds |",
        "|---|---|",
    ]
    lines += [f"| {m} | {fit[m]:.1f} |" for m in col_models if m in fit]
    if errors:
        lines += ["", "## Failed tasks", "", "These tasks left no result; a rerun retries them.", ""]
        lines += [f"- {f}" for f in failure_lines(errors)]
    return "\n".join(lines) + "\n"
