"""Validation of user sequences and their packing into padded, length-bucketed tensors.

Every estimator in the project (LDHMM, its variants and the baselines) takes a database as a
list of 1-D integer arrays. :func:`validate_sequences` turns whatever the user passed into a
list of ``int64`` numpy arrays or raises a ``ValueError`` that names the problem.
:func:`make_buckets` groups sequences of similar length so that the E-step pads little.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .cavi.kernels.sparse import local_symbols

__all__ = ["bucket_bounds", "bucket_cells", "validate_sequences", "infer_n_symbols", "Bucket", "make_buckets"]


def _as_int_array(seq, index: int) -> np.ndarray:
    if isinstance(seq, torch.Tensor):
        seq = seq.detach().cpu().numpy()
    if isinstance(seq, (str, bytes)):
        raise ValueError(
            f"sequence {index} is a string ({seq[:20]!r}); encode tokens as integers "
            "0..V-1 first (see ldhmm.data for vocabularies)"
        )
    arr = np.asarray(seq)
    if arr.ndim == 0:
        raise ValueError(f"sequence {index} is a scalar, expected a 1-D array of integer symbols")
    if arr.ndim != 1:
        raise ValueError(f"sequence {index} has shape {arr.shape}, expected a 1-D array of symbols")
    if arr.size == 0:
        raise ValueError(f"sequence {index} is empty; every sequence needs at least one symbol")
    if arr.dtype == bool or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise ValueError(
            f"sequence {index} has non-integer tokens (dtype {arr.dtype}); symbols must be integers 0..V-1"
        )
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            bad = arr[~(np.isfinite(arr) & (arr == np.round(arr)))][0]
            raise ValueError(
                f"sequence {index} has a non-integer token {bad!r}; symbols must be integers 0..V-1"
            )
    # uint64 and floats beyond int64 would wrap around to negative ids in the cast below;
    # unsigned ids compare as integers (as floats, 2**63 - 1 would round up to 2**63)
    top = arr.max()
    if np.issubdtype(arr.dtype, np.unsignedinteger):
        too_big = top > np.iinfo(np.int64).max
    else:
        too_big = np.issubdtype(arr.dtype, np.floating) and top >= 2.0**63
    if too_big:
        raise ValueError(
            f"sequence {index} has symbol id {int(top)}, beyond any vocabulary (over 2**63): "
            "encode the symbols densely as 0..V-1 (ldhmm.data.Vocabulary)"
        )
    arr = arr.astype(np.int64, copy=False)
    if arr.min() < 0:
        raise ValueError(f"sequence {index} has a negative symbol {int(arr.min())}; symbols are 0..V-1")
    return arr


#: Sequences whose symbols one array operation checks at a time (:func:`_symbol_range`).
_CHECK_CHUNK = 1 << 12


def _symbol_range(sequences: list[np.ndarray]) -> tuple[int, int]:
    """The smallest and largest symbol of non-empty integer arrays, a chunk of sequences per
    array operation (two reductions per sequence cost more than the arithmetic)."""
    low, high = None, None
    for start in range(0, len(sequences), _CHECK_CHUNK):
        chunk = np.concatenate(sequences[start : start + _CHECK_CHUNK])
        lo, hi = int(chunk.min()), int(chunk.max())
        low = lo if low is None else min(low, lo)
        high = hi if high is None else max(high, hi)
    return low, high


def _valid_range(sequences: list) -> tuple[int, int] | None:
    """The symbol range (:func:`_symbol_range`) when every sequence is a non-empty 1-D int64
    ndarray with no negative symbol (what :func:`_as_int_array` returns unchanged, the same
    object): the common case, checked without a numpy call per sequence; else None."""
    for s in sequences:
        if type(s) is not np.ndarray or s.dtype != np.int64 or s.ndim != 1 or s.size == 0:
            return None
    found = _symbol_range(sequences) if sequences else None
    return found if found is not None and found[0] >= 0 else None


def validate_sequences(sequences, n_symbols: int | None = None) -> list[np.ndarray]:
    """Check a database and return it as a list of ``int64`` arrays.

    Parameters
    ----------
    sequences : iterable of 1-D integer array-likes
        The database; numpy arrays, torch tensors or lists.
    n_symbols : int, optional
        Vocabulary size V. When given, every symbol must lie in ``0..V-1``.

    Returns
    -------
    list of np.ndarray, each of shape (N_m,) and dtype int64

    Raises
    ------
    ValueError
        For an empty database, an empty sequence, non-integer or negative tokens, or a symbol
        ``>= n_symbols``; the message names the sequence index.
    """
    if sequences is None:
        raise ValueError("the database is None; expected a list of 1-D integer arrays")
    if isinstance(sequences, np.ndarray) and sequences.ndim == 1 and sequences.dtype != object:
        raise ValueError("expected a list of sequences, got a single 1-D array; wrap it as [sequence]")
    if isinstance(sequences, torch.Tensor):
        if sequences.ndim != 2:
            raise ValueError(
                "a tensor database must be 2-D (n_sequences, length); pass a list for ragged data"
            )
        sequences = list(sequences)
    elif isinstance(sequences, np.ndarray) and sequences.ndim == 2:
        sequences = list(sequences)
    sequences = list(sequences)
    found = _valid_range(sequences)
    if found is not None:
        out = sequences
    else:  # sequence by sequence: the message names the first bad one
        out = [_as_int_array(s, i) for i, s in enumerate(sequences)]
    if not out:
        raise ValueError("the database is empty; expected at least one sequence")
    if n_symbols is not None:
        if int(n_symbols) < 1:
            raise ValueError(f"n_symbols must be >= 1, got {n_symbols}")
        if (found or _symbol_range(out))[1] < n_symbols:
            return out
        for i, s in enumerate(out):  # which sequence: the message names it
            top = int(s.max())
            if top >= n_symbols:
                raise ValueError(
                    f"sequence {i} has symbol {top} out of range: the model knows "
                    f"{n_symbols} symbols (0..{n_symbols - 1})"
                )
    return out


def infer_n_symbols(sequences: Sequence[np.ndarray]) -> int:
    """Vocabulary size implied by a validated database: ``max symbol + 1``.

    Raises
    ------
    ValueError
        A symbol id so far beyond the number of tokens (more than 100 ids per token, and over
        1000) that the ids are not a dense code: V = id + 1 would size every array by it. The
        message names the id and says what to do.
    """
    top = _symbol_range(list(sequences))[1]
    n_tokens = int(sum(s.size for s in sequences))
    if top + 1 > 100 * n_tokens + 1000:
        raise ValueError(
            f"symbol id {top} is far beyond the {n_tokens} tokens of the data (V would be {top + 1}): "
            f"encode the symbols densely as 0..V-1 (ldhmm.data.Vocabulary, or a SequenceDatabase), "
            f"or pass n_symbols= if the vocabulary really is that large"
        )
    return top + 1


@dataclass
class Bucket:
    """Sequences of similar length, padded to a common length.

    Attributes
    ----------
    index : LongTensor, shape (M_b,)
        Positions of these sequences in the database.
    tokens : LongTensor, shape (M_b, T_b)
        Symbols, padded with 0 beyond each length.
    lengths : LongTensor, shape (M_b,)
    mask : BoolTensor, shape (M_b, T_b)
        True on real positions.
    symbols : LongTensor, shape (M_b, W_b), optional
        Sparse emission layout (see :mod:`ldhmm.inference.cavi.emissions`): the distinct symbols of
        each sequence in ascending order, padded with 0 (the padding slots never
        receive counts). None in the dense layout, where a sequence's emission counts span all
        V symbols.
    slots : LongTensor, shape (M_b, T_b), optional
        Sparse layout: each token as its position in the sequence's ``symbols`` row.
    weights : DoubleTensor, shape (M_b,), optional
        How many sequences of the database each row stands for (identical sequences computed
        once, :mod:`ldhmm.inference.copies`): every sum over sequences weighs a row by it. None:
        one each.
    start_keys : LongTensor, shape (M_b,), optional
        What each row's random starts are hashed from (a key of its content,
        :func:`ldhmm.inference.copies.content_keys`). None: ``index``.
    """

    index: torch.Tensor
    tokens: torch.Tensor
    lengths: torch.Tensor
    mask: torch.Tensor
    symbols: torch.Tensor | None = None
    slots: torch.Tensor | None = None
    weights: torch.Tensor | None = None
    start_keys: torch.Tensor | None = None

    @property
    def n_sequences(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def max_length(self) -> int:
        return int(self.tokens.shape[1])

    @property
    def sparse(self) -> bool:
        """Whether the bucket's emission counts are stored per distinct symbol (sparse layout)."""
        return self.symbols is not None

    @property
    def emission_tokens(self) -> torch.Tensor:
        """The tokens as indices into the last axis of the emission counts: ``slots`` (sparse
        layout) or the symbols themselves (dense)."""
        return self.slots if self.symbols is not None else self.tokens

    def emission_width(self, n_symbols: int) -> int:
        """Last axis of the per-sequence emission counts: W_b (sparse) or V (dense)."""
        return int(self.symbols.shape[1]) if self.symbols is not None else int(n_symbols)

    def select(self, idx) -> Bucket:
        """The sub-bucket of rows ``idx`` (LongTensor), with their layout."""
        return Bucket(
            self.index[idx],
            self.tokens[idx],
            self.lengths[idx],
            self.mask[idx],
            None if self.symbols is None else self.symbols[idx],
            None if self.slots is None else self.slots[idx],
            None if self.weights is None else self.weights[idx],
            None if self.start_keys is None else self.start_keys[idx],
        )

    @property
    def random_keys(self) -> torch.Tensor:
        """What each row's random starts are hashed from: ``start_keys``, else ``index``."""
        return self.index if self.start_keys is None else self.start_keys


