"""One-line errors for arguments a user passes in a shape the API does not take (found by an
acceptance audit): a K range as a string, ``n_symbols`` beside ``beta``."""

from __future__ import annotations

import numpy as np
import pytest

from ldhmm import LDHMM

A_PI, A_A, BETA = [1.0, 2.0], [[5.0, 1.0], [1.0, 5.0]], [[4.0, 1.0, 1.0], [1.0, 1.0, 4.0]]


@pytest.mark.parametrize("states", ["2..3", "23", b"23"])
def test_fit_path_names_a_string_of_states(states):
    with pytest.raises(ValueError, match=r"sequence of integers .* got the string"):
        LDHMM.fit_path([[0, 1, 2, 1]], states, n_symbols=3)


def test_from_hyperparameters_takes_a_matching_n_symbols_and_names_a_wrong_one():
    model = LDHMM.from_hyperparameters(A_PI, A_A, BETA, n_symbols=3)
    assert model.n_symbols_ == 3
    np.testing.assert_allclose(model.beta_, BETA)
    with pytest.raises(ValueError, match=r"n_symbols=4 does not match beta's 3 columns"):
        LDHMM.from_hyperparameters(A_PI, A_A, BETA, n_symbols=4)
