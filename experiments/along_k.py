"""How the harness fits a model along its K values: the budget rule of every model, and the driver.

A task of ``compare``, ``classify`` or ``next-event`` is one *fit plan* on one training set (a
fold, a class of a fold): :class:`FitPlan` says which model is fitted at every K (the *base*),
whether its K values are fitted along one path, and which models are fitted from the base's
fit of the same K. The rules (:func:`fit_plans`, :func:`budget_rules`, stated in every run's
``config.json``):

* **along K**: a registered model whose class has ``fit_path`` (a classmethod
  ``fit_path(sequences, states, *, previous=None, callback=None, **options) -> {K: model}``,
  ``options`` its constructor arguments), other than the baselines shipped with ldhmm, is
  fitted along its K values by one call: each K after the first may start from the K - 1
  fit as well as from its restarts;
* **from the PF fit**: LDHMM-FF (a registered FF entry whose class also has a PF entry with the
  same options) is fitted at every K from the same training set's LDHMM-PF fit of that K
  (``fit(sequences, init_params=pf.params_)``): what ``LDHMM(K, guide="ff").fit`` does after
  its own PF fit with restarts (``init="auto"``), without fitting PF again. The two are one
  task: the PF fit of a K is made once, for both rows;
* **once, no K**: a registered model without hidden states (``has_states = False``: the
  Markov chains MARKOV1 and MARKOV3) is fitted once per training set; its rows carry
  ``K = None`` (an empty K in ``folds.csv``) and the tables show its value at every K;
* **each K on its own**: every other model (the baselines HMM, LDA, VBHMM, HMMV; plug-in
  factories; a class without ``fit_path``) is built and fitted at every K separately, with
  the run's restart budget where it takes one (``n_init``), as before the harness fitted
  along K.

Resuming at K granularity (:func:`fit_along_k`). Every row is saved the moment it is computed
(:class:`ldhmm.experiments.tasks.PartOutput`), and the base's fit of each K is saved before its
rows, as a model file (:func:`ldhmm.models.file_format.write_model_file`, exact float64 round
trip) under ``OUT/models`` (:class:`FitStore`), when the plan needs it again: by the next K of
a path, or by a row fitted from it. A task that resumes after K = 4 of K = 2..6 continues the
path at K = 5 from the saved K = 4 fit (``previous=``) and fits an FF row whose PF row is saved
from the saved PF model. The rows of a path carry the K values of the path up to theirs
(``path_states``): a run whose K values start elsewhere recomputes them rather than mixing
paths. Resumed rows equal uninterrupted ones when ``fit_path`` from a saved fit read back
continues as the uninterrupted path does: it depends on the saved fit's parameters, its options
and, where every start of the next K falls below it, its per-sequence state
(:func:`ldhmm.models.path.continue_previous`), which is saved beside the newest K's model file
(``.state.npz``, a file of :mod:`ldhmm.inference.state_store`; one written before that store is
read too); a saved fit of ldhmm's ``fit_path`` without its state file (the state of all but
the newest K is released once that K's rows are made; a path's last K keeps none) or whose
state file cannot be read resumes the path from its first K. The global random generators
are re-seeded at every K to keep that so.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .. import baselines
from ..models import VariantHMM
from ..models.file_format import named_side_file, read_model_file, write_model_file
from ..models.fit_settings import EFFORT_PRESETS
from ..models.path import load_path_state, save_path_state
from ..models.registry import get_spec
from ..models.variant_hmm import keeps_path_state
from .lineup import model_names, options_from_settings
from .tables import NO_K

__all__ = [
    "FitPlan",
    "FitStore",
    "fits_along_k",
    "has_states",
    "plan_states",
    "part_k",
    "model_label",
    "row_key",
    "fold_groups",
    "starts_from",
    "fit_plans",
    "budget_rules",
    "Fitter",
    "fit_along_k",
    "path_fields",
    "store_for",
]


# ------------------------------------------------------------------------ the rules
def _registered(name: str) -> bool:
    return name in model_names()


def has_states(name: str) -> bool:
    """Whether ``name`` has a K (hidden states or topics); False for a registered model whose
    class says ``has_states = False`` (a Markov chain over the symbols). Plug-ins have a K."""
    return not _registered(name) or get_spec(name).has_states


def plan_states(plan: FitPlan, states: list[int]) -> list:
    """The K values a task of ``plan`` runs: the run's, or ``[None]`` for a model without
    states (fitted once per fold; its rows carry ``K = None``)."""
    return list(states) if has_states(plan.base) else [None]


def model_label(name: str) -> str:
    """A model's name in a table: marked :data:`ldhmm.experiments.tables.NO_K` when it has no K
    (its one value per fold fills every K)."""
    return name if has_states(name) else f"{name} {NO_K}"


def part_k(value) -> int | None:
    """A part's ``K`` field as an int, or None (a model without states)."""
    return None if value is None else int(value)


