"""A cross-validated experiment: the one pipeline of ``compare``, ``classify`` and ``next-event``.

The three experiments run a line-up of models on K folds of one database, and share every step
but three. :func:`run_experiment` runs the steps:

1. the call's settings, checked (:class:`ExperimentSettings`: folds, jobs, EM settings, K grid,
   the task runner's backend);
2. the line-up's factories checked against the workers they go to
   (:func:`ldhmm.experiments.plugins.check_sendable`);
3. the data resolved (:func:`ldhmm.experiments.datasets.resolve_data`) and the folds drawn
   (:func:`ldhmm.data.kfold_indices`; stratified by class for a labelled run);
4. the run's result-determining settings (:func:`ldhmm.experiments.datasets.run_settings`: the
   hash every task file carries) written to ``OUT/config.json`` with the line-up, the K values,
   the budget, and the output directory locked (:func:`ldhmm.experiments.tasks.prepare_out_dir`);
5. the tasks run on the task runner (:func:`ldhmm.experiments.tasks.run_task_groups`: ``jobs``
   local processes, or a Dask cluster whose workers read the data themselves:
   :func:`ldhmm.experiments.cluster_tasks.read_on_workers`); each task fits one plan along K on
   one training set (:func:`fit_task`) and saves every row as it is measured;
6. the records handed to the experiment's tables (:class:`RunOutcome`).

What is an experiment's own is an :class:`Experiment`: its line-up (``names``, ``entries``),
what it adds to the settings and to ``config.json``, its tasks and the function that runs one
(which measures a fitted model: a held-out score, a class's scores, a next-event prediction),
and its tables. The order of the steps, the settings and the task keys are those of the three
experiments before they shared this module, so their result directories still resume.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pandas as pd

from ..data import SequenceDatabase, kfold_indices
from .along_k import Fitter, budget_rules, fit_along_k, fit_plans, fold_groups, part_k, row_key, store_for
from .cluster_tasks import data_reference, read_on_workers
from .datasets import resolve_data, run_settings
from .plugins import ModelEntry, check_sendable, plugin_settings
from .tables import with_k_column
from .tasks import (
    MODELS_DIR,
    PartOutput,
    atomic_write_csv,
    check_run_settings,
    cluster_client,
    default_out,
    parse_states,
    prepare_out_dir,
    run_task_groups,
    seed_everything,
)

__all__ = [
    "ExperimentSettings",
    "Experiment",
    "RunOutcome",
    "ExperimentResult",
    "run_experiment",
    "fit_task",
    "write_fold_table",
]

#: The value of an argument that an experiment function does not take (``next_event`` reads no
#: event-log columns and fits its LDHMM models with the collapsed M-step; only ``compare``
#: draws importance samples).
_NOT_TAKEN = {
    "sequence_col": None,
    "event_col": None,
    "time_col": None,
    "m_step": "collapsed",
    "is_samples": None,
}
#: The columns of an event log (:func:`ldhmm.experiments.datasets.resolve_data`).
_COLUMNS = ("sequence_col", "event_col", "time_col")
#: The arguments :func:`ldhmm.experiments.tasks.check_run_settings` checks, by its names.
_CHECKED = ("folds", "jobs", "max_iter", "tol", "m_step", "restarts", "is_samples", "effort")
#: The settings that :meth:`ExperimentSettings.of` works out; each other one is the argument of its name.
_WORKED_OUT = ("command", "data", "states", "columns", "client", "labelled")


@dataclass(frozen=True)
class ExperimentSettings:
    """The settings every cross-validated experiment takes, checked (:meth:`of`).

    Attributes
    ----------
    command : str
        ``"compare"``, ``"classify"`` or ``"next-event"``: ``config.json``'s command, the progress
        bar's label and the default output directory ``results/COMMAND-DATA``.
    data : None, str, Path, SequenceDatabase or list of 1-D int arrays
        What :func:`ldhmm.experiments.datasets.resolve_data` reads (None: its default).
    states : list of int
        The K values, parsed and sorted.
    folds, jobs, seed : int
    out : str, Path or None
    n_sequences : int or None
    data_dir : str, Path or None
    columns : dict
        ``sequence_col``, ``event_col``, ``time_col`` of an event log (each None when not given).
    max_iter : int or None
    tol : float or None
    m_step : str or None
    effort : str or None
    restarts : int
    force, quiet : bool
    client : distributed.Client or None
        The cluster of ``backend="dask"``; None: ``jobs`` local processes.
    labelled : bool
        A classification run: a labelled database, folds stratified by class.
    """

    command: str
    data: object
    states: list
    folds: int
    jobs: int
    out: object
    seed: int
    n_sequences: int | None
    data_dir: object
    columns: dict
    max_iter: int | None
    tol: float | None
    m_step: str | None
    effort: str | None
    restarts: int
    force: bool
    quiet: bool
    client: object
    labelled: bool = False

    @classmethod
    def of(
        cls, command: str, arguments: dict, *, labelled: bool = False, default_data=None
    ) -> ExperimentSettings:
        """The settings of a call of an experiment function.

        Parameters
        ----------
        command : str
        arguments : dict
            The call's arguments by name (the function's ``locals()`` on entry: the three
            experiment functions name their shared arguments alike); an argument the function
            does not take has the value of :data:`_NOT_TAKEN`.
        labelled : bool
        default_data : optional
            The data of ``data=None`` (``classify``: ``"splice"``); None: the default of
            :func:`ldhmm.experiments.datasets.resolve_data`.

        Raises
        ------
        ValueError
            A harness-wide setting out of range (:func:`ldhmm.experiments.tasks.check_run_settings`,
            before anything is read or written), a backend without its client
            (:func:`ldhmm.experiments.tasks.cluster_client`), a K grid that does not parse.
        """
        a = {**_NOT_TAKEN, **arguments}
        check_run_settings(**{k: a[k] for k in _CHECKED})
        return cls(
            command=command,
            data=default_data if a["data"] is None else a["data"],
            states=parse_states(a["states"]),
            columns={k: a[k] for k in _COLUMNS},
            client=cluster_client(a["backend"], a["client"]),
            labelled=labelled,
            **{f.name: a[f.name] for f in fields(cls) if f.name not in _WORKED_OUT},
        )


@dataclass
class RunOutcome:
    """What :func:`run_experiment` hands to an experiment's tables.

    Attributes
    ----------
    db : SequenceDatabase
        The run's database.
    what : str
        The sentence that says which database it is.
    settings : dict
        The result-determining settings (``config.json``'s ``"settings"``).
    out : Path
        The output directory.
    states : list of int
    records : list of dict
        Every saved part's record (:func:`ldhmm.experiments.tasks.run_task_groups`), in task
        order; at least one.
    errors : list of str
        One line ``"PART_KEY: reason"`` per part a failed task left unsaved.
    config : dict
        ``config.json`` with ``resumed_tasks`` (the parts read back from an earlier run) and
        ``n_tasks`` (the parts of the run).
    """

    db: SequenceDatabase
    what: str
    settings: dict
    out: Path
    states: list
    records: list
    errors: list
    config: dict


@dataclass
class ExperimentResult:
    """What an experiment function returns (``classify``, ``next_event``; ``compare``'s
    :class:`ldhmm.experiments.compare.ComparisonResult` has more); the same files are under ``out``.

    Attributes
    ----------
    folds : pandas.DataFrame
        ``folds.csv``: one row per (model, K, fold, ...).
    summary : str
        The Markdown report (``summary.md``).
    out : Path
        The output directory.
    errors : list of str
        One line per failed task; rerunning retries them.
    config : dict
        The run's ``config.json`` (with :attr:`RunOutcome.config`'s counts).
    data : str
        Which database was used.
    """

    folds: pd.DataFrame
    summary: str
    out: Path
    errors: list
    config: dict
    data: str

    @property
    def ok(self) -> bool:
        """Whether every task finished."""
        return not self.errors

    @classmethod
    def of(cls, outcome: RunOutcome, folds: pd.DataFrame, summary: str):
        """The result of a run's ``outcome``, its fold table and its report."""
        return cls(folds, summary, outcome.out, outcome.errors, outcome.config, outcome.what)


