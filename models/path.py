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

from ..data.fingerprint import content_sha256
from ..inference.growth import UNUSED_WEIGHT, expected_occupancy, pad_states, split_state
from ..inference.ops.dirichlet import MAX_CONCENTRATION, MIN_CONCENTRATION
from ..inference.state_store import bucket_arrays, bucket_states, read_states, write_states
from .best_run import best_of

__all__ = [
    "PROBE_ITERATIONS",
    "GrownStarts",
    "check_states",
    "parse_states",
    "MAX_STATES_VALUES",
    "split_seed",
    "grown_starts",
    "probe",
    "continue_grown",
    "continue_previous",
    "START_OVER",
    "save_path_state",
    "load_path_state",
    "fit_path",
]

#: EM iterations of a grown start's probe (:func:`probe`).
PROBE_ITERATIONS = 1


class _Stop(Exception):
    """Raised from EM's callback to end a probe."""


#: At most this many K values in one run (each is a column of every table).
MAX_STATES_VALUES = 1000


def parse_states(values) -> list[int]:
    """K values from ``--states``: integers or ranges ``2..6`` / ``2-6`` (a list of them, or one);
    sorted, unique."""
    if isinstance(values, (int, str)):
        values = [values]
    out = set()
    for v in values:
        for part in str(v).replace(",", " ").split():
            for sep in ("..", "-", ":"):
                if sep in part:
                    a, b = part.split(sep, 1)
                    try:
                        lo, hi = int(a), int(b)
                    except ValueError:
                        raise ValueError(
                            f"--states: {part!r} is not an integer or a range like 2..6"
                        ) from None
                    if lo > hi:
                        raise ValueError(f"--states: empty range {part!r}")
                    if hi - lo >= MAX_STATES_VALUES:
                        raise ValueError(
                            f"--states: the range {part!r} holds {hi - lo + 1} values; at most "
                            f"{MAX_STATES_VALUES} K values per run"
                        )
                    out.update(range(lo, hi + 1))
                    break
            else:
                try:
                    out.add(int(part))
                except ValueError:
                    raise ValueError(f"--states: {part!r} is not an integer or a range like 2..6") from None
    if not out:
        raise ValueError("--states: give at least one K")
    if min(out) < 1:
        raise ValueError(f"--states: K must be >= 1, got {min(out)}")
    return sorted(out)


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
    previous : VariantParameters, optional
        That fit's parameters, and ``previous_states`` its kept run's final per-sequence state
        (one list of BucketState per partition): where every run ends at or below ``floor``,
        that fit is continued with an unused state added (:func:`continue_previous`).
    keep_states : bool
        Whether the fit keeps its own kept run's final per-sequence state for the next K
        (``_path_states``).
    """

    starts: tuple
    floor: float = -math.inf
    previous: object = None
    previous_states: object = None
    keep_states: bool = False

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
    if not grown:
        return best, "restart"
    probed = [probe(engine, runner, params) for _, params in grown.starts]
    order = sorted(range(len(probed)), key=lambda i: (-probed[i], i))
    runs = [lambda: best] + [
        lambda i=i: engine.fit_backend(runner, grown.starts[i][1], label=f"grown start {grown.starts[i][0]}")
        for i in order
    ]
    # the first grown start always runs; each next one only while the path would fall
    kept, result, _ = best_of(
        runs, lambda run: run.elbo_history[-1], go_on=lambda i, value: i == 1 or not value > grown.floor
    )
    return result, "restart" if kept == 0 else grown.starts[order[kept - 1]][0]


def continue_previous(engine, runner, grown: GrownStarts):
    """The fit that ``grown`` was grown from, continued with one unused state more: its kept
    run's final per-sequence state padded with an empty state (:func:`pad_states`), its
    parameters split with a vanishing copy (:data:`UNUSED_WEIGHT`, no perturbation), EM run
    warm from there (no cold starts at the first E-step; refreshes as every run's).

    Its first E-step begins at that fit's final bound (the copy's prior mass is at the M-step's
    lower bound and nothing visits it), and no step of EM lowers the bound, so it ends at or
    above ``grown.floor`` up to that vanishing mass: the guarantee behind a path whose training
    ELBO does not fall with K, where the split starts and the restarts all end below it.

    Returns
    -------
    FitResult, or None where it cannot be run (no kept state, K grows by more than one, a
    guide's state that cannot be padded).
    """
    if grown.previous is None or grown.previous_states is None or not grown.starts:
        return None
    K = grown.previous.n_states
    if grown.starts[0][1].n_states != K + 1:
        return None
    padded = [pad_states(part, K) for part in grown.previous_states]
    if any(part is None for part in padded):
        return None
    params = split_state(
        grown.previous,
        0,
        weight=UNUSED_WEIGHT,
        jitter=0.0,
        min_value=MIN_CONCENTRATION,
        max_value=MAX_CONCENTRATION,
    )
    label = "the previous fit with an unused state"
    return engine.fit_backend(runner, params, label=label, warm_states=padded)


#: How to start a path over, ending a refusal of its state file (a caller may say it its way).
START_OVER = "fit the path again from its first K"


def save_path_state(model, path) -> bool:
    """Write the per-sequence state a path keeps of ``model`` (its kept run's final expected
    counts, and the guide's state marginals where it has them) to ``path``, a state file
    (:func:`ldhmm.inference.state_store.write_states`: NPZ with a JSON manifest, no pickles)
    beside its model file, atomically; a path resumed from that model (``previous=``) then
    continues it as the uninterrupted path would (:func:`continue_previous`). Its manifest's
    owner is the model's ``training_data_["sha256"]`` (the data it belongs to). Returns False,
    writing nothing, where the model keeps none (the last K of a path, a fit outside a path)."""
    states = getattr(model, "_path_states", None)
    if not states or len(states) != 1:  # one in-process partition
        return False
    write_states(path, [bucket_arrays(states[0])], model.n_states, {"sha256": _fitted_on(model)})
    return True


def load_path_state(model, path, start_over: str = START_OVER) -> None:
    """Read a file of :func:`save_path_state` (or of an ldhmm before the state store: format
    ``ldhmm-path-state``) into ``model`` (the model it was written with, read back from its
    model file), checked (:func:`ldhmm.inference.state_store.read_states`): its K, the training
    data's hash, every array's shape, dtype and values. A one-line ``ValueError`` names the file
    and what is wrong, ended by ``start_over``; the partition's layout is checked when the path
    uses it."""
    parts = read_states(
        path,
        what="path state file",
        n_states=model.n_states,
        owner={"sha256": _fitted_on(model)},
        start_over=start_over,
        n_partitions=1,
        legacy=("path",),
    )
    model._path_states = [bucket_states(parts[0])]


def _fitted_on(model) -> str:
    return str((getattr(model, "training_data_", None) or {}).get("sha256"))


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
    validated = first._validate_for_fit(sequences)
    mean_length = float(np.mean([len(s) for s in validated]))
    if getattr(previous, "_path_states", None) is not None:
        fitted_on = (getattr(previous, "training_data_", None) or {}).get("sha256")
        if fitted_on != content_sha256(validated):
            raise ValueError(
                "previous carries the per-sequence state of other training data: "
                "give the sequences it was fitted on"
            )
    if previous is not None and previous.n_symbols_ != first.n_symbols_:
        raise ValueError(
            f"previous has V = {previous.n_symbols_} symbols, the data {first.n_symbols_}: give n_symbols"
        )
    models = {}
    for i, K in enumerate(states):
        model = cls(K, **options)
        keep = i + 1 < len(states)  # a next K continues from this fit's per-sequence state
        grown = GrownStarts((), keep_states=keep)
        if previous is not None:
            starts = grown_starts(previous.params_, K, model.seed, mean_length)
            grown = GrownStarts(
                tuple(starts),
                float(previous.elbo_history_[-1]),
                previous.params_,
                getattr(previous, "_path_states", None),
                keep,
            )
            previous._path_states = None  # used once: the memory of a whole fit's state
        model.fit(sequences, grown=grown)
        model.path_start_ = model.start_kind_
        models[K] = model
        if callback is not None:
            callback(K, model)
        previous = model
    return models
