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
``is_samples``
    Draws per sequence (with ``is_min_ess``, the first round's: a sequence with a low effective
    sample size then has more, up to ``is_max_samples``).
``is_std_error``, ``is_min_ess``, ``is_low_ess``
    How far ``heldout_is`` can be trusted (:mod:`ldhmm.inference.ops.importance`): its standard
    error over the fold (the per-sequence standard errors added in quadrature), the smallest
    effective sample size of a sequence's draws, and how many sequences have fewer than
    ``LOW_ESS`` (10) effective draws; NaN for a model whose ``log_marginal_is`` gives no
    diagnostics.

``score_kind``, ``score_family``
    What ``heldout_elbo`` is: ``"exact"``, ``"estimate"`` or ``"lower_bound"``, and for a
    bound its variational family (``"PF"``, ``"FF"``, ``"z-summed, Dirichlet mean field"``,
    ...: the model's ``score_family``).

Bounds are compared only within one family: the t-tests and the "best model" lines use the
measure :func:`ldhmm.experiments.measures.comparison_measure` picks, the models' own held-out
score where every one is of one kind and family, else log p(x) (exact where there is one, the
importance-sampled estimate otherwise), and say which. The summary keeps the two measures in
separate tables and labels every row with its kind and family.

The run is the pipeline of :func:`ldhmm.experiments.cross_validated.run_experiment`; what is
compare's own is :class:`Comparison`: the tasks, their measure (:func:`score_fit`) and the
tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy.stats import ttest_rel

from ..inference.ops.importance import LOW_ESS
from ..models.base import importance_estimate
from ..models.choice_of_k import suggest_k
from ..models.collapse import SHARED_HMM, share_at_cap
from .along_k import Fitter, fold_groups, has_states, model_label
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
from .measures import (
    LOG_PX,
    LOG_PX_LABEL,
    LOG_PX_MEASURE,
    Measure,
    comparison_measure,
    row_labels,
    score_family_of,
    with_log_px,
)
from .plugins import build_model, check_scores, resolve_lineup
from .significance import ALPHA, runner_up_test
from .tables import NO_K, effort_words, failure_lines, fmt_pm, mean_std, spread_over_k
from .tasks import atomic_savefig, atomic_write_csv, atomic_write_text, holds_out_dir_lock, timed

__all__ = [
    "compare",
    "ComparisonResult",
    "compare_group",
    "compare_groups",
    "score_fit",
    "console_table",
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
    ["model", "K", "fold", "score_kind", "score_family", "n_train", "n_test", "n_test_tokens"]
    + SCORE_COLUMNS
    + ["is_samples", "is_std_error", "is_min_ess", "is_low_ess"]
    + ["fit_seconds", "score_seconds", "is_seconds", "n_iter", "converged", "priors_at_cap"]
)


# ------------------------------------------------------------------------ the task
def score_fit(model, name: str, K: int, fold: int, test, s: dict, fit_seconds: float) -> dict:
    """The row of a fitted model: its scores of the held-out fold ``test`` (see the module
    docstring), with its fit statistics."""
    n_tokens = int(sum(len(x) for x in test))
    scores, score_s = timed(model.score_samples, test)
    scores = check_scores(scores, len(test), name)
    total = float(scores.sum())
    is_total, is_s, trust = (
        math.nan,
        0.0,
        {"is_std_error": math.nan, "is_min_ess": math.nan, "is_low_ess": math.nan},
    )
    if s["is_samples"] > 0 and callable(getattr(model, "log_marginal_is", None)):
        found, is_s = timed(
            importance_estimate,
            model,
            test,
            s["is_samples"],
            s["seed"] + 1000 * fold + K,
            s.get("is_min_ess", 0.0),
            s.get("is_max_samples"),
        )
        is_total = float(np.sum(check_scores(found.log_marginal, len(test), name, "log_marginal_is")))
        if np.isfinite(found.ess).all():
            trust = {
                "is_std_error": float(np.sqrt(np.sum(np.asarray(found.std_error) ** 2))),
                "is_min_ess": float(np.min(found.ess)),
                "is_low_ess": int(np.sum(np.asarray(found.ess) < LOW_ESS)),
            }
    n_iter = getattr(model, "n_iter_", None)
    return {
        "score_kind": model.score_kind,
        "score_family": score_family_of(model),
        "n_test": len(test),
        "n_test_tokens": n_tokens,
        "heldout_elbo": total,
        "heldout_elbo_per_seq": total / len(test),
        "heldout_elbo_per_token": total / n_tokens,
        "heldout_is": is_total,
        "heldout_is_per_seq": is_total / len(test),
        "heldout_is_per_token": is_total / n_tokens,
        "is_samples": s["is_samples"] if math.isfinite(is_total) else 0,
        **trust,
        "fit_seconds": fit_seconds,
        "score_seconds": score_s,
        "is_seconds": is_s,
        "n_iter": None if n_iter is None else int(n_iter),
        "converged": bool(getattr(model, "converged_", False)),
        "priors_at_cap": share_at_cap(model),
    }


def _more_draws_settings(min_ess, max_samples, is_samples) -> dict:
    """The run settings of the rule for more draws: ``{}`` when it is off (the default), so that
    a run without it keeps the configuration hash it always had."""
    if isinstance(min_ess, bool) or not isinstance(min_ess, (int, float)) or not 0 <= min_ess < math.inf:
        raise ValueError(f"is_min_ess must be a finite number >= 0, got {min_ess!r}")
    if max_samples is not None and (
        isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < is_samples
    ):
        raise ValueError(
            f"is_max_samples must be an integer >= is_samples ({is_samples}), got {max_samples!r}"
        )
    if min_ess == 0:
        if max_samples is not None:  # it would cap nothing: refused, not dropped
            raise ValueError("is_max_samples needs is_min_ess > 0 (it caps the draws that rule adds)")
        return {}
    if not is_samples:
        raise ValueError("is_min_ess needs is_samples > 0 (it adds draws to those)")
    return {"is_min_ess": float(min_ess), "is_max_samples": int(max_samples or 8 * is_samples)}


def _fold_fitter(payload, fold: int):
    """The fold's training and test sequences, and its :class:`Fitter` (the run's models)."""
    db, s, entries = payload["db"], payload["settings"], payload["entries"]
    tr, te = payload["folds"][fold]
    train = db.subset(tr).sequences
    test = db.subset(te).sequences
    fitter = Fitter(train, db.n_symbols, s, lambda m, K: build_model(entries.get(m, m), K, db.n_symbols, s))
    return train, test, fitter


def compare_group(group, payload, output) -> None:
    """One task: a fit plan (:class:`ldhmm.experiments.along_k.FitPlan`) on one fold, fitted
    along the run's K values (:func:`ldhmm.experiments.cross_validated.fit_task`); each (model,
    K, fold) row is saved the moment it is scored (:func:`score_fit`)."""
    fold = int(group["fold"])
    train, test, fitter = _fold_fitter(payload, fold)

    def measure(name, K, model, seconds) -> dict:
        return {"n_train": len(train), **score_fit(model, name, K, fold, test, payload["settings"], seconds)}

    fit_task(group, output, fitter, measure)


def compare_groups(plans, states, folds: int) -> list[dict]:
    """The tasks of a run: one per (plan, fold), in plan order (the LDHMM plans, the costliest,
    first: with ``jobs`` workers the cheap tasks fill the end of the run); a model without
    states has one part per fold, ``K = None`` (:func:`ldhmm.experiments.along_k.fold_groups`)."""
    return fold_groups(plans, states, folds)


class Comparison(Experiment):
    """``compare``'s part of :func:`ldhmm.experiments.cross_validated.run_experiment`: every
    model on every fold, scored on the held-out fold (:func:`compare_group`); ``folds.csv``,
    the t-tests, ``summary.md`` and the plot.

    Parameters
    ----------
    entries : list of ModelEntry
        The line-up (:func:`ldhmm.experiments.plugins.resolve_lineup`).
    sampling : dict
        The importance-sampling settings of the run (``is_samples``, and the rule for more
        draws where it is on: :func:`_more_draws_settings`), into its hash.
    """

    task = staticmethod(compare_group)

    def __init__(self, entries, sampling: dict):
        super().__init__(entries)
        self.sampling = sampling

    def more_settings(self) -> dict:
        return {**self.sampling, **super().more_settings()}

    def groups(self, states, folds: int) -> list[dict]:
        # through the module's name: benchmarks/fold_projection.py swaps it to run some folds only
        return compare_groups(self.plans, states, folds)

    def tables(self, outcome: RunOutcome) -> ComparisonResult:
        out = outcome.out
        df = write_fold_table(out, outcome.records, CSV_COLUMNS, ["K", "model", "fold"], model_order)
        summary, best, tt = write_reports(
            df, out, outcome.what, outcome.settings, self.names, outcome.states, errors=outcome.errors
        )
        return ComparisonResult(
            folds=df,
            ttests=tt,
            summary=summary,
            plot=out / "loglik_vs_K.png",
            out=out,
            errors=outcome.errors,
            best=best,
            config=outcome.config,
            data=outcome.what,
        )


@dataclass
class ComparisonResult(ExperimentResult):
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

    ttests: pd.DataFrame
    plot: Path
    best: list

    def table(self, column: str = "heldout_elbo") -> pd.DataFrame:
        """Mean over folds of ``column`` per model (rows, in table order) and K (columns).

        ``column`` is a column of :attr:`folds` or ``"log_px"`` (``"log_px_per_token"``, ...:
        log p(x), exact where there is one, importance-sampled otherwise;
        :func:`ldhmm.experiments.measures.with_log_px`). For a score column the first column,
        ``score``, says what each row's numbers are: the kind, and for a bound its family
        (``"lower bound (PF family)"``), for log p(x) how it was had.
        """
        folds = spread_over_k(with_log_px(self.folds), self.config["states"])
        t = folds.pivot_table(index="model", columns="K", values=column, aggfunc="mean")
        order = sorted(t.index, key=lambda m: (list(self.config["models"]).index(m), m))
        t = t.loc[order]
        label = _column_label(column)
        if label is not None:
            t.insert(0, "score", [label(m, folds[folds["model"] == m]) for m in t.index])
        return t


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
    effort: str | None = None,
    restarts: int = 3,
    is_samples: int = 100,
    is_min_ess: float = 0.0,
    is_max_samples: int | None = None,
    force: bool = False,
    quiet: bool = False,
    plugins=(),
    backend: str = "local",
    client=None,
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
        or, for the built-in model of that name, None or the name (``{"HMM": "HMM"}``)
        (:mod:`ldhmm.experiments.plugins`).
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
    effort : {"quick", "standard", "thorough"}, optional
        How hard each fit of the LDHMM family (LDHMM-PF, LDHMM-FF, VBHMM, HMMV, and a factory
        that names ``effort``) searches; ``"thorough"`` is the v4 defaults bit for bit
        (docs/performance.md, "Effort presets"). None: each model's default (``"standard"``).
    restarts : int
        Restart budget (``n_init``) of every registered model that takes restarts.
    is_samples : int
        Importance samples per test sequence for ``heldout_is`` (0: skip).
    is_min_ess, is_max_samples : float, int, optional
        More draws where a sequence's effective sample size is below ``is_min_ess`` (0: off,
        the default), up to ``is_max_samples`` draws (default ``8 * is_samples``): the seeded
        rule of :func:`ldhmm.models.base.importance_estimate`.
    force : bool
        Reuse an ``out`` that holds results of another configuration.
    quiet : bool
        No progress bar.
    plugins : iterable of str
        ``"NAME=package.module:factory"`` strings added to ``models`` (the CLI's ``--model``).
    backend : {"local", "dask"}
        Where the (model, fold) tasks run: ``jobs`` processes of this machine, or the workers
        of ``client`` (a ``distributed.Client``; :mod:`ldhmm.experiments.cluster_tasks`), with
        the same numbers, the same task store and the same resume.
    client : distributed.Client, optional
        Required by ``backend="dask"``.

    Returns
    -------
    ComparisonResult
        Failed tasks (a plug-in that raises, returns NaN or violates the protocol) are listed
        in ``errors`` and in ``summary.md``; the other tasks' results are kept.
    """
    # the call's arguments by name: the experiment functions name their shared ones alike
    run = ExperimentSettings.of("compare", locals())
    sampling = {"is_samples": is_samples, **_more_draws_settings(is_min_ess, is_max_samples, is_samples)}
    return run_experiment(run, Comparison(resolve_lineup(models, extra=plugins), sampling))


def _paired_test(dk, a: str, b: str, measure: Measure) -> dict:
    """The paired t-test of models ``a`` and ``b`` over the folds both have, by ``measure``."""
    da = dk[dk["model"] == a].set_index("fold")
    db_ = dk[dk["model"] == b].set_index("fold")
    common = sorted(set(da.index) & set(db_.index))
    col = measure.column
    xa = da.loc[common, col].to_numpy(float) if common else np.array([])
    xb = db_.loc[common, col].to_numpy(float) if common else np.array([])
    ok = np.isfinite(xa) & np.isfinite(xb)
    xa, xb = xa[ok], xb[ok]
    if xa.size >= 2 and np.any(xa - xb != 0):
        t, p = ttest_rel(xa, xb)
    else:
        t, p = math.nan, math.nan
    return {
        "measure": measure.label,
        "kind_a": _what(da, measure),
        "kind_b": _what(db_, measure),
        "n_folds": int(xa.size),
        "mean_a": float(xa.mean()) if xa.size else math.nan,
        "mean_b": float(xb.mean()) if xb.size else math.nan,
        "mean_diff": float((xa - xb).mean()) if xa.size else math.nan,
        "t": float(t),
        "p_value": float(p),
    }


def _what(rows, measure: Measure) -> str:
    """What one model's numbers under ``measure`` are (its score's label, or how its log p(x) is had)."""
    if not len(rows):
        return ""
    if measure.column != LOG_PX:
        return str(row_labels(rows.iloc[:1]).iloc[0])
    kind = str(rows["log_px_kind"].iloc[0])
    return f"log p(x), {kind}" if kind else "no log p(x)"


def ttests(df, models) -> pd.DataFrame:
    """Paired two-tailed t-tests (over folds) of each LDHMM variant and each plug-in model
    against every other model.

    Each pair is tested by the measure that compares it (:func:`comparison_measure`): the two
    models' own held-out scores where both are of one kind and, for bounds, one family, else
    log p(x) (exact where there is one, importance-sampled otherwise); a pair compared by a
    bound is tested by log p(x) as well where both have it. ``measure``, ``kind_a`` and
    ``kind_b`` say what was compared.
    """
    rows = []
    registered = set(model_names())
    ldhmm = [m for m in ldhmm_names() if m in models] + [m for m in models if m not in registered]
    df = with_log_px(df)
    for K in sorted(df["K"].unique()):
        dk = df[df["K"] == K]
        for a in [m for m in ldhmm if m in models]:
            for b in [m for m in models if m != a]:
                if b in ldhmm and ldhmm.index(b) < ldhmm.index(a):
                    continue  # FF vs PF once
                measure = comparison_measure(dk, [a, b])
                rows.append({"K": int(K), "model_a": a, "model_b": b, **_paired_test(dk, a, b, measure)})
                if measure.column != LOG_PX:
                    also = _paired_test(dk, a, b, LOG_PX_MEASURE)
                    if also["n_folds"]:
                        rows.append({"K": int(K), "model_a": a, "model_b": b, **also})
    columns = ["K", "model_a", "model_b", "measure", "kind_a", "kind_b", "n_folds"]
    return pd.DataFrame(rows, columns=columns + ["mean_a", "mean_b", "mean_diff", "t", "p_value"])


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


def _column_label(column: str):
    """How a score column's rows are labelled (a function of model and rows), or None."""
    if column.startswith(LOG_PX):
        return _log_px_label
    if column.startswith("heldout_is"):
        return lambda m, dm: "log p(x), importance-sampled"
    if column.startswith("heldout_elbo"):
        return _own_label
    return None