def fits_along_k(name: str) -> bool:
    """Whether the harness fits ``name`` along its K values (its class's ``fit_path``).

    Only registered models: a plug-in factory builds one model per K. The baselines shipped
    with ldhmm keep their published budget (each K on its own) even where their class
    inherits ``fit_path`` (VBHMM and HMMV are :class:`ldhmm.models.VariantHMM` subclasses)."""
    if not _registered(name):
        return False
    cls = get_spec(name).cls
    return callable(getattr(cls, "fit_path", None)) and not cls.__module__.startswith(
        baselines.__name__ + "."
    )


def starts_from(name: str) -> str | None:
    """The registered PF entry whose fit of each K the FF entry ``name`` starts from, or None.

    That is the entry of the same :class:`ldhmm.models.VariantHMM` class with the same fixed
    options but ``guide="pf"``, for an entry with ``guide="ff"`` (LDHMM-FF -> LDHMM-PF): its
    own fit with ``init="auto"`` is that PF fit followed by FF from its parameters."""
    if not _registered(name):
        return None
    spec = get_spec(name)
    if not issubclass(spec.cls, VariantHMM) or spec.options.get("guide") != "ff":
        return None
    if spec.options.get("init", "auto") != "auto":  # an FF fit that does not start from PF
        return None
    wanted = {**spec.options, "guide": "pf"}
    for other in model_names():
        o = get_spec(other)
        if o.cls is spec.cls and dict(o.options) == wanted and o.em_settings == spec.em_settings:
            return other
    return None


@dataclass(frozen=True)
class FitPlan:
    """The fits of one task.

    Attributes
    ----------
    base : str
        The model fitted at every K.
    along_k : bool
        The base's K values are fitted along one path (:func:`fits_along_k`).
    report_base : bool
        The base's own rows are wanted (False when only a model fitted from it is in the run).
    derived : tuple of str
        Models fitted at each K from the base's fit of that K (LDHMM-FF from LDHMM-PF).
    """

    base: str
    along_k: bool = False
    report_base: bool = True
    derived: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The models whose rows the task produces."""
        return ((self.base,) if self.report_base else ()) + self.derived

    @property
    def key(self) -> str:
        """The plan's name in task keys: its models joined by ``+`` (``LDHMM-PF+LDHMM-FF``)."""
        return "+".join(self.names)

    @property
    def keeps_fits(self) -> bool:
        """Whether the base's fits are saved to resume from (by the next K or a derived row)."""
        return self.along_k or bool(self.derived)


def fit_plans(names: Iterable[str]) -> list[FitPlan]:
    """The tasks' plans for the models ``names`` of a run, in their order: an FF entry and its
    PF entry (:func:`starts_from`) share one plan, whose base is PF (fitted also when only FF
    is in the run); every other model is a plan of its own."""
    names = list(names)
    partner = {n: starts_from(n) for n in names}
    derived: dict[str, list[str]] = {}
    for n, p in partner.items():
        if p is not None:
            derived.setdefault(p, []).append(n)
    plans, covered = [], set()
    for n in names:
        if n in covered:
            continue
        base = partner[n] or n
        plan = FitPlan(base, fits_along_k(base), base in names, tuple(derived.get(base, ())))
        covered.update((base, *plan.derived))
        plans.append(plan)
    return plans