class Experiment:
    """What one experiment adds to :func:`run_experiment`; the defaults are a run of ``entries``
    on one task per (fit plan, fold) (:func:`ldhmm.experiments.along_k.fold_groups`).

    A subclass sets :attr:`task` and overrides :meth:`tables`, and where it differs
    :meth:`check_data`, :meth:`more_settings`, :meth:`record` and :meth:`groups`
    (``compare.Comparison``, ``classify.Classification``, ``next_event.NextEvent``).

    Parameters
    ----------
    entries : list of ModelEntry
        The line-up (:func:`ldhmm.experiments.plugins.resolve_lineup`): the payload's factories.
    names : list of str, optional
        The line-up's names in table order (default: the entries' names).

    Attributes
    ----------
    entries, names
    plans : list of FitPlan
        :func:`ldhmm.experiments.along_k.fit_plans` of ``names``.
    """

    #: ``task(group, payload, output)``: runs one task of :meth:`groups`; a module-level function
    #: (it is sent to worker processes by name), set by a subclass with ``staticmethod``.
    task: Callable

    def __init__(self, entries: list[ModelEntry], names: list[str] | None = None):
        self.entries = list(entries)
        self.names = [e.name for e in self.entries] if names is None else list(names)
        self.plans = fit_plans(self.names)

    def check_data(self, db: SequenceDatabase, what: str) -> None:
        """Refuse a database the experiment cannot use, and keep what depends on it (before
        anything is written); nothing by default."""

    def more_settings(self) -> dict:
        """The experiment's own result-determining settings (into the hash): the plug-ins'
        sources (:func:`ldhmm.experiments.plugins.plugin_settings`) by default."""
        return plugin_settings(self.entries)

    def record(self, settings: dict, states: list[int]) -> dict:
        """What ``config.json`` records besides the settings, the models, the K values and
        ``jobs`` (not hashed): the budget of every plan by default
        (:func:`ldhmm.experiments.along_k.budget_rules`)."""
        return {"budget": budget_rules(self.plans, settings, states)}

    def groups(self, states: list[int], folds: int) -> list[dict]:
        """The run's tasks (:func:`ldhmm.experiments.tasks.run_task_groups`' groups)."""
        return fold_groups(self.plans, states, folds)

    def tables(self, outcome: RunOutcome):
        """The experiment's files from the records, and the result the experiment function returns."""
        raise NotImplementedError


