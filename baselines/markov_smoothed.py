"""Markov chains over the symbols with smoothing chosen on the training data: MARKOV1, MARKOV3.

The no-hidden-state baselines of the comparison. An order-``L`` chain predicts each symbol
from the ``L`` symbols before it, padded with a begin-of-sequence marker ``BOS`` (so the
first symbols have contexts of their own and no separate start distribution is needed). The
estimate interpolates every order ``k = 0..L`` (hierarchical Dirichlet smoothing, MacKay &
Peto 1995)::

    p_(-1)(v)       = 1 / V
    p_k(v | h_k)    = (C(h_k v) + beta_k p_(k-1)(v | h_(k-1))) / (C(h_k) + beta_k)

where ``h_k`` is the last ``k`` symbols, ``C(h_k v)`` the training count of ``v`` after
``h_k`` and ``C(h_k)`` that of ``h_k`` as a context. A context never seen in training falls
back to the shorter one (``C = 0`` gives ``p_k = p_(k-1)``): a variable-order chain. With
``L = 1`` it is a first-order chain whose rows are Dirichlet-smoothed towards the unigram
frequencies (and those towards uniform).

The concentrations ``beta_0..beta_L`` are chosen on the training data alone, by exact
leave-one-sequence-out log-likelihood: each training sequence is scored by the chain of the
counts of all other training sequences (its own counts subtracted), which is the situation of
a held-out sequence; the sum is maximised over ``log beta`` by L-BFGS-B with its exact gradient, from every
beta = 1 (:func:`choose_concentrations`): deterministic, no seed. ``score_samples`` is the exact
log-likelihood ``sum_n log p_L(x_n | h_L)`` (conditioned on the length, like the HMM's).
The pure kernels live in :mod:`ldhmm.inference.interpolated_chain` (the contextual emissions
smooth with them too).
"""

from __future__ import annotations

import numpy as np

from ..inference import interpolated_chain
from ..inference.interpolated_chain import (
    CONCENTRATION_BOUNDS,  # noqa: F401 (re-exported)
    choose_concentrations,
    context_keys,
    interpolated_proba,
    leave_one_out_counts,
    log_likelihood_and_gradient,  # noqa: F401 (re-exported)
    lookup_counts,
)
from ..models.base import SequenceModel
from ..models.registry import register
from .next_symbol import NextSymbolRows

# the estimator, and the kernels it is built on (imported above, kept importable from here)
__all__ = ["SmoothedMarkovChain", *interpolated_chain.__all__]


