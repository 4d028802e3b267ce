"""Which of several runs a fit keeps: :func:`best_of`, the one loop over starts of the project.

Every model that runs several starts keeps the best through it: the LDHMM family's restarts and
its grown starts along K (:mod:`ldhmm.models.fit_starts`, :func:`ldhmm.models.path.continue_grown`),
the contextual models (:mod:`ldhmm.models.contextual`), the HMM and LDA baselines
(:mod:`ldhmm.baselines`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = ["best_of"]


def best_of(
    runs: Iterable[Callable], objective: Callable, go_on: Callable | None = None
) -> tuple[int, object, list]:
    """Run each of ``runs`` (callables without arguments) in order and keep the result with the
    highest ``objective(result)``, the earlier on a tie (a NaN objective never wins over an
    earlier run). ``go_on(i, best)``: asked before run ``i >= 1`` with the best objective so
    far; False stops the race there (the runs after are not run).

    Returns
    -------
    (index of the kept run, its result, the objective of every run run). A single run is kept
    without its objective being computed (the list then holds None).
    """
    runs = list(runs)
    if len(runs) == 1:
        return 0, runs[0](), [None]
    kept, best, values = 0, None, []
    for i, run in enumerate(runs):
        if i > 0 and go_on is not None and not go_on(i, values[kept]):
            break
        result = run()
        values.append(objective(result))
        if i == 0 or values[-1] > values[kept]:
            kept, best = i, result
    return kept, best, values