def budget_rules(plans: Iterable[FitPlan], settings: dict, states, suffix: str = "", what: str = "") -> dict:
    """The budget rule of every model of ``plans``, for ``config.json``: ``{name: {"fit",
    "restarts", "rule"}}`` (``fit``: ``"along K"``, ``"each K on its own"`` or ``"from NAME"``;
    ``restarts``: the ``n_init`` it gets, None where it takes none).

    ``suffix`` is added to every name (``"+LR"``: the classifiers on LDHMM features), ``what``
    to every rule (what the model is fitted on)."""
    out = {}
    restarts = settings.get("restarts")
    effort = settings.get("effort")
    ks = f"K = {', '.join(str(k) for k in states)}"
    for plan in plans:
        base_restarts = _restarts_of(plan.base, restarts)
        if not has_states(plan.base):
            base_rule, fit = "no hidden states (no K): fitted once per training set", "once, no K"
        elif plan.along_k:
            cls = get_spec(plan.base).cls.__name__
            later, setting = _path_restarts(plan.base, base_restarts)
            base_rule = (
                f"fitted along {ks} by {cls}.fit_path (K = {min(states)} from "
                f"{_starts(base_restarts, plan.base, effort=effort)}; each later K from "
                f"{_starts(later, plan.base, setting, effort)} and from starts grown from the K - 1 fit); "
                "resumed from the saved K - 1 fit"
            )
            fit = "along K"
        elif _registered(plan.base):
            tail = _starts(base_restarts, plan.base, effort=effort)
            base_rule, fit = f"each K fitted on its own, {tail}", "each K on its own"
        else:
            base_rule = "each K fitted on its own by the plug-in factory (n_init = the restart budget "
            base_rule += "when the factory takes it)"
            fit, base_restarts = "each K on its own", restarts
        if plan.report_base:
            out[plan.base + suffix] = {"fit": fit, "restarts": base_restarts, "rule": base_rule + what}
        for d in plan.derived:
            out[d + suffix] = {
                "fit": f"from {plan.base}",
                "restarts": None,
                "rule": f"each K fitted from the same training set's {plan.base} fit of that K "
                f"(init_params; no restarts and no {plan.base} fit of its own); {plan.base}: "
                f"{base_rule}" + what,
            }
    return out


def _starts(restarts, name: str, setting: str = "n_init", effort: str | None = None) -> str:
    if not restarts:
        return "the model's own start (no restarts)"
    starts = f"one start ({setting} = 1)" if restarts == 1 else f"the best of {restarts} restarts ({setting})"
    if _seeded(name):
        starts += " and the symbol-seeded start (seeded_start)"
    effort, policy = _start_policy(name, effort)
    if policy == "restarts":
        return starts
    hmm = f"the database-level HMM ({starts.replace('restarts', 'random starts')})"
    if policy == "hmm_and_seeded" and _seeded(name):
        return f"two EM runs, from {hmm} and from the symbol-seeded start (effort {effort})"
    return f"one EM run from {hmm} (effort {effort})"


def _start_policy(name: str, effort: str | None) -> tuple:
    """(effort, start policy) of the registered ``name`` under the run's ``effort`` (None: its
    entry's or its class's default); ("", "restarts") for a model that takes no effort."""
    if not _registered(name):
        return "", "restarts"
    spec = get_spec(name)
    params = inspect.signature(spec.cls).parameters
    if "effort" not in params:
        return "", "restarts"
    effort = effort or spec.options.get("effort", params["effort"].default)
    policy = spec.options.get("start_policy") or EFFORT_PRESETS[effort]["start_policy"]
    return effort, policy


def _seeded(name: str) -> bool:
    """Whether the registered model ``name`` adds the symbol-seeded start to its restarts by default."""
    if not _registered(name):
        return False
    spec = get_spec(name)
    param = inspect.signature(spec.cls).parameters.get("seeded_start")
    default = "none" if param is None or param.default is param.empty else param.default
    return spec.options.get("seeded_start", default) != "none"