# ------------------------------------------------------------------------ the estimator
class SmoothedMarkovChain(NextSymbolRows, SequenceModel):
    """An interpolated Markov chain of order ``order`` over V symbols; exact score.

    Parameters
    ----------
    n_states : int
        Accepted for the harness's ``factory(n_states, n_symbols, seed)`` and ignored: the
        chain has no hidden states (``has_states = False``: the harness fits it once per fold).
    n_symbols : int, optional
        Vocabulary size V; default max training symbol + 1.
    order : int >= 0
        The longest context (1: a first-order chain).
    concentrations : sequence of order + 1 floats > 0, optional
        beta_0..beta_order; None (default) chooses them on the training data by
        leave-one-sequence-out log-likelihood (the module docstring).
    seed : int
        Accepted for the harness; the fit is deterministic.

    Attributes
    ----------
    concentrations_ : ndarray, shape (order + 1,)
        The beta_k used.
    loo_log_likelihood_ : float
        The leave-one-sequence-out log-likelihood of the training data at ``concentrations_``
        (NaN when they were given).
    context_keys_, context_counts_, pair_keys_, pair_counts_ : list of ndarray, one per order
        The sorted keys (:func:`context_keys`; a pair is ``context * V + symbol``) and their
        training counts.
    n_symbols_ : int
    """

    name = "SMOOTHED-MARKOV"
    score_kind = "exact"
    has_states = False

    def __init__(self, n_states: int = 1, n_symbols=None, order: int = 1, concentrations=None, seed: int = 0):
        super().__init__(n_states, seed)
        self.n_symbols = n_symbols
        if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or not 0 <= order <= 8:
            raise ValueError(f"order must be an integer in 0..8, got {order!r}")
        self.order = int(order)
        if concentrations is not None:
            c = np.asarray(concentrations, dtype=np.float64).reshape(-1)
            if c.size != self.order + 1 or not np.all(np.isfinite(c)) or np.any(c <= 0):
                raise ValueError(
                    f"concentrations must be {self.order + 1} finite numbers > 0 (one per order "
                    f"0..{self.order}), got {concentrations!r}"
                )
            concentrations = tuple(float(x) for x in c)
        self.concentrations = concentrations

    def _keys(self, sequences, n_symbols):
        if float(n_symbols + 1) ** (self.order + 1) >= 2.0**62:
            raise ValueError(
                f"order {self.order} with {n_symbols} symbols: the contexts do not fit in 64-bit keys; "
                "use a lower order"
            )
        return context_keys(sequences, self.order, n_symbols)

    def _fit(self, sequences, n_symbols):
        keys = self._keys(sequences, n_symbols)
        symbols = np.concatenate(sequences)
        self.context_keys_, self.context_counts_, self.pair_keys_, self.pair_counts_ = [], [], [], []
        for k in range(self.order + 1):
            u, c = np.unique(keys[:, k], return_counts=True)
            self.context_keys_.append(u)
            self.context_counts_.append(c)
            u, c = np.unique(keys[:, k] * n_symbols + symbols, return_counts=True)
            self.pair_keys_.append(u)
            self.pair_counts_.append(c)
        if self.concentrations is not None:
            self.concentrations_ = np.array(self.concentrations, dtype=np.float64)
            self.loo_log_likelihood_ = float("nan")
            return
        sequence_of = np.repeat(np.arange(len(sequences)), [len(s) for s in sequences])
        pairs, contexts = leave_one_out_counts(keys, symbols, sequence_of, n_symbols)
        self.concentrations_, self.loo_log_likelihood_ = choose_concentrations(pairs, contexts, n_symbols)

    def _counts(self, keys, symbols):
        """``C(h_k v)`` and ``C(h_k)`` of the training data for the given contexts and symbols."""
        V = self.n_symbols_
        pairs = np.stack(
            [
                lookup_counts(self.pair_keys_[k], self.pair_counts_[k], keys[..., k] * V + symbols)
                for k in range(self.order + 1)
            ],
            axis=-1,
        )
        contexts = np.stack(
            [
                lookup_counts(self.context_keys_[k], self.context_counts_[k], keys[..., k])
                for k in range(self.order + 1)
            ],
            axis=-1,
        )
        return pairs, contexts

    def _score_samples(self, sequences):
        keys = self._keys(sequences, self.n_symbols_)
        pairs, contexts = self._counts(keys, np.concatenate(sequences))
        logp = np.log(interpolated_proba(pairs, contexts, self.concentrations_, self.n_symbols_))
        sequence_of = np.repeat(np.arange(len(sequences)), [len(s) for s in sequences])
        return np.bincount(sequence_of, weights=logp, minlength=len(sequences))

    def _next_proba(self, seqs) -> np.ndarray:
        """``p(x_(n+1) = v | x_1..x_n)`` for each sequence: the chain's row of its last ``order`` symbols."""
        V = self.n_symbols_
        # the context of the position after each sequence: the last row of the sequence + a dummy
        keys = self._keys([np.append(s, 0) for s in seqs], V)
        ends = np.cumsum([len(s) + 1 for s in seqs]) - 1
        last = np.repeat(keys[ends][:, None, :], V, axis=1)  # (M, V, L + 1)
        pairs, contexts = self._counts(last, np.arange(V)[None, :])
        return interpolated_proba(pairs, contexts, self.concentrations_, V)


register(SmoothedMarkovChain, name="MARKOV1", options={"order": 1}, em_settings=())
register(SmoothedMarkovChain, name="MARKOV3", options={"order": 3}, em_settings=())
