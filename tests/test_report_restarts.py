"""The report draws every restart's ELBO history, also when the restarts ran different numbers
of EM iterations (the usual case with the default restarts)."""

from __future__ import annotations

import numpy as np

from ldhmm import LDHMM
from ldhmm.report_html import render_report
from ldhmm.report_svg import line_chart


def test_a_ragged_list_of_series_is_one_polyline_each():
    ragged = [np.array([-5.0, -4.0, -3.5]), np.array([-6.0, -4.5]), np.array([-7.0, -5.0, -4.2, -4.1])]
    assert line_chart(ragged, "t", "x", "y").count("<polyline") == 3
    assert line_chart(np.array([-5.0, -4.0, -3.5]), "t", "x", "y").count("<polyline") == 1
    assert line_chart([-5.0, -4.0], "t", "x", "y").count("<polyline") == 1
    assert "no history recorded" in line_chart([], "t", "x", "y")


def test_the_report_of_restarts_of_different_lengths_renders():
    emissions = [[4.0, 1.0, 1.0], [1.0, 1.0, 4.0]]
    truth = LDHMM.from_hyperparameters([1.0, 2.0], [[5.0, 1.0], [1.0, 5.0]], emissions)
    data = truth.sample(40, lengths=np.random.default_rng(0).integers(5, 20, 40), seed=1)
    model = LDHMM(2, seed=0, n_init=3, max_iter=40, effort="thorough").fit(data)
    lengths = {len(h) for h in model.restart_elbo_histories_}
    assert len(lengths) > 1  # the case this test is about: histories of different lengths
    page = render_report(model.describe(data), "restarts")
    assert page.count("<polyline") >= 3
