"""``experiments/elbo_vs_k.py``: which K's ELBO falls below the best of the smaller ones."""

from __future__ import annotations

from ldhmm.experiments import elbo_vs_k


def test_falls_names_each_K_below_the_best_of_the_smaller_ones():
    rows = [
        {"K": 2, "guide": "pf", "elbo": -1.0},
        {"K": 3, "guide": "pf", "elbo": -1.2},
        {"K": 4, "guide": "pf", "elbo": -0.9},
        {"K": 5, "guide": "pf", "elbo": -0.95},
        {"K": 2, "guide": "ff", "elbo": -2.0},
    ]
    fell = elbo_vs_k.falls(rows, "pf")
    assert [K for K, _ in fell] == [3, 5]
    assert abs(fell[0][1] - 0.2) < 1e-12 and abs(fell[1][1] - 0.05) < 1e-12
    assert elbo_vs_k.falls(rows, "pf", slack=0.1) == [(3, fell[0][1])]
    assert elbo_vs_k.falls(rows, "ff") == []