def bucket_bounds(sorted_lengths, max_cells: int = 1 << 20, max_padding_ratio: float = 1.25) -> list:
    """Where :func:`make_buckets` cuts the length-sorted sequences: ``(start, stop)`` per bucket.

    Parameters
    ----------
    sorted_lengths : int array (M,), ascending
    max_cells, max_padding_ratio : as in :func:`make_buckets`

    Returns
    -------
    list of (int, int)
    """
    bounds = []
    start = 0
    n = len(sorted_lengths)
    while start < n:
        shortest = sorted_lengths[start]
        stop = start + 1
        while stop < n:
            longest = sorted_lengths[stop]
            if (stop + 1 - start) * longest > max_cells or longest > max_padding_ratio * shortest + 1:
                break
            stop += 1
        bounds.append((start, stop))
        start = stop
    return bounds


def bucket_cells(lengths, max_cells: int = 1 << 20) -> tuple[int, int, int]:
    """Padded cells (sequences x longest) of the largest bucket :func:`make_buckets` makes of
    sequences of these ``lengths``, of all its buckets together, and the most sequences in one
    bucket: what the memory estimates (:mod:`ldhmm.models.memory`) scale an E-step's
    per-position and per-sequence arrays by."""
    sorted_lengths = np.sort(np.asarray(lengths, dtype=np.int64), kind="stable")
    bounds = bucket_bounds(sorted_lengths, max_cells)
    cells = [(stop - start) * int(sorted_lengths[stop - 1]) for start, stop in bounds]
    most = max((stop - start for start, stop in bounds), default=0)
    return max(cells, default=0), int(sum(cells)), int(most)


