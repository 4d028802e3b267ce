"""Fitting along K: one model per number of states, each K after the first grown from the fit before it.

:func:`fit_path` is :meth:`ldhmm.models.variant_hmm.VariantHMM.fit_path`. The first K is fitted
as :meth:`~ldhmm.models.variant_hmm.VariantHMM.fit` fits it (its restarts); every later K fits
its restarts and, beside them, the starts :func:`grown_starts` makes from the fit before it, one
per state of that fit split in two (:func:`ldhmm.inference.growth.split_state`). The grown starts
are probed by one EM iteration each and run to convergence in the order of that ELBO, the best
always, the next only while the path would fall (:func:`continue_grown`), so that together they
cost about one restart. Of all runs, the one with the highest final training ELBO is kept
(docs/math.md, "Growing K by splitting a state").

Why: independent fits at each K start from random points, and the best of a few of them can end
below the best fit with one state less, although a K-state model can come as close as it likes
to any (K-1)-state one. A start grown from the (K-1)-state fit begins where that fit ended, with
one state divided in two, and EM separates the two copies where the data wants them apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..inference.growth import expected_occupancy, split_state
from ..inference.ops.dirichlet import MAX_CONCENTRATION, MIN_CONCENTRATION

__all__ = [
    "PROBE_ITERATIONS",
    "GrownStarts",
    "check_states",
    "split_seed",
    "grown_starts",
    "probe",
    "continue_grown",
    "fit_path",
]

#: EM iterations of a grown start's probe (:func:`probe`).
PROBE_ITERATIONS = 1


class _Stop(Exception):
    """Raised from EM's callback to end a probe."""


def check_states(states) -> list[int]:
    """``states`` as a list of ints >= 1, strictly increasing, or a one-line ``ValueError``."""
    if isinstance(states, (str, bytes)):
        # a string iterates as characters ("2..3" -> "2", ".", ...): name the whole argument
        raise ValueError(
            f"states must be a sequence of integers such as range(2, 7), got the string {states!r}"
        )
    try:
        values = list(states)
    except TypeError:
        raise ValueError(f"states must be an increasing sequence of integers, got {states!r}") from None
    if not values:
        raise ValueError("states must hold at least one K")
    out = []
    for v in values:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"states must be integers >= 1, got {v!r}")
        if out and v <= out[-1]:
            raise ValueError(f"states must increase, got {values!r}")
        out.append(int(v))
    return out


def split_seed(seed: int, n_states: int, state: int) -> int:
    """The seed of the perturbation of ``state``'s split when growing ``n_states`` states:
    the first 32-bit word of ``SeedSequence([seed, n_states, state])`` (as
    :func:`ldhmm.data.seeds.derived_seeds` derives restart seeds), so no two splits of a path
    share one."""
    return int(np.random.SeedSequence([int(seed), int(n_states), int(state)]).generate_state(1)[0])


def grown_starts(params, n_states: int, seed: int, mean_length: float) -> list[tuple[str, object]]:
    """The starts of ``n_states`` states grown from ``params`` (VariantParameters of a fit with
    fewer states), one per state of that fit, the most visited first (:func:`expected_occupancy`
    over sequences of the training data's mean length; ties by state index).

    Start ``"split:k"`` splits state ``k`` (:func:`split_state`, seeded by :func:`split_seed`);
    where ``n_states`` exceeds the fit's K by more than one, the copy made is split again (each
    further split of the most visited state then) until there are ``n_states``.
    """
    K = params.n_states
    if n_states <= K:
        raise ValueError(f"cannot grow {n_states} states from a fit with {K}")
    visits = expected_occupancy(params, mean_length).numpy()
    order = sorted(range(K), key=lambda k: (-visits[k], k))
    starts = []
    for k in order:
        grown, state = params, k
        for size in range(K + 1, n_states + 1):
            grown = split_state(
                grown,
                state,
                seed=split_seed(seed, size, state),
                min_value=MIN_CONCENTRATION,
                max_value=MAX_CONCENTRATION,
            )
            occupancy = expected_occupancy(grown, mean_length).numpy()
            state = int(np.argmax(occupancy))
        starts.append((f"split:{k}", grown))
    return starts


