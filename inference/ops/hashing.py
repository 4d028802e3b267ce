"""Counter-based random numbers: the same value for the same key, wherever it is computed.

A start of the E-step draws its random marginals from a hash of (seed, start, sequence id,
position, state), not from a generator's stream: the draws of a sequence do not depend on
which bucket or partition it lands in, or in which order buckets run.
"""

from __future__ import annotations

import numpy as np

__all__ = ["splitmix64", "hashed_uniform"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer of uint64 keys (a bijection with good avalanche)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def hashed_uniform(*keys) -> np.ndarray:
    """Uniform numbers in (0, 1), one per element of the broadcast integer ``keys``.

    Parameters
    ----------
    *keys : int arrays (broadcastable)

    Returns
    -------
    ndarray of float64, the broadcast shape
    """
    # Key by key, broadcasting as it goes: each round runs at the shape of the keys so far (for
    # (draw, sequence, position, state) only the last round is M x T x K); elementwise, so the
    # values are those of hashing the fully broadcast keys.
    h = np.zeros((), dtype=np.uint64)
    for k in keys:
        h = splitmix64(h ^ np.asarray(k, dtype=np.int64).astype(np.uint64))
    h = np.asarray(h)
    # 53 random bits, shifted away from 0
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)