def _path_restarts(name: str, restarts) -> tuple:
    """The restarts the registered ``name`` runs at a path's K after the first and the setting
    that says so: ``min(restarts, path_n_init)`` where its entry or class sets ``path_n_init``,
    else ``restarts`` (``n_init``)."""
    param = inspect.signature(get_spec(name).cls).parameters.get("path_n_init")
    given = None if param is None else get_spec(name).options.get("path_n_init", param.default)
    if not restarts or given is None:
        return restarts, "n_init"
    return min(restarts, given), "path_n_init"


def _restarts_of(name: str, restarts) -> int | None:
    if not _registered(name):
        return restarts
    return restarts if "n_init" in get_spec(name).em_settings else None


# ------------------------------------------------------------------------ saved fits
#: what follows the key in a saved fit's file name (:meth:`FitStore.path`)
_TAGGED = re.compile(r"[0-9a-f]{12}\.json")


class FitStore:
    """The base's fits of one task, one model file per K under a run's ``models`` folder.

    A file's name holds its key (the base's row key of that K) and a tag of the configuration
    hash and the K's path (``identity``), so a file of another configuration or path is never
    read; saving a K removes the files of the same key with other tags.

    Parameters
    ----------
    folder : Path
    digest : str
        The run's configuration hash.
    keys : dict int -> str
        File key per K.
    identity : dict int -> JSON value
        How the fit of each K was made (the K values of its path; None for a K on its own).
    cls : type
        The base's class (a :class:`ldhmm.models.VariantHMM`): models are read as it.
    """

    def __init__(self, folder, digest: str, keys: dict, identity: dict, cls):
        self.folder = Path(folder)
        self.digest, self.keys, self.identity, self.cls = digest, dict(keys), dict(identity), cls
        self.enabled = issubclass(cls, VariantHMM)  # the model-file format's classes

    def path(self, K: int) -> Path:
        tag = json.dumps([self.digest, self.identity.get(K)], sort_keys=True)
        tag = hashlib.sha256(tag.encode()).hexdigest()[:12]
        return self.folder / f"{self.keys[K]}.{tag}.json"

    def load(self, K: int):
        """The saved fit of ``K``, or None (not saved, or unreadable)."""
        if not self.enabled or K not in self.keys:
            return None
        path = self.path(K)
        if not path.is_file():
            return None
        try:
            return read_model_file(path, self.cls)
        except (OSError, ValueError):
            return None

    def state_path(self, K: int) -> Path:
        """Where the per-sequence state of ``K``'s fit is kept for the next K of its path
        (:func:`ldhmm.models.path.save_path_state`: a state file of
        :mod:`ldhmm.inference.state_store`), beside its model file."""
        return self.path(K).with_suffix(".state.npz")

    def load_state(self, K: int, model) -> bool:
        """Read ``K``'s per-sequence state into ``model`` (its saved fit) where it was saved;
        False where it is missing, unreadable or refused: the path is then refitted from its
        first K, since resumed without it, it could differ from the uninterrupted one. A missing
        file of a class whose ``fit_path`` keeps the state (:func:`keeps_path_state`) was
        released (once the next K's rows were made: the rows of a group on a cluster's worker
        reach the driver's disk after that) or never kept (a path's last K): either way the
        next K cannot grow from it as an uninterrupted path would. A ``fit_path`` of its own that
        keeps none (a plug-in's) has nothing to read: True. A file of before the state store is
        read."""
        path = self.state_path(K)
        if not path.is_file():
            return not keeps_path_state(self.cls)
        try:
            load_path_state(model, path)
        except (OSError, ValueError):
            return False
        return True

    def release_states_before(self, K: int) -> None:
        """Remove the per-sequence state of every K but ``K``: called once ``K``'s rows are
        saved, when only the newest K's state is needed to go on. Not at :meth:`save`: a run
        killed between ``K``'s model file and its rows refits ``K`` from the K - 1 fit, which
        needs that fit's state (without it, :meth:`load_state` reads nothing and the path goes
        otherwise)."""
        for k in self.keys:
            if k != K:
                self.state_path(k).unlink(missing_ok=True)

    def save(self, K: int, model) -> None:
        if not self.enabled:
            return
        path = self.path(K)
        self.folder.mkdir(parents=True, exist_ok=True)
        # the state first, the model file last: the model file says K is saved, so a run killed
        # between the two refits K instead of growing the next K from a fit without its state
        # (which :meth:`load_state` could not tell from a fit that keeps none)
        save_path_state(model, self.state_path(K))
        write_model_file(path, model)
        prefix = f"{self.keys[K]}."
        for name in os.listdir(self.folder):
            old = self.folder / name
            if name.startswith(prefix) and _TAGGED.fullmatch(name[len(prefix) :]) and old != path:
                side = named_side_file(old)
                for stale in (old, side):
                    if stale is not None:
                        try:
                            stale.unlink()
                        except OSError:
                            pass