def _own_label(m, dm) -> str:
    """The label of a model's held-out score (kind, and family for a bound)."""
    return str(row_labels(dm.iloc[:1]).iloc[0])


def _log_px_label(m, dm) -> str:
    kinds = dm.loc[np.isfinite(dm[LOG_PX].to_numpy(float)), "log_px_kind"]
    return f"log p(x), {kinds.iloc[0]}" if len(kinds) else "no log p(x)"


def _models_with_log_px(df, models) -> list[str]:
    """The models of the run with a log p(x) in their rows (exact, or importance-sampled)."""
    return [m for m in models if np.isfinite(df.loc[df["model"] == m, LOG_PX].to_numpy(float)).any()]


def write_reports(df, out: Path, what: str, settings: dict, models, states, errors=()):
    """summary.md, ttests.csv and loglik_vs_K.png from the per-fold table; returns
    (markdown text, closing lines naming the best model, the t-test table)."""
    out = Path(out)
    df = spread_over_k(df, states)  # a model without states: its fold rows at every K
    present = [m for m in models if m in set(df["model"])]
    tt = ttests(df, present)
    atomic_write_csv(tt, out / "ttests.csv")
    d = with_log_px(df)
    with_px = _models_with_log_px(d, present)
    lines = [
        "# ldhmm compare",
        "",
        f"Data: {what}.  ",
        f"{settings['folds']}-fold cross-validation, seed {settings['seed']}, EM max_iter "
        f"{settings['max_iter'] or 'model default'}, tol {settings['tol'] or 'model default'}, "
        f"{settings.get('restarts') or 'model default'} restarts for every model that takes restarts "
        "(n_init) and the symbol-seeded start where the model has one (`config.json`, budget), "
        f"defaults {settings.get('defaults') or 'before v4'}, "
        f"M-step {settings.get('m_step') or 'collapsed'}, {effort_words(settings)}, "
        f"{settings['is_samples']} importance samples per test sequence.",
        "",
        "## Held-out score, the paper's measure (nats per test fold, mean ± std over folds)",
        "",
        "`heldout_elbo` = sum of `score_samples` over the test fold. The score column says what "
        "each row is: an exact log-likelihood, or a lower bound of the variational family named. "
        "Bounds are compared only within one family; bounds of different families, and a bound "
        "beside an exact log-likelihood, are compared by log p(x) (next table). The Markov chains "
        f"(MARKOV1, MARKOV3) are exact; marked {NO_K}, they are fitted once per fold and their value "
        "fills every K column.",
        "",
        _table(df, "heldout_elbo", present, states, _own_label),
        "",
        "## log p(x): exact where there is one, importance-sampled otherwise (nats per test fold)",
        "",
        "`heldout_is`: importance sampling with the fitted q(theta) as proposal (a stochastic "
        "lower bound on log p(x) that tightens with the samples); beside it the exact "
        "log-likelihoods. One scale for every model: the measure of comparisons across families.",
        "",
        _table(d, LOG_PX, with_px, states, _log_px_label)
        if with_px
        else "(not computed: --is-samples 0 or no model with log p(x))",
        "",
        "## Per token (heldout_elbo / test tokens)",
        "",
        _table(df, "heldout_elbo_per_token", present, states, _own_label, digits=4),
        "",
    ]
    if with_px:
        lines += [_table(d, LOG_PX + "_per_token", with_px, states, _log_px_label, digits=4), ""]
    trusted = [
        m for m in present if np.isfinite(df.loc[df["model"] == m, "is_std_error"].to_numpy(float)).any()
    ]
    if trusted:
        lines += [
            "## How far the importance-sampled estimates can be trusted",
            "",
            f"Standard error of `heldout_is` per fold (nats), the smallest effective sample size of "
            f"a sequence's {settings['is_samples']} draws, sequences with fewer than {LOW_ESS:g} "
            "effective draws, and the seconds importance sampling took per fold (apart from the fit).",
            "",
            _table(df, "is_std_error", trusted, states, lambda m, dm: "IS std error"),
            "",
            _table(df, "is_min_ess", trusted, states, lambda m, dm: "min ESS", digits=1),
            "",
            _table(df, "is_low_ess", trusted, states, lambda m, dm: f"ESS < {LOW_ESS:g}", digits=1),
            "",
            _table(df, "is_seconds", trusted, states, lambda m, dm: "IS s", digits=1),
            "",
        ]
    lines += _collapse_section(df, present, states)
    lines += [
        "## Fit time (seconds per fold) and EM iterations",
        "",
        _table(df, "fit_seconds", present, states, lambda m, dm: "fit s", digits=1),
        "",
        _table(df, "n_iter", present, states, lambda m, dm: "n_iter", digits=1),
        "",
        "## Paired two-tailed t-tests over folds (scipy.stats.ttest_rel)",
        "",
        "mean_diff = mean over folds of (model_a - model_b). Each pair is compared by its own "
        "held-out scores only where both are of one kind and family (the measure names it), "
        f"else by {LOG_PX_LABEL}; a pair compared by a bound is also tested by log p(x).",
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


def _collapse_section(df, models, states) -> list[str]:
    """The share of each model's per-user prior rows at their cap (``priors_at_cap``, mean over
    folds; :mod:`ldhmm.models.collapse`), and a sentence for a model whose every prior is at its
    cap in every fold at every K: its users share one HMM. Empty without such models."""
    if "priors_at_cap" not in df:
        return []
    capped = [
        m for m in models if np.isfinite(df.loc[df["model"] == m, "priors_at_cap"].to_numpy(float)).any()
    ]
    if not capped:
        return []
    lines = [
        "## Per-user priors at their cap (share of prior rows, mean over folds)",
        "",
        "1 means every row of the Dirichlet priors that each sequence's pi, A and B are drawn from "
        'sits at its cap (1e6): the sequences share one HMM (docs/math.md, "Why learned '
        'concentrations grow towards the cap").',
        "",
        _table(df, "priors_at_cap", capped, states, lambda m, dm: "rows at the cap"),
        "",
    ]
    for m in capped:
        values = df.loc[df["model"] == m, "priors_at_cap"].to_numpy(float)
        if np.all(values[np.isfinite(values)] == 1.0):
            lines += [f"{m}: {SHARED_HMM}, at every K and in every fold.", ""]
    return lines


def _argmax(d, models, col):
    """``(model, K, mean over folds)`` of the best mean of ``col`` among ``models``, or None."""
    g = d[d["model"].isin(list(models))].groupby(["model", "K"])[col].mean()
    g = g[np.isfinite(g)]
    if not len(g):
        return None
    (m, K), v = g.idxmax(), g.max()
    return m, int(K), float(v)


def _at(model, K) -> str:
    return f"{model} with K={K}" if has_states(model) else f"{model} {NO_K}"


def best_lines(df, models):
    """The sentences naming the best model and K (:func:`_best_by_measure`), then whether a
    Markov chain beats every model with hidden states (:func:`markov_line`)."""
    d = with_log_px(df)
    out = _best_by_measure(d, models)
    markov = markov_line(d, models)
    return out + [markov] if markov else out


def _best_by_measure(d, models):
    """The sentences naming the best model and K, by :func:`comparison_measure` over the run's
    models: their own held-out score where all are of one kind and family; else log p(x), with
    the models that have none listed as not ranked, and the best of each bound family with
    more than one model by that family's bound."""
    measure = comparison_measure(d, models)
    out = []
    if measure.column != LOG_PX:
        best = _argmax(d, models, measure.column)
        if best:
            m, K, v = best
            out.append(
                f"Best by the held-out score, {measure.label} ({measure.note}): "
                + _verdict(d, models, measure.column, m, K, v)
            )
        return out
    best = _argmax(d, models, LOG_PX)
    with_px = _models_with_log_px(d, models)
    if best:
        m, K, v = best
        kind = d.loc[d["model"] == m, "log_px_kind"].iloc[0]
        out.append(
            f"Best by {LOG_PX_LABEL}: {_verdict(d, with_px, LOG_PX, m, K, v, kind)} "
            f"No model is named best by a bound: {measure.note}."
        )
    unranked = [m for m in models if m in set(d["model"]) and m not in with_px]
    if unranked:
        out.append(
            "Not ranked (a bound with no importance-sampled log p(x): is_samples 0, or no "
            f"log_marginal_is): {', '.join(unranked)}."
        )
    for family, members in _bound_families(d, models).items():
        if len(members) > 1:
            m, K, v = _argmax(d, members, "heldout_elbo")
            out.append(
                f"Best within the {family} family, by its bound ({', '.join(members)}): {_at(m, K)} "
                f"({v:.2f} nats per test fold)."
            )
    return out


def _verdict(d, models, column, m, K, v, kind=None) -> str:
    """The rest of a "Best by" line: the model with the highest mean of ``column`` named best
    only where a paired t-test over the folds puts it above the runner-up at its K
    (:func:`ldhmm.experiments.significance.runner_up_test`), and the K its folds suggest
    (:func:`ldhmm.models.choice_of_k.suggest_k`, the folds as units)."""
    what = f"{v:.2f} nats per test fold" + (f", {kind}" if kind else "")
    test = runner_up_test(d, column, m, K, models)
    if test is None:
        text = f"{_at(m, K)} ({what})."
    elif test.significant:
        text = f"{_at(m, K)} ({what}), {test.clause(label=lambda r: _at(r, K))}."
    else:
        text = (
            f"not decided: {_at(m, K)} is highest ({what}) but "
            f"{test.clause(label=lambda r: _at(r, K))}, so no model is named best."
        )
    return text + _k_sentence(d, column, m)


def _k_sentence(d, column, m) -> str:
    """`` Along K, m's folds give: suggested K: N (rule) ...`` (with the warning), or ``""``
    for a model without K or with one K."""
    rows = d[d["model"] == m]
    if not has_states(m) or rows["K"].nunique() < 2:
        return ""
    table = rows.pivot_table(index="K", columns="fold", values=column, aggfunc="mean")
    choice = suggest_k(list(table.index.astype(int)), table.to_numpy(float))
    return f" Along K, {m}'s folds give " + "; ".join(choice.lines()) + "."


def markov_line(d, models) -> str | None:
    """The sentence that says whether a model without states (a Markov chain over the symbols)
    beats every model with hidden states at its best K, by log p(x) (exact where there is one,
    importance-sampled otherwise; ``d``: the fold rows with :func:`with_log_px`'s columns, the
    chains' rows at every K). A model with no log p(x) takes part by its bound: a bound above
    the chain decides (log p(x) is higher still), one below it does not. None when the run
    lacks either kind."""
    rows = d[d["model"].isin(list(models))]
    px = rows.groupby(["model", "K"])[LOG_PX].mean()
    bound = rows.groupby(["model", "K"])["heldout_elbo"].mean()
    chains = [m for m in px.index.get_level_values(0).unique() if not has_states(m)]
    hidden = [m for m in px.index.get_level_values(0).unique() if has_states(m)]
    if not chains or not hidden:
        return None
    chain = max(chains, key=lambda m: px[m].max())
    value = float(px[chain].max())
    best = None  # (value, model, K, by a bound)
    for m in hidden:
        has_px = np.isfinite(px[m]).any()
        series = px[m] if has_px else bound[m]
        series = series[np.isfinite(series)]
        if len(series) and (best is None or series.max() > best[0]):
            best = (float(series.max()), m, int(series.idxmax()), not has_px)
    if best is None:
        return None
    other, m, K, by_bound = best
    if value > other and by_bound:
        return (
            f"Markov chain: {chain} (no hidden states, exact, {value:.2f} nats per fold) is above the "
            f"bound of the best model with hidden states, {m} with K={K} ({other:.2f}), which has no "
            "log p(x) here (is_samples 0): not decided."
        )
    verdict = "wins" if value > other else "loses"
    measure = "its bound, below its log p(x)" if by_bound else LOG_PX_LABEL
    return (
        f"Markov chain: {chain} (no hidden states, exact) {verdict} against the best model with hidden "
        f"states, {m} with K={K}, by {abs(value - other):.2f} nats per fold ({value:.2f} vs {other:.2f}; "
        f"{measure})."
        + ("" if by_bound else _paired_words(d, chain, m, K))
        + (" The per-sequence dynamics do not pay on this data." if verdict == "wins" else "")
    )


def _paired_words(d, chain, m, K) -> str:
    """`` Paired t-test over F folds: p = P, significant.`` of the chain against ``m`` at ``K``
    by log p(x) (:func:`ldhmm.experiments.significance.runner_up_test`); ``""`` under two folds."""
    test = runner_up_test(d, LOG_PX, chain, K, [chain, m])
    if test is None or test.n_folds < 2 or not np.isfinite(test.p_value):
        return ""
    said = "significant" if test.significant else f"not significant (not below {ALPHA:g})"
    return f" Paired t-test over {test.n_folds} folds: p = {test.p_value:.2g}, {said}."


def _bound_families(d, models) -> dict:
    """``{family: [models]}`` of the models whose held-out score is a bound of a declared family."""
    families: dict = {}
    for m in models:
        rows = d[(d["model"] == m) & (d["score_kind"] == "lower_bound")]
        if len(rows) and isinstance(rows["score_family"].iloc[0], str) and rows["score_family"].iloc[0]:
            families.setdefault(rows["score_family"].iloc[0], []).append(m)
    return families


def plot_loglik(df, models, states, path, title=""):
    """Held-out log-likelihood against K per model (the paper's Figures 4/5): left the models'
    own held-out scores (dashed: a bound, its family in the legend), right log p(x) (dotted:
    importance-sampled, solid: exact), the measure across families."""
    d = with_log_px(df)
    with_px = _models_with_log_px(d, models)
    has_is = np.isfinite(d["heldout_is"].to_numpy(float)).any()
    # a bare Figure (not pyplot): no global backend or figure registry to touch
    fig = Figure(figsize=(12 if has_is else 6.5, 4.5))
    axes = fig.subplots(1, 2 if has_is else 1, squeeze=False)
    markers = dict(zip(model_names(), "osD^vPX*"))
    panels = [("heldout_elbo", "held-out score (kind and bound family in the legend)", models)]
    if has_is:
        panels.append((LOG_PX, LOG_PX_LABEL, with_px))
    for ax, (col, label, shown) in zip(axes[0], panels):
        for m in shown:
            dm = d[d["model"] == m]
            ks, means, stds = [], [], []
            for K in states:
                mean, std, n = mean_std(dm[dm["K"] == K][col].to_numpy(float))
                if n:
                    ks.append(K), means.append(mean), stds.append(std)
            if not ks:
                continue
            if col == LOG_PX:
                tag = _log_px_label(m, dm)
                style = "-" if "importance" not in tag else ":"
            else:
                tag = _own_label(m, dm)
                style = "--" if str(dm["score_kind"].iloc[0]) == "lower_bound" else "-"
            legend = f"{m} ({tag})" if has_states(m) else f"{m} ({tag}, {NO_K})"
            marker = markers.get(m, "o")
            ax.errorbar(ks, means, yerr=stds, linestyle=style, marker=marker, capsize=3, label=legend)
        ax.set_xlabel("K (hidden states / topics)")
        ax.set_ylabel("held-out log-likelihood per test fold (nats)")
        ax.set_title(f"{title}: {label}", fontsize=9)
        ax.set_xticks(states)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=120)


def console_table(df, models, states) -> str:
    """The one table a terminal shows: held-out score per model and K, each row's kind labelled.

    The paper's measure (``heldout_elbo``, nats per test fold, mean ± std over folds), its kind
    and, for a bound, its family; an ``IS`` row under each model that has an importance-sampled
    estimate.
    """
    rows = [["model", "score"] + [f"K={K}" for K in states]]
    df = spread_over_k(df, states)
    for m in models:
        dm = df[df["model"] == m]
        if dm.empty:
            continue
        for col, label in (("heldout_elbo", _own_label(m, dm)), ("heldout_is", "log p(x), IS estimate")):
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