@dataclass(frozen=True)
class GrownStarts:
    """What :meth:`ldhmm.models.variant_hmm.VariantHMM.fit` races beside its restarts.

    Attributes
    ----------
    starts : tuple of (label, VariantParameters)
        From :func:`grown_starts`, in their order of preference.
    floor : float
        The final training ELBO of the fit they were grown from: while the best run so far
        ends at or below it, the next start is run (:func:`continue_grown`).
    """

    starts: tuple
    floor: float = -math.inf

    def __bool__(self) -> bool:
        return bool(self.starts)


def probe(engine, runner, params) -> float:
    """The total ELBO after :data:`PROBE_ITERATIONS` EM iterations from ``params`` (or at
    convergence, when EM stops earlier): what orders the grown starts."""
    seen = []

    def stop(n_iter, elbo):
        seen.append(elbo)
        if n_iter >= PROBE_ITERATIONS:
            raise _Stop

    try:
        run = engine.fit_backend(runner, params, callback=stop, label="probe of a grown start")
    except _Stop:
        return float(seen[-1])
    return float(run.elbo_history[-1])


def continue_grown(engine, runner, grown: GrownStarts, best):
    """Race the grown starts against ``best`` (the restarts' FitResult).

    Every start is probed (:func:`probe`); in the order of the probed ELBO (ties: the order of
    ``grown.starts``) they are run to convergence, the first always, each next one only while
    the best final ELBO so far is not above ``grown.floor`` (the path would fall).

    Returns
    -------
    (FitResult, label): the run with the highest final ELBO (``best`` on a tie) and
    ``"restart"`` or its start's label.
    """
    kind = "restart"
    if not grown:
        return best, kind
    probed = [probe(engine, runner, params) for _, params in grown.starts]
    order = sorted(range(len(probed)), key=lambda i: (-probed[i], i))
    for rank, i in enumerate(order):
        if rank > 0 and best.elbo_history[-1] > grown.floor:
            break
        label, params = grown.starts[i]
        run = engine.fit_backend(runner, params, label=f"grown start {label}")
        if run.elbo_history[-1] > best.elbo_history[-1]:
            best, kind = run, label
    return best, kind


def fit_path(cls, sequences, states, previous=None, callback=None, **options) -> dict:
    """Fit ``cls(K, **options)`` at every K of ``states``, each K grown from the one before
    (see the module docstring and :meth:`ldhmm.models.variant_hmm.VariantHMM.fit_path`)."""
    states = check_states(states)
    if previous is not None:
        if not isinstance(previous, cls) or not previous.__sklearn_is_fitted__():
            raise ValueError(f"previous must be a fitted {cls.__name__}, got {type(previous).__name__}")
        if previous.n_states >= states[0]:
            raise ValueError(
                f"previous has K = {previous.n_states}, not fewer than the first K = {states[0]}"
            )
        if "n_symbols" not in options:
            options = {**options, "n_symbols": previous.n_symbols_}
    first = cls(states[0], **options)
    if getattr(first, "optimizer", "cavi") != "cavi":
        raise ValueError("fit_path needs optimizer='cavi'")
    mean_length = float(np.mean([len(s) for s in first._validate_for_fit(sequences)]))
    if previous is not None and previous.n_symbols_ != first.n_symbols_:
        raise ValueError(
            f"previous has V = {previous.n_symbols_} symbols, the data {first.n_symbols_}: give n_symbols"
        )
    models = {}
    for K in states:
        model = cls(K, **options)
        grown = GrownStarts(())
        if previous is not None:
            starts = grown_starts(previous.params_, K, model.seed, mean_length)
            grown = GrownStarts(tuple(starts), float(previous.elbo_history_[-1]))
        model.fit(sequences, grown=grown)
        model.path_start_ = model.start_kind_
        models[K] = model
        if callback is not None:
            callback(K, model)
        previous = model
    return models