# ------------------------------------------------------------------------ the driver
class Fitter:
    """The fits of one training set: a K on its own, a path along K, a model from a base fit.

    Parameters
    ----------
    sequences : list of 1-D int arrays
        The training set.
    n_symbols : int
    settings : dict
        The run's settings (``seed`` and the harness-wide EM settings).
    build : callable(name, K) -> model
        A fresh, unfitted model (the run's factory of a registered model or a plug-in).
    """

    def __init__(self, sequences, n_symbols: int, settings: dict, build: Callable):
        self.sequences, self.n_symbols, self.settings, self.build = sequences, n_symbols, settings, build

    def one(self, name: str, K: int):
        """``(model, fit seconds)``: ``name`` with K states fitted on its own."""
        model = self.build(name, K)
        t0 = time.perf_counter()
        model.fit(self.sequences)
        return model, time.perf_counter() - t0

    def derive(self, name: str, K: int, base):
        """``(model, fit seconds)``: ``name`` with K states fitted from ``base``'s parameters."""
        model = self.build(name, K)
        t0 = time.perf_counter()
        model.fit(self.sequences, init_params=base.params_)
        return model, time.perf_counter() - t0

    def path(self, name: str, states: list[int], previous, callback) -> dict:
        """``{K: model}``: the registered ``name`` fitted along ``states`` by its class's
        ``fit_path``, with the constructor arguments of a model on its own."""
        options = options_from_settings(name, self.n_symbols, self.settings)
        return get_spec(name).cls.fit_path(
            self.sequences, list(states), previous=previous, callback=callback, **options
        )


def fit_along_k(
    plan: FitPlan,
    states: list[int],
    rows: dict,
    todo,
    fitter: Fitter,
    store: FitStore | None,
    emit: Callable,
    reseed: Callable,
) -> None:
    """Make the fits of one task that its missing rows need, and emit each row.

    Parameters
    ----------
    plan : FitPlan
    states : list of int
        The run's K values, sorted.
    rows : dict (name, K) -> str
        The row key of each model of ``plan.names`` at each K.
    todo : set of str
        The row keys not yet saved.
    fitter : Fitter
    store : FitStore or None
        Where the base's fits are saved (needed to resume when ``plan.keeps_fits``).
    emit : callable(name, K, model, fit_seconds) -> None
        Computes the row of a fitted model and saves it.
    reseed : callable() -> None
        Seeds the global random generators (before every fit, as a task on its own did).
    """
    missing = set(todo)

    def needed(name, K) -> bool:
        return rows.get((name, K)) in missing

    def done(name, K) -> None:
        missing.discard(rows.get((name, K)))

    pending = [K for K in states if any(needed(n, K) for n in plan.names)]

    def derived_rows(K, base) -> None:
        for name in plan.derived:
            if needed(name, K):
                reseed()
                model, seconds = fitter.derive(name, K, base)
                emit(name, K, model, seconds)
                done(name, K)

    def at_k(K, base, seconds) -> None:
        # the fit is saved before its rows: a saved row implies a saved fit to resume from
        if plan.keeps_fits and store is not None:
            store.save(K, base)
        if plan.report_base and needed(plan.base, K):
            emit(plan.base, K, base, seconds)
            done(plan.base, K)
        derived_rows(K, base)
        if plan.keeps_fits and store is not None:
            store.release_states_before(K)

    # A K whose base row is saved needs its fit again only for derived rows: read from its
    # file (a base row is recomputed by a fresh fit: its fit statistics are not in the file).
    refit = []
    for K in pending:
        saved = None
        if store is not None and not (plan.report_base and needed(plan.base, K)):
            saved = store.load(K)
        if saved is not None:
            derived_rows(K, saved)
        else:
            refit.append(K)
    if not refit:
        return
    if not plan.along_k:
        for K in refit:
            reseed()
            at_k(K, *fitter.one(plan.base, K))
        return
    _along_path(plan.base, states, refit, fitter, store, at_k, reseed)


