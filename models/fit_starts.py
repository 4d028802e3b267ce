"""Where a fit starts, and which of its runs it keeps: restarts, the database-level HMM, grown starts.

Every model that runs several starts keeps the best through
:func:`ldhmm.models.best_run.best_of` (exported here too: the LDHMM family here and along K, the
HMM and LDA baselines in :mod:`ldhmm.baselines`). For the LDHMM family
(:class:`ldhmm.models.variant_hmm.VariantHMM`) :func:`search` is the whole start policy of one
fit, by the effort preset's ``start_policy`` (:mod:`ldhmm.models.fit_settings`; docs/math.md,
"v5: the effort presets and the default's starts"):

- ``"restarts"`` (v4): ``n_init`` random restarts and the symbol-seeded start;
- ``"hmm"``, ``"hmm_and_seeded"``: the database-level HMM first (:func:`database_hmm`), one run
  from it and, for the second, one from the symbol-seeded start;
- a guide whose starts include the exact chain (FF) first fits PF so, then runs from its
  parameters; starts grown from a fit with fewer states race after them
  (:func:`ldhmm.models.path.continue_grown`), and where every run ends below the fit they were
  grown from, that fit is continued (:func:`ldhmm.models.path.continue_previous`).

The functions read the estimator's settings and return what they found (:class:`StartOutcome`);
the estimator keeps it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from ..data.seeds import derived_seeds
from ..inference import (
    FitResult,
    ParameterSharing,
    PFGuide,
    VariantParameters,
    VariationalEM,
    guide_starts,
    hmm_started_parameters,
    init_parameters,
    symbol_seeded_parameters,
)
from ..inference.sharing import POINT
from .best_run import best_of
from .path import continue_grown, continue_previous

__all__ = [
    "START_HMM_SHARING",
    "START_HMM_TOL",
    "StartOutcome",
    "best_of",
    "n_restarts",
    "init_method",
    "initial_parameters",
    "seeded_start",
    "database_hmm",
    "search",
]

#: The database-level HMM that ``start_policy="hmm"`` fits first: every group a point estimate,
#: MAP with the HMM baseline's pseudocount (no probability of exactly 0, which no Dirichlet
#: prior could start from).
START_HMM_SHARING = ParameterSharing(pi=POINT, A=POINT, B=POINT, learn_prior=False, pseudocount=1e-2)
#: The database-level HMM's relative tolerance at most: from a random start Baum-Welch first
#: crawls along a plateau, where the fit's 1e-4 stopped it after two iterations (Entree K = 8:
#: LDHMM-FF's median over 5 seeds 0.0023 nats/token below v4 with 1e-4, 0.0009 with 1e-5).
START_HMM_TOL = 1e-5


def final_elbo(run: FitResult) -> float:
    """A run's final training ELBO (:func:`best_of`'s objective for EM runs)."""
    return run.elbo_history[-1]


@dataclass
class StartOutcome:
    """What :func:`search` found.

    Attributes
    ----------
    result : FitResult
        The kept run.
    kind : str
        How it started: ``"init"`` (a given start), ``"restart"``, ``"seeded"``, ``"hmm"``, a
        grown start's label (``"split:k"``) or ``"continued"``.
    restart_histories : list of ndarray
        The ELBO history of every random restart (v4's policy; empty otherwise).
    kept_restart : int or None
        The index of the kept restart, None where another start won.
    hmm_histories : list of ndarray or None
        The objective history of every run of the database-level HMM, None where none ran.
    init_history : ndarray
        The PF fit's ELBO history where this guide started from it (empty otherwise).
    start_histories : dict of str to ndarray
        The ELBO history of every EM run from a start that is no random restart, by its kind
        (``"seeded"``: the symbol-seeded start, ``"hmm"``: from the database-level HMM), so that a
        fit records every start it raced (empty where none ran).
    """

    result: FitResult
    kind: str
    restart_histories: list = field(default_factory=list)
    kept_restart: int | None = None
    hmm_histories: list | None = None
    init_history: np.ndarray = field(default_factory=lambda: np.asarray([]))
    start_histories: dict = field(default_factory=dict)


def n_restarts(model, grown) -> int:
    """How many restarts a fit runs: ``n_init``, or ``min(n_init, path_n_init)`` where ``grown``
    starts race beside them (a path's K after the first) and ``path_n_init`` is set."""
    if not grown or model.path_n_init is None:
        return model.n_init
    return min(model.n_init, model.path_n_init)


def init_method(model) -> str:
    """``model.init``, with ``"auto"`` resolved: ``"pf"`` where the guide's starts include the
    exact chain (a PF fit first), else ``"random"``."""
    if model.init != "auto":
        return model.init
    return "pf" if "chain" in guide_starts(model.guide) else "random"


def initial_parameters(model, symbol_counts, seed: int | None = None) -> VariantParameters:
    """The seeded, asymmetric starting point of a restart (:func:`ldhmm.inference.init_parameters`)
    from the database's symbol counts (V,); ``seed`` defaults to the model's."""
    freq = np.asarray(symbol_counts).astype(np.float64)
    return init_parameters(
        model.sharing,
        model.n_states,
        model.n_symbols_,
        symbol_frequencies=freq / freq.sum(),
        seed=model.seed if seed is None else seed,
        prior_concentration=model.prior_concentration,
        n_tokens=float(freq.sum()),
        dtype=model.torch_dtype,
    )


def seeded_start(model, symbol_counts, sharing: ParameterSharing | None = None) -> VariantParameters | None:
    """The symbol-seeded start of a fit (of the variant ``sharing``, default the model's), or None
    (``seeded_start="none"``, or fewer than K distinct symbols in the data)."""
    if model.seeded_start == "none":
        return None
    return symbol_seeded_parameters(
        model.sharing if sharing is None else sharing,
        model.n_states,
        symbol_counts,
        prior_concentration=model.prior_concentration,
        dtype=model.torch_dtype,
    )


def _restarts(model, engine: VariationalEM, runner, symbol_counts, n: int) -> StartOutcome:
    """v4's policy: ``n`` restarts (the first seeds of ``model.restart_seeds()``), then the
    symbol-seeded start where ``seeded_start`` asks for it."""
    seeds = derived_seeds(model.seed, n)
    histories, named = [], {}

    def restart(r, seed):
        label = f"restart {r + 1} of {len(seeds)}" if len(seeds) > 1 else ""
        return engine.fit_backend(runner, initial_parameters(model, symbol_counts, seed=seed), label=label)

    runs = [_recorded(histories.append, partial(restart, r, seed)) for r, seed in enumerate(seeds)]
    start = seeded_start(model, symbol_counts)
    if start is not None:
        fit = partial(engine.fit_backend, runner, start, label="symbol-seeded start")
        runs.append(_recorded(partial(named.__setitem__, "seeded"), fit))
    kept, result, _ = best_of(runs, final_elbo)
    if kept < len(seeds):
        return StartOutcome(result, "restart", histories, kept, start_histories=named)
    return StartOutcome(result, "seeded", histories, None, start_histories=named)


def _recorded(keep: Callable, run: Callable) -> Callable:
    """``run`` (an EM run, without arguments) that also hands its ELBO history to ``keep``
    (float64 array): the runs :func:`best_of` races keep every start's history."""

    def recorded():
        result = run()
        keep(np.asarray(result.elbo_history, dtype=np.float64))
        return result

    return recorded


def database_hmm(
    model,
    runner,
    symbol_counts,
    n: int,
    tol: float | None = None,
    max_iter: int | None = None,
    checkpoint=None,
) -> tuple[FitResult, list]:
    """The HMM shared by every sequence, fitted by EM (Baum-Welch, MAP with pseudocount 0.01:
    :data:`START_HMM_SHARING`) on ``runner``'s partitions from ``n`` random starts (the model's
    derived seeds) and the symbol-seeded one (``seeded_start``), to the model's ``tol`` (at most
    :data:`START_HMM_TOL`) and ``max_iter`` (or ``tol``, ``max_iter`` given). Its E-step is
    exact in one sweep (no per-sequence parameters). ``checkpoint``: the fit's
    :class:`ldhmm.inference.checkpoint.FitCheckpoint`, its runs saved and resumed as the fit's
    others (a fit killed during its HMM starts goes on from where it was).

    Returns
    -------
    (the run with the highest final objective, the earlier on a tie; the objective history of
    every run)
    """
    engine = VariationalEM(
        PFGuide(),
        max_iter=model.max_iter if max_iter is None else max_iter,
        tol=min(model.tol, START_HMM_TOL) if tol is None else tol,
        e_step_max_iter=1,
        e_step_tol=model.e_step_tol,
        progress=model.verbose,
        refresh_max=0,
        random_starts=0,
        checkpoint=checkpoint,
    )
    freq = np.asarray(symbol_counts, dtype=np.float64)
    starts = [
        init_parameters(
            START_HMM_SHARING,
            model.n_states,
            model.n_symbols_,
            symbol_frequencies=freq / freq.sum(),
            seed=seed,
            n_tokens=float(freq.sum()),
            dtype=model.torch_dtype,
        )
        for seed in derived_seeds(model.seed, n)
    ]
    seeded = seeded_start(model, symbol_counts, START_HMM_SHARING)
    starts += [seeded] if seeded is not None else []
    histories = []
    runs = [
        _recorded(
            histories.append,
            partial(
                engine.fit_backend, runner, start, label=f"database-level HMM, start {r + 1} of {len(starts)}"
            ),
        )
        for r, start in enumerate(starts)
    ]
    _, best, _ = best_of(runs, final_elbo)
    return best, histories


def _from_database_hmm(
    model, engine: VariationalEM, runner, symbol_counts, n: int, policy: str
) -> StartOutcome:
    """``start_policy`` ``"hmm"`` or ``"hmm_and_seeded"``: the database-level HMM
    (:func:`database_hmm`), one EM run of the model from it
    (:func:`ldhmm.inference.hmm_started_parameters`) and, for ``"hmm_and_seeded"``, one from the
    symbol-seeded start: the run with the higher final ELBO (the HMM's on a tie)."""
    hmm, hmm_histories = database_hmm(model, runner, symbol_counts, n, checkpoint=engine.checkpoint)
    start = hmm_started_parameters(
        model.sharing,
        hmm.params,
        concentration=model.fit_settings.hmm_start_concentration,
        prior_concentration=model.prior_concentration,
        n_tokens=float(np.sum(symbol_counts)),
    )
    named = {}
    fit = partial(engine.fit_backend, runner, start, label="from the database-level HMM")
    runs = [_recorded(partial(named.__setitem__, "hmm"), fit)]
    seeded = seeded_start(model, symbol_counts) if policy == "hmm_and_seeded" else None
    if seeded is not None:
        fit = partial(engine.fit_backend, runner, seeded, label="symbol-seeded start")
        runs.append(_recorded(partial(named.__setitem__, "seeded"), fit))
    kept, result, _ = best_of(runs, final_elbo)
    return StartOutcome(result, ("hmm", "seeded")[kept], hmm_histories=hmm_histories, start_histories=named)


def _best_start(model, engine: VariationalEM, runner, symbol_counts, grown=()) -> StartOutcome:
    """The starts of the effort preset's policy, then the ``grown`` starts
    (:class:`ldhmm.models.path.GrownStarts`, raced by :func:`ldhmm.models.path.continue_grown`)."""
    n = n_restarts(model, grown)
    policy = model.fit_settings.resolved().start_policy
    if policy == "restarts":
        outcome = _restarts(model, engine, runner, symbol_counts, n)
    else:
        outcome = _from_database_hmm(model, engine, runner, symbol_counts, n, policy)
    if grown:
        outcome.result, grown_kind = continue_grown(engine, runner, grown, outcome.result)
        if grown_kind != "restart":  # a grown start won: no restart was kept
            outcome.kept_restart, outcome.kind = None, grown_kind
    return outcome


def search(model, make_engine: Callable, runner, symbol_counts, init_params=None, grown=()) -> StartOutcome:
    """The whole start policy of one fit of ``model`` over ``runner``'s partitions.

    Parameters
    ----------
    model : VariantHMM
        Its settings decide the policy (:func:`init_method`, the effort preset).
    make_engine : callable
        ``make_engine(guide=None)``: the model's :class:`ldhmm.inference.VariationalEM`, for
        another guide where given (the PF fit before an FF one).
    runner : backend over the partitions
    symbol_counts : ndarray (V,)
    init_params : VariantParameters, optional
        One run from this start, nothing else.
    grown : ldhmm.models.path.GrownStarts, optional

    Returns
    -------
    StartOutcome
    """
    engine = make_engine()
    if init_params is not None:
        return StartOutcome(engine.fit_backend(runner, init_params, label="from the given start"), "init")
    if init_method(model) == "pf":
        # The PF fit (with the restarts) first, then this guide from its parameters.
        outcome = _best_start(model, make_engine(guide=PFGuide()), runner, symbol_counts, grown)
        outcome.init_history = np.asarray(outcome.result.elbo_history)
        label = f"{getattr(model.guide, 'name', 'guide')} from the PF fit"
        outcome.result = engine.fit_backend(runner, outcome.result.params, label=label)
    else:
        outcome = _best_start(model, engine, runner, symbol_counts, grown)
    if grown and outcome.result.elbo_history[-1] <= grown.floor:
        # every run ends at or below the fit it was grown from: continue that fit
        continued = continue_previous(engine, runner, grown)
        if continued is not None and continued.elbo_history[-1] > outcome.result.elbo_history[-1]:
            outcome.result, outcome.kind, outcome.kept_restart = continued, "continued", None
            outcome.init_history = np.asarray([])  # it started from no PF fit
    return outcome
