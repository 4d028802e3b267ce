"""What a model was fitted on, recorded with it: the data's source, size and a content hash.

:func:`training_record` is what a fitted model keeps as ``training_data_`` (and a model file
saves as ``training_data``): the file it was read from (or ``"Python data"``), the number of
sequences and of tokens, and :func:`content_sha256` of the integer-coded sequences, so that a
reader can tell whether two models were fitted on the same data.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

__all__ = ["PYTHON_DATA", "content_sha256", "training_record"]

#: The source recorded for sequences that came from no file.
PYTHON_DATA = "Python data"


def content_sha256(sequences: Sequence[np.ndarray]) -> str:
    """SHA-256 of integer-coded sequences: for each sequence its length, then its codes, all as
    little-endian int64 (the length first, so that ``[0, 1], [2]`` and ``[0], [1, 2]`` differ).

    Parameters
    ----------
    sequences : sequence of M 1-D integer arrays

    Returns
    -------
    str, 64 lowercase hexadecimal digits
    """
    digest = hashlib.sha256()
    for s in sequences:
        codes = np.ascontiguousarray(s, dtype="<i8")
        digest.update(np.int64(codes.size).astype("<i8").tobytes())
        digest.update(codes.tobytes())
    return digest.hexdigest()


def training_record(sequences: Sequence[np.ndarray], source: str | None) -> dict:
    """``{"source", "n_sequences", "n_tokens", "sha256"}`` of the sequences a model is fitted on.

    Parameters
    ----------
    sequences : sequence of M 1-D integer arrays (the validated, coded training sequences)
    source : str or None
        The file they were read from; None: :data:`PYTHON_DATA`.
    """
    return {
        "source": PYTHON_DATA if source is None else str(source),
        "n_sequences": len(sequences),
        "n_tokens": int(sum(len(s) for s in sequences)),
        "sha256": content_sha256(sequences),
    }