def _along_path(base, states, refit, fitter, store, at_k, reseed) -> None:
    """The base's path over the K values up to the last of ``refit``: from the first of them
    and the saved fit of the K before it where there is one, else from the first K."""
    first, last = refit[0], refit[-1]
    i = states.index(first)
    previous = None
    if i > 0 and states[i - 1] == first - 1 and store is not None:
        previous = store.load(states[i - 1])
        if previous is not None and not store.load_state(states[i - 1], previous):
            previous = None  # without its per-sequence state the path could go otherwise
    if previous is None:
        i = 0
    run = [K for K in states[i:] if K <= last]
    handled = []
    clock = [time.perf_counter()]

    def callback(K, model) -> None:
        seconds = time.perf_counter() - clock[0]  # this K's share of the path
        at_k(int(K), model, seconds)
        handled.append(int(K))
        reseed()  # the next K starts from the global state of a path resumed there
        clock[0] = time.perf_counter()

    reseed()
    fitter.path(base, run, previous, callback)
    lost = [K for K in run if K not in handled]
    if lost:
        raise RuntimeError(f"{base}.fit_path did not call back for K = {', '.join(map(str, lost))}")


# ------------------------------------------------------------------------ a task's parts
def path_fields(plan: FitPlan, states: list[int], K: int) -> dict:
    """The fields that say how a row of ``plan`` at ``K`` is computed, beyond its key: the K
    values of the path up to ``K`` for a plan fitted along K (``{"path_states": [...]}``),
    nothing for a K fitted on its own (the rows of a run before the harness fitted along K)."""
    return {"path_states": [k for k in states if k <= K]} if plan.along_k else {}


def row_key(model: str, K: int | None, fold: int) -> str:
    """The file key of the row of ``model`` at ``K`` on a fold (no K part for a model without states)."""
    return f"{model}__fold{fold}" if K is None else f"{model}__K{K}__fold{fold}"


def fold_groups(plans, states: list[int], folds: int, stateless: Callable | None = None) -> list[dict]:
    """The tasks of a run of ``compare`` or ``next-event``: one per (plan, fold), in plan order,
    each with one part per (model, K) (:func:`row_key`); a model without states
    (``stateless(name)``, default: not :func:`has_states`) has one part per fold, ``K = None``."""
    stateless = stateless or (lambda name: not has_states(name))
    groups = []
    for plan in plans:
        ks = [None] if stateless(plan.base) else list(states)
        for f in range(folds):
            parts = [
                {"key": row_key(m, K, f), "model": m, "K": K, "fold": f, **path_fields(plan, ks, K)}
                for m in plan.names
                for K in ks
            ]
            groups.append(
                {"key": f"{plan.key}__fold{f}", "plan": plan, "fold": f, "states": ks, "parts": parts}
            )
    return groups


def store_for(plan: FitPlan, folder, digest: str, states: list[int], key_of: Callable) -> FitStore | None:
    """The :class:`FitStore` of a task of ``plan`` (file keys ``key_of(base, K)``), or None
    when the plan keeps no fits or its base is not a registered model."""
    if not plan.keeps_fits or not _registered(plan.base):
        return None
    return FitStore(
        folder,
        digest,
        {K: key_of(plan.base, K) for K in states},
        {K: path_fields(plan, states, K).get("path_states") for K in states},
        get_spec(plan.base).cls,
    )
