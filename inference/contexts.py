"""Emission contexts: which row of B emits each position, given the events before it.

A contextual emission model draws ``x_t`` from ``B[z_t, c_t, :]``, where the context ``c_t`` is
computed from the sequence alone (never from the hidden chain), so the chain's recursion is
unchanged and only the emission row of each position moves (docs/math.md, "Emission contexts").

The contexts of order ``n`` are the last ``n`` events before a position, with a begin marker
(symbol ``V``) before the first event: ``history_t = (x_(t-n), ..., x_(t-1))`` over the sequence
``BEGIN x_0 x_1 ...`` (so position 0 has the history ``(BEGIN)``; shorter histories at the start
of a sequence are those of a sequence that starts at BEGIN). An order-n context table keeps

* every order-1 context (the previous event, or BEGIN): ``V + 1`` rows, always, and
* each longer history (orders 2..n) seen at least ``min_count`` times in the training data,

and gives a position the row of the longest kept suffix of its history (backing off to
shorter contexts, as the interpolated Markov chains of :mod:`ldhmm.baselines.markov_smoothed`
do). Order 1 is ``emission_context="previous"``: C = V + 1 rows, row ``c`` for the previous
symbol ``c`` and row ``V`` for the beginning of a sequence.

:func:`backoff_pseudocounts` ties each row to its shorter context, as MacKay and Peto's
hierarchical Dirichlet language model does (1995): the pseudo-counts ``s m_parent(c)`` of a
row, with ``m`` the events after the parent context in the training data, smoothed the same
way down to the add-one unigram distribution. :func:`chain_pseudocounts` (``"chain"``) takes
the strengths and the parents from the interpolated Markov chain of the table's order (the
MARKOV baselines': one strength per order, chosen by leave-one-sequence-out likelihood), so
that one hidden state with its rows at the cap predicts as that chain does.

Pure functions over numpy arrays; the table is a small value object saved with the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .interpolated_chain import (
    choose_concentrations,
    context_keys,
    interpolated_proba,
    leave_one_out_counts,
    lookup_counts,
)

__all__ = [
    "EMISSION_CONTEXTS",
    "ContextTable",
    "check_emission_context",
    "context_order",
    "history_keys",
    "build_context_table",
    "context_ids",
    "next_context_rows",
    "context_labels",
    "backoff_pseudocounts",
    "chain_pseudocounts",
    "interpolated_pseudocounts",
    "smoothing_pseudocounts",
    "check_context_smoothing",
]

#: The named settings of ``emission_context=`` (an int n >= 1 is the order-n table).
EMISSION_CONTEXTS = ("previous",)

#: The largest order accepted (contexts are base-(V + 1) integers of at most 62 bits).
MAX_ORDER = 8


def check_emission_context(value):
    """``value`` as accepted by ``emission_context=``: None, ``"previous"`` or an int 1..8;
    a one-line ValueError otherwise."""
    if value is None or value in EMISSION_CONTEXTS:
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 1 <= value <= MAX_ORDER:
        return int(value)
    raise ValueError(
        f"emission_context must be None, 'previous' or an order 1..{MAX_ORDER} (the last n events), "
        f"got {value!r}"
    )


def context_order(value) -> int:
    """The order n of an ``emission_context`` setting (``"previous"`` is 1)."""
    value = check_emission_context(value)
    if value is None:
        raise ValueError("no emission context: emission_context is None")
    return 1 if value == "previous" else int(value)


@dataclass(frozen=True)
class ContextTable:
    """The kept contexts of one model.

    Attributes
    ----------
    order : int
        The longest history n.
    n_symbols : int
        V (the begin marker is symbol V).
    keys : list of int64 ndarray, one per order 1..n
        The kept histories of that order as base-(V + 1) integers (the most recent event the
        least significant digit), sorted; order 1 holds all V + 1.
    offsets : int64 ndarray (n + 1,)
        Row of the first context of each order: rows ``offsets[i - 1] .. offsets[i] - 1`` are
        the kept histories of order i.
    min_count : int
    """

    order: int
    n_symbols: int
    keys: tuple
    offsets: np.ndarray
    min_count: int

    @property
    def n_contexts(self) -> int:
        """C: the number of emission rows per hidden state."""
        return int(self.offsets[-1])

    def to_json(self) -> dict:
        return {
            "order": self.order,
            "min_count": self.min_count,
            "keys": [k.tolist() for k in self.keys],
        }

    @classmethod
    def from_json(cls, record: dict, n_symbols: int) -> ContextTable:
        """A table from :meth:`to_json`, checked (a one-line ValueError names what is wrong)."""
        try:
            order, min_count = int(record["order"]), int(record["min_count"])
            keys = tuple(np.asarray(k, dtype=np.int64).reshape(-1) for k in record["keys"])
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"emission contexts: not a context table ({err})") from None
        base = n_symbols + 1
        if not 1 <= order <= MAX_ORDER or len(keys) != order:
            raise ValueError(f"emission contexts: order {order} with {len(keys)} key lists")
        if not np.array_equal(keys[0], np.arange(base)):
            raise ValueError("emission contexts: the order-1 keys must be 0..V")
        for i, k in enumerate(keys, start=1):
            if k.size and (np.any(np.diff(k) <= 0) or k[0] < 0 or k[-1] >= base**i):
                raise ValueError(f"emission contexts: order-{i} keys not sorted, distinct and in range")
        return cls(order, n_symbols, keys, _offsets(keys), min_count)


def _offsets(keys) -> np.ndarray:
    return np.concatenate([[0], np.cumsum([k.size for k in keys])]).astype(np.int64)


def history_keys(sequences, order: int, n_symbols: int) -> np.ndarray:
    """The history of every position of the concatenated sequences as base-(V + 1) integers,
    int64 (N, order): column i - 1 the last i events (BEGIN = V before the first event; a
    history reaching further back than BEGIN stops at it: its higher digits are BEGIN too)."""
    base = n_symbols + 1
    if float(base) ** order >= 2.0**62:
        raise ValueError(
            f"emission context of order {order} with {n_symbols} symbols does not fit in 64 bits"
        )
    out = []
    for s in sequences:
        s = np.asarray(s, dtype=np.int64)
        padded = np.concatenate([np.full(order, n_symbols, dtype=np.int64), s[:-1]]) if s.size else s
        keys = np.zeros((s.size, order), dtype=np.int64)
        acc = np.zeros(s.size, dtype=np.int64)
        for i in range(order):
            # the (i + 1)-th most recent event of position t is padded[order + t - 1 - i]
            event = padded[order - 1 - i : order - 1 - i + s.size]
            acc = acc + event * base**i
            keys[:, i] = acc
        out.append(keys)
    return np.concatenate(out) if out else np.zeros((0, order), dtype=np.int64)


def build_context_table(sequences, order: int, n_symbols: int, min_count: int = 20) -> ContextTable:
    """The kept contexts of training ``sequences`` (see the module docstring)."""
    if min_count < 1:
        raise ValueError(f"min_count must be >= 1, got {min_count}")
    keys = history_keys(sequences, order, n_symbols)
    kept = [np.arange(n_symbols + 1, dtype=np.int64)]
    for i in range(1, order):
        values, counts = np.unique(keys[:, i], return_counts=True)
        kept.append(values[counts >= min_count].astype(np.int64))
    return ContextTable(order, n_symbols, tuple(kept), _offsets(kept), int(min_count))


def context_ids(sequences, table: ContextTable) -> list[np.ndarray]:
    """The emission row (0..C-1) of every position of each sequence: its longest kept history."""
    lengths = [len(s) for s in sequences]
    keys = history_keys(sequences, table.order, table.n_symbols)
    rows = keys[:, 0].copy()  # order 1: every history is kept, row = the previous event (or BEGIN)
    for i in range(1, table.order):
        kept = table.keys[i]
        if not kept.size:
            continue
        at = np.searchsorted(kept, keys[:, i]).clip(max=kept.size - 1)
        found = kept[at] == keys[:, i]
        rows = np.where(found, table.offsets[i] + at, rows)
    return np.split(rows, np.cumsum(lengths)[:-1]) if lengths else []


def next_context_rows(sequences, table: ContextTable) -> np.ndarray:
    """The emission row of the position after each sequence's last event (its history: the
    sequence's last events), int64 (M,): where a next-event prediction reads B."""
    return np.array([c[-1] for c in context_ids([np.append(s, 0) for s in sequences], table)], dtype=np.int64)


