"""The comparison harness in one namespace: the line-up of models, the data, the task runner.

The harness is four ideas, each in its module; this module gathers their public names for
scripts and notebooks (``from ldhmm.experiments import harness as H``):

* :mod:`ldhmm.experiments.lineup`: the registered models as the harness names and builds
  them (:data:`MODEL_NAMES`, :data:`LDHMM_NAMES`, :data:`IS_MODELS`, :data:`MODELS`,
  :func:`make_model`, :func:`resolve_models`, :func:`model_score_kind`);
* :mod:`ldhmm.experiments.datasets`: which database a command uses
  (:func:`select_database`, the built-in synthetic databases, :func:`data_fingerprint`);
* :mod:`ldhmm.experiments.tasks`: resumable tasks (:func:`prepare_out_dir`,
  :func:`run_task_groups`, :func:`run_tasks`, atomic writes, seeding, ``--states`` parsing);
* :mod:`ldhmm.experiments.along_k`: how a task fits its model along K (:func:`fit_plans`,
  :func:`budget_rules`: fitted along K, LDHMM-FF from LDHMM-PF, or each K on its own);
* :mod:`ldhmm.experiments.tables`: mean ± std over folds for the result tables.

The registry-derived names (:data:`MODEL_NAMES`, ...) are read from
:mod:`ldhmm.experiments.lineup` when used, so a model registered after this import is listed.
"""

from __future__ import annotations

from . import lineup
from .along_k import budget_rules, fit_plans
from .datasets import (
    SYNTHETIC_HYPERPARAMETERS,
    data_fingerprint,
    labelled_synthetic_database,
    select_database,
    synthetic_database,
)
from .lineup import make_model, model_order, model_score_kind, resolve_models
from .tables import fmt_pm, mean_std
from .tasks import (
    ConfigMismatchError,
    atomic_write_json,
    atomic_write_text,
    config_hash,
    default_out,
    load_task,
    parse_states,
    prepare_out_dir,
    run_task_groups,
    run_tasks,
    seed_everything,
    single_thread,
    task_path,
    timed,
)

__all__ = [  # noqa: F822 - the first five are served by the module's __getattr__
    # the line-up (lineup)
    "MODEL_NAMES",
    "LINEUP_NAMES",
    "LDHMM_NAMES",
    "IS_MODELS",
    "MODELS",
    "make_model",
    "resolve_models",
    "model_score_kind",
    "model_order",
    # the data (datasets)
    "SYNTHETIC_HYPERPARAMETERS",
    "synthetic_database",
    "labelled_synthetic_database",
    "select_database",
    "data_fingerprint",
    # resumable tasks (tasks), in the order of the module docstring: the output directory and its
    # configuration, the runners, atomic writes, seeding, the K grid's parser
    "prepare_out_dir",
    "ConfigMismatchError",
    "config_hash",
    "default_out",
    "run_task_groups",
    "run_tasks",
    "task_path",
    "load_task",
    "atomic_write_json",
    "atomic_write_text",
    "single_thread",
    "seed_everything",
    "timed",
    "parse_states",
    # fits along K (along_k)
    "fit_plans",
    "budget_rules",
    # the tables
    "mean_std",
    "fmt_pm",
]

_FROM_LINEUP = ("MODEL_NAMES", "LINEUP_NAMES", "LDHMM_NAMES", "IS_MODELS", "MODELS")


def __getattr__(name):
    # computed by the line-up when read: the registry may grow after this import
    if name in _FROM_LINEUP:
        return getattr(lineup, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