def run_experiment(run: ExperimentSettings, experiment: Experiment):
    """Run a cross-validated experiment (the module docstring's steps); returns
    ``experiment.tables(outcome)``.

    Raises
    ------
    ValueError
        As the steps do: a factory that cannot go to the workers, data that cannot be read or
        used, a run over the memory limit, an output directory of another configuration or
        locked by another process.
    RuntimeError
        No task finished (the first failure named).
    RunInterrupted
        On Ctrl-C: the workers are stopped; a rerun resumes.
    """
    check_sendable(experiment.entries, run.jobs if run.client is None else 2)
    db, what = resolve_data(
        run.data, run.data_dir, run.n_sequences, run.seed, labelled=run.labelled, **run.columns
    )
    experiment.check_data(db, what)
    fold_index = kfold_indices(db if run.labelled else len(db), run.folds, seed=run.seed)
    settings = run_settings(
        db,
        what,
        run.states,
        run.folds,
        run.jobs,
        run.seed,
        run.max_iter,
        run.tol,
        run.m_step,
        run.restarts,
        labelled=run.labelled,
        effort=run.effort,
        **experiment.more_settings(),
    )
    out = default_out(run.command, db.name, run.out)
    extra = {"models": experiment.names, "states": run.states, "jobs": run.jobs}
    extra.update(experiment.record(settings, run.states))
    digest = prepare_out_dir(out, run.command, settings, extra=extra, force=run.force)
    entries = {e.name: e for e in experiment.entries}
    payload = {"db": db, "folds": fold_index, "settings": settings, "entries": entries}
    if run.client is not None:  # the workers read a file or a data set themselves, once each
        source = (run.data, db, run.data_dir, run.n_sequences, run.seed)
        reference = data_reference(*source, labelled=run.labelled, columns=run.columns)
        payload = read_on_workers(payload, reference, run.folds, run.seed, by_labels=run.labelled)
    groups = experiment.groups(run.states, run.folds)
    records, errors = run_task_groups(
        groups, experiment.task, payload, out, digest, run.jobs, run.quiet, run.command, run.client
    )
    if not records:
        first = f"; the first: {errors[0]}" if errors else ""
        raise RuntimeError(f"no task finished ({len(errors)} failed{first})")
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    config["resumed_tasks"] = sum(bool(r.get("resumed")) for r in records)
    config["n_tasks"] = sum(len(g["parts"]) for g in groups)
    return experiment.tables(RunOutcome(db, what, settings, out, run.states, records, list(errors), config))


