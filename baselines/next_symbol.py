"""The next-symbol distribution of a baseline (HMM, the Markov chains): the sequences checked,
then the model's own rows (:class:`NextSymbolRows`)."""

from __future__ import annotations

import numpy as np

__all__ = ["NextSymbolRows"]


class NextSymbolRows:
    """Mixin of a :class:`~ldhmm.models.base.SequenceModel` whose :meth:`predict_next_proba` is
    its ``_next_proba(seqs) -> (M, V)`` of the checked sequences (each says how it gets them)."""

    def predict_next_proba(self, sequences) -> np.ndarray:
        """Predictive distribution of the next symbol of each sequence, ``p(x_(n+1) = v | x_1..x_n)``.

        Parameters
        ----------
        sequences : list of 1-D integer arrays, each with at least one symbol

        Returns
        -------
        np.ndarray, shape (M, V), float64, in the input order; rows sum to 1.
        """
        return self._next_proba(self._validate_for_score(sequences))