def make_buckets(
    sequences: Sequence[np.ndarray],
    max_cells: int = 1 << 20,
    max_padding_ratio: float = 1.25,
    sparse: bool = False,
    n_symbols: int | None = None,
) -> list[Bucket]:
    """Sort sequences by length and cut them into padded buckets.

    A bucket closes when its padded size ``n_sequences * max_length`` would exceed
    ``max_cells`` or when its longest sequence would exceed ``max_padding_ratio`` times its
    shortest (plus one), so padding wastes at most about 25% of the work.

    Parameters
    ----------
    sequences : list of int64 arrays (validated)
    max_cells : int
        Upper bound on ``n_sequences * max_length`` for one bucket (memory of one E-step pass
        is a small multiple of ``max_cells * K``). A single sequence longer than this gets a
        bucket of its own.
    max_padding_ratio : float
    sparse : bool
        Give every bucket its per-sequence distinct ``symbols`` and ``slots`` (the sparse
        emission layout).
    n_symbols : int, optional
        V, for the sparse layout's scratch (default: the largest symbol + 1).

    Returns
    -------
    list of Bucket
    """
    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
    order = np.argsort(lengths, kind="stable")
    buckets: list[Bucket] = []
    for start, stop in bucket_bounds(lengths[order], max_cells, max_padding_ratio):
        idx = order[start:stop]
        width = int(lengths[idx].max())
        tokens = np.zeros((len(idx), width), dtype=np.int64)
        for row, i in enumerate(idx):
            tokens[row, : lengths[i]] = sequences[i]
        lens = torch.from_numpy(lengths[idx].copy())
        symbols = slots = None
        if sparse:
            symbols, slots = (torch.from_numpy(a) for a in local_symbols(tokens, lengths[idx], n_symbols))
        buckets.append(
            Bucket(
                index=torch.from_numpy(idx.copy()),
                tokens=torch.from_numpy(tokens),
                lengths=lens,
                mask=torch.arange(width)[None, :] < lens[:, None],
                symbols=symbols,
                slots=slots,
            )
        )
    return buckets
