"""The panels of ``loglik_vs_K.png`` are titled by their measure, not by the last model's legend."""

from __future__ import annotations

import numpy as np

import ldhmm
import ldhmm.experiments.compare as compare_module


def test_each_panel_is_titled_by_its_measure(tmp_path, monkeypatch):
    figures = []
    saved = compare_module.atomic_savefig
    monkeypatch.setattr(
        compare_module, "atomic_savefig", lambda fig, *a, **k: (figures.append(fig), saved(fig, *a, **k))
    )
    rng = np.random.default_rng(0)
    data = [rng.integers(0, 3, size=int(n)) for n in rng.integers(4, 12, size=24)]
    models = ["LDHMM-PF", "HMM", "MARKOV1"]
    ldhmm.compare(
        models,
        data,
        states=[2],
        folds=2,
        restarts=1,
        max_iter=5,
        is_samples=5,
        out=tmp_path / "run",
        quiet=True,
    )
    titles = [ax.get_title() for ax in figures[-1].axes]
    assert titles[0].endswith("held-out score (kind and bound family in the legend)")
    assert titles[1].endswith(compare_module.LOG_PX_LABEL)
    assert not any("MARKOV1" in t for t in titles)
