"""Identical sequences computed once: a database's distinct sequences, their copies, and keys
derived from their content.

Real logs repeat themselves: the full MSNBC file holds 989,818 sessions of which 17% are
distinct. A sequence's E-step, its bound and its posterior depend only on its symbols and on
where its random starts come from; when those starts are hashed from the sequence's content
(:func:`content_keys`) rather than its position, every copy of a sequence computes the same
numbers, so a fit computes each distinct sequence once and weighs its sums by the number of
copies (:attr:`ldhmm.inference.batch.Bucket.weights`). The per-sequence outputs (scores,
posteriors, predictions, paths) are given back one row per input sequence.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

__all__ = ["Copies", "collapse_copies", "content_keys", "IDENTICAL_SEQUENCES"]

#: How a fit treats identical sequences (see :class:`ldhmm.models.fit_settings.FitSettings`):
#: ``"once"``, each distinct sequence computed once, weighted by its copies, its random starts
#: hashed from its content; ``"each"``, every sequence on its own, its random starts hashed from
#: its position in the database (the v5 defaults and before).
IDENTICAL_SEQUENCES = ("once", "each")


@dataclass(frozen=True)
class Copies:
    """The distinct sequences of a list and where each input sequence is among them:
    ``distinct`` (U int64 arrays) in the order of their content keys, so the same order whatever
    the order of the input and a fit does not depend on it; ``keys`` (int64 (U,)), their
    :func:`content_keys`, ascending; ``counts`` (int64 (U,)), how many input sequences are each
    distinct one; ``inverse`` (int64 (M,)), each input sequence's row in ``distinct``."""

    distinct: list
    keys: np.ndarray
    counts: np.ndarray
    inverse: np.ndarray


def collapse_copies(sequences: list) -> Copies:
    """The distinct sequences of ``sequences`` (validated 1-D int64 arrays), exact by content:
    two sequences are copies when they have the same length and the same symbols."""
    rows: dict[bytes, int] = {}
    contents: list = []
    first: list = []
    seen = np.empty(len(sequences), dtype=np.int64)  # each input's row in order of first sight
    for i, s in enumerate(sequences):
        content = np.ascontiguousarray(s, dtype="<i8").tobytes()
        row = rows.get(content)
        if row is None:
            row = rows[content] = len(contents)
            contents.append(content)
            first.append(s)
        seen[i] = row
    keys = np.array([_key(c) for c in contents], dtype=np.int64)
    # Canonical order: by key, ties (a 64-bit collision of two distinct sequences) by content.
    order = np.array(sorted(range(len(contents)), key=lambda r: (keys[r], contents[r])), dtype=np.int64)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    inverse = rank[seen]
    counts = np.bincount(inverse, minlength=order.size).astype(np.int64)
    return Copies([first[r] for r in order], keys[order], counts, inverse)


def _key(content: bytes) -> int:
    """The first 8 bytes of BLAKE2b of ``content``, as a signed 64-bit integer."""
    return int.from_bytes(hashlib.blake2b(content, digest_size=8).digest(), "little", signed=True)


def content_keys(sequences: list) -> np.ndarray:
    """A 64-bit key (int64 (M,)) of each sequence's symbols: the first 8 bytes of BLAKE2b of its
    little-endian int64 symbols. The same on any machine and in any process, so a sequence's
    random starts (:func:`ldhmm.inference.ops.hashing.hashed_uniform` of this key) are the same
    wherever it sits: in any position, bucket or partition."""
    return np.array([_key(np.ascontiguousarray(s, dtype="<i8").tobytes()) for s in sequences], dtype=np.int64)