def context_labels(table: ContextTable, vocabulary=None) -> list[str]:
    """A name for every context row (C,): its history oldest event first, joined by ``" > "``,
    the beginning of a sequence as ``"BEGIN"`` (``vocabulary``: the V symbols' names; default
    their codes). Row ``c < V`` of order 1 is ``vocabulary[c]``, row ``V`` is ``"BEGIN"``."""
    V = table.n_symbols
    names = [str(v) for v in (vocabulary if vocabulary is not None else range(V))] + ["BEGIN"]
    if len(names) != V + 1:
        raise ValueError(f"context_labels: {len(names) - 1} symbol names for a table of {V} symbols")
    base = V + 1
    labels = []
    for order, keys in enumerate(table.keys, start=1):
        for key in keys.tolist():
            recent_first = [(key // base**j) % base for j in range(order)]
            labels.append(" > ".join(names[d] for d in reversed(recent_first)))
    return labels


def backoff_pseudocounts(sequences, table: ContextTable, strength: float) -> np.ndarray:
    """``strength`` pseudo-events per context row, spread as the events after its parent
    context: float64 (C, V), every entry positive (zeros where ``strength`` is 0).

    The parent of an order-1 row (the previous event, or BEGIN) is the unigram distribution
    ``u_v = (n_v + 1) / (N + V)``; the parent of a longer kept history its suffix one event
    shorter (kept too: a suffix is seen at least as often). A context's own distribution, as a
    parent, is MacKay and Peto's interpolation ``(n_cv + s m_parent(c), v) / (n_c + s)`` of the
    training events after it (every position whose history ends with it), so that a row's
    pseudo-counts are ``s m_parent(c)``: a fixed function of the training symbols (never of
    the hidden states). The interpolated chain's recursion with concentrations ``V, s, ..., s``
    (:func:`interpolated_pseudocounts`).

    Parameters
    ----------
    sequences : list of 1-D int arrays
        The training sequences (symbols 0..V-1).
    table : ContextTable
        Their context table (:func:`build_context_table`).
    strength : float >= 0
        ``s``: the pseudo-events of each row (one prior per hidden state and row).
    """
    if strength <= 0:
        return np.zeros((table.n_contexts, table.n_symbols))
    concentrations = np.array([float(table.n_symbols)] + [float(strength)] * table.order)
    return interpolated_pseudocounts(sequences, table, concentrations)


def chain_pseudocounts(sequences, table: ContextTable) -> tuple[np.ndarray, np.ndarray]:
    """Pseudo-counts of the context rows from the interpolated Markov chain of order
    ``table.order`` on the training ``sequences`` (:mod:`ldhmm.inference.interpolated_chain`),
    its concentrations ``beta_0..beta_n`` chosen by leave-one-sequence-out log-likelihood, as
    the MARKOV baselines choose theirs (:func:`interpolated_pseudocounts` with them).

    Returns
    -------
    (pseudo, concentrations) : float64 (C, V) and (n + 1,)
        In the limit of a row at the cap and one hidden state, the row's mean is the chain's
        ``p_i(. | h_i)``.
    """
    seqs = [np.asarray(s, dtype=np.int64) for s in sequences]
    V = table.n_symbols
    keys = context_keys(seqs, table.order, V)
    symbols = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int64)
    sequence_of = np.repeat(np.arange(len(seqs)), [s.size for s in seqs])
    betas, _ = choose_concentrations(*leave_one_out_counts(keys, symbols, sequence_of, V), V)
    return interpolated_pseudocounts(seqs, table, betas), betas


def interpolated_pseudocounts(sequences, table: ContextTable, concentrations) -> np.ndarray:
    """``beta_i p_(i-1)(. | h_(i-1))`` for every context row of order ``i`` (history ``h_i``),
    float64 (C, V): the interpolated chain's distribution after the history's last ``i - 1``
    events (:func:`ldhmm.inference.interpolated_chain.interpolated_proba`, over the training
    counts of ``sequences``), weighted by its concentration of order ``i``; ``concentrations``
    ``beta_0..beta_n`` (n = ``table.order``)."""
    V, order, base = table.n_symbols, table.order, table.n_symbols + 1
    seqs = [np.asarray(s, dtype=np.int64) for s in sequences]
    keys = context_keys(seqs, order, V)  # (T, order + 1): column k the last k events
    symbols = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int64)
    contexts = [np.unique(keys[:, k], return_counts=True) for k in range(order + 1)]
    pairs = [np.unique(keys[:, k] * V + symbols, return_counts=True) for k in range(order + 1)]
    betas = np.asarray(concentrations, dtype=np.float64)
    out = np.zeros((table.n_contexts, V))
    v = np.arange(V, dtype=np.int64)
    for i in range(1, order + 1):  # the rows of order i; their parents' orders are 0..i-1
        kept = table.keys[i - 1]
        if not kept.size:
            continue
        suffix = [np.broadcast_to((kept % base**k)[:, None], (kept.size, V)) for k in range(i)]
        pair_counts = np.stack([lookup_counts(*pairs[k], suffix[k] * V + v) for k in range(i)], axis=-1)
        context_counts = np.stack([lookup_counts(*contexts[k], suffix[k]) for k in range(i)], axis=-1)
        parent = interpolated_proba(pair_counts, context_counts, betas[:i], V)  # (R_i, V)
        out[table.offsets[i - 1] : table.offsets[i]] = betas[i] * parent
    return out


def check_context_smoothing(value):
    """``context_smoothing`` checked: ``"chain"`` or a finite number >= 0 (as a float); else a
    one-line ValueError."""
    if value == "chain":
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
        raise ValueError(f"context_smoothing must be 'chain' or a finite number >= 0, got {value!r}")
    return float(value)


def smoothing_pseudocounts(sequences, table: ContextTable, smoothing) -> np.ndarray | None:
    """The context rows' pseudo-counts (C, V) of a ``context_smoothing`` setting on the training
    ``sequences``: :func:`chain_pseudocounts` for ``"chain"``, :func:`backoff_pseudocounts`
    for a strength ``s > 0``, None for 0 (no smoothing)."""
    if smoothing == "chain":
        return chain_pseudocounts(sequences, table)[0]
    if smoothing <= 0:
        return None
    return backoff_pseudocounts(sequences, table, smoothing)
