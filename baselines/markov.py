"""A first-order Markov chain over the symbols: the no-hidden-state baseline of next-event prediction.

``p(x) = startprob[x_1] prod_n transmat[x_(n-1), x_n]`` with add-``pseudocount`` smoothed
frequencies of the first symbols and of the symbol bigrams of the training data. It is not
registered with the harness (it does not join ``--models all`` of the comparison tables); it is
the reference point of :meth:`predict_next_proba` beside the HMM and LDHMM.
"""

from __future__ import annotations

import numpy as np

from ..models.base import SequenceModel
from .next_symbol import NextSymbolRows

__all__ = ["MarkovChain"]


class MarkovChain(NextSymbolRows, SequenceModel):
    """First-order Markov chain over V symbols with add-pseudocount smoothing; exact score.

    Parameters
    ----------
    n_states : int >= 1
        Accepted for the harness's ``factory(n_states, n_symbols, seed)`` and ignored (the
        chain's states are the symbols).
    n_symbols : int, optional
        Vocabulary size V; default max training symbol + 1.
    pseudocount : float > 0
        Added to every count of first symbols and of transitions before normalizing
        (``pseudocount > 0`` keeps every held-out log-likelihood finite).
    seed : int
        Accepted for the harness; the fit is deterministic.

    Attributes
    ----------
    startprob_ : ndarray, shape (V,)
        ``(#{m: x_m1 = v} + pseudocount) / (M + V pseudocount)``.
    transmat_ : ndarray, shape (V, V)
        ``[u, v] = (#{u -> v} + pseudocount) / (#{u -> .} + V pseudocount)``.
    n_symbols_ : int
    """

    name = "MARKOV"
    score_kind = "exact"
    has_states = False

    def __init__(
        self, n_states: int = 1, n_symbols: int | None = None, pseudocount: float = 0.5, seed: int = 0
    ):
        super().__init__(n_states, seed)
        self.n_symbols = n_symbols
        if not np.isfinite(pseudocount) or pseudocount <= 0:
            raise ValueError(f"pseudocount must be a finite number > 0, got {pseudocount!r}")
        self.pseudocount = float(pseudocount)

    def _fit(self, sequences, n_symbols):
        V = n_symbols
        first = np.bincount([int(s[0]) for s in sequences], minlength=V).astype(np.float64)
        pairs = np.zeros((V, V))
        for s in sequences:
            np.add.at(pairs, (s[:-1], s[1:]), 1.0)
        first += self.pseudocount
        pairs += self.pseudocount
        self.startprob_ = first / first.sum()
        self.transmat_ = pairs / pairs.sum(1, keepdims=True)

    def _score_samples(self, sequences):
        log_start, log_trans = np.log(self.startprob_), np.log(self.transmat_)
        return np.array([log_start[s[0]] + log_trans[s[:-1], s[1:]].sum() for s in sequences])

    def _next_proba(self, seqs) -> np.ndarray:
        """``p(x_(n+1) = v | x_1..x_n) = transmat_[x_n, v]`` for each sequence."""
        return self.transmat_[[int(s[-1]) for s in seqs]].copy()
