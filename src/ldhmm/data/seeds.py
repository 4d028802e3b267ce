"""Seeds derived from one seed: a model's random restarts, a partitioned run's partitions.

The first derived seed is the seed itself (one restart, or one partition, reproduces the run
without restarts or partitions); seed ``i >= 1`` is the first 32-bit word of
``numpy.random.SeedSequence([seed, i])``, so the seeds of neighbouring ``seed`` values share
nothing (``seed + i`` would give seed 4's first restart to seed 5).
"""

from __future__ import annotations

import numpy as np

__all__ = ["derived_seeds", "MAX_SEED"]

#: The largest seed a user may give: seeds reach generators that take unsigned 32-bit seeds
#: (numpy's legacy RandomState, in hmmlearn and gensim) or signed 64-bit ones (torch), so a
#: larger one would fail deep inside a fit; and every seed :func:`derived_seeds` gives (a
#: restart's, which a user may fit on its own) is at most this.
MAX_SEED = 2**32 - 1


def derived_seeds(seed: int, n: int) -> list[int]:
    """``n`` seeds derived from ``seed``: ``seed`` itself, then one per ``(seed, i)``.

    Parameters
    ----------
    seed : int, >= 0
    n : int, >= 0

    Returns
    -------
    list of int, length n
        ``[seed] + [SeedSequence([seed, i]).generate_state(1)[0] for i in 1..n-1]``; empty for
        ``n == 0``.
    """
    seed, n = int(seed), int(n)
    if seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed}")
    if n < 0:
        raise ValueError(f"the number of seeds must be >= 0, got {n}")
    return ([seed] if n else []) + [
        int(np.random.SeedSequence([seed, i]).generate_state(1)[0]) for i in range(1, n)
    ]