# ------------------------------------------------------------------------ inside a task
def fit_task(
    group: dict, output: PartOutput, fitter: Fitter, measure: Callable, key_of: Callable | None = None
) -> None:
    """One task: its plan fitted along K on one training set
    (:func:`ldhmm.experiments.along_k.fit_along_k`), each fitted model's row measured and saved
    the moment it is computed (a run resumes at K granularity).

    Parameters
    ----------
    group : dict
        A task of :meth:`Experiment.groups`: ``"plan"`` (FitPlan), ``"fold"`` (int), ``"states"``
        (its K values; ``[None]`` for a model without states), ``"parts"`` (one per row, each
        with ``"key"``, ``"model"`` or, for a row of a model fitted from another one's fit,
        ``"base_model"``, and ``"K"``).
    output : PartOutput
        Saves a row; ``todo``: the rows not yet saved.
    fitter : Fitter
        The task's training set and its models' factory.
    measure : callable(name, K, model, fit_seconds) -> dict
        The row of a fitted model (what the experiment measures on the held-out data).
    key_of : callable(model, K) -> str, optional
        The file key of the plan's saved fit at K under ``OUT/models``
        (:class:`ldhmm.experiments.along_k.FitStore`); default: its row's key on the fold
        (:func:`ldhmm.experiments.along_k.row_key`).
    """
    plan, fold, states = group["plan"], int(group["fold"]), list(group["states"])
    rows = {(p.get("base_model", p["model"]), part_k(p["K"])): p["key"] for p in group["parts"]}

    def emit(name, K, model, seconds) -> None:
        output.save(rows[(name, K)], measure(name, K, model, seconds))

    def reseed() -> None:  # before every fit, as when each K was a task of its own
        seed_everything(fitter.settings["seed"])

    key_of = key_of or (lambda m, K: row_key(m, K, fold))
    store = store_for(plan, output.out / MODELS_DIR, output.digest, states, key_of)
    fit_along_k(plan, states, rows, output.todo, fitter, store, emit, reseed)


# ------------------------------------------------------------------------ the tables
def write_fold_table(out: Path, rows: list[dict], columns: list[str], by: list[str], order: Callable):
    """``OUT/folds.csv``: ``rows`` as a table of ``columns`` (a column no row has: NaN), sorted by
    ``by`` with the models in ``order`` (a key function of a model's name), K empty for a model
    without states (:func:`ldhmm.experiments.tables.with_k_column`); written atomically and
    returned (pandas.DataFrame, one row per row of ``rows``)."""
    df = pd.DataFrame(rows)
    for c in columns:
        if c not in df:
            df[c] = np.nan
    df = with_k_column(df[list(columns)])
    df = df.sort_values(list(by), key=lambda c: c.map(order) if c.name == "model" else c)
    df = df.reset_index(drop=True)
    atomic_write_csv(df, Path(out) / "folds.csv")
    return df
