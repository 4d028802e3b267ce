"""The cross-check table of the SVI route against the closed form (experiments/svi_cross_check.py),
from fold rows as ``ldhmm.compare`` writes them: paired by log p(x), checked against scipy."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from scipy.stats import ttest_rel

from ldhmm.experiments.svi_cross_check import CLOSED_FORM, ROUTE, finished_tasks, log_px_table, markdown


def _rows(seed=0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for fold in range(4):
        base = -700.0 + 10 * rng.standard_normal()
        for model, family, shift in (
            (ROUTE, "z-summed, Dirichlet mean field", 1.5),
            (CLOSED_FORM, "PF", 0.0),
        ):
            is_value = base + shift + rng.standard_normal()
            rows.append(
                {
                    "model": model,
                    "K": 2,
                    "fold": fold,
                    "score_kind": "lower_bound",
                    "score_family": family,
                    **{f"heldout_elbo{s}": (is_value - 5.0) / d for s, d in (("", 1), ("_per_seq", 40))},
                    **{f"heldout_is{s}": is_value / d for s, d in (("", 1), ("_per_seq", 40))},
                    "heldout_elbo_per_token": (is_value - 5.0) / 1000,
                    "heldout_is_per_token": is_value / 1000,
                    "is_std_error": 0.1 * (fold + 1),
                    "n_test": 40,
                    "n_test_tokens": 1000,
                }
            )
    return rows


def test_table_pairs_the_folds_by_log_px(tmp_path):
    rows = _rows()
    folds = pd.DataFrame(rows)
    table = log_px_table(folds)
    route = folds[folds["model"] == ROUTE].sort_values("fold")["heldout_is"].to_numpy()
    closed = folds[folds["model"] == CLOSED_FORM].sort_values("fold")["heldout_is"].to_numpy()
    row = table.loc[2]
    assert row["paired folds"] == 4 and row[f"{ROUTE} folds"] == 4
    assert row["difference"] == round(float(np.mean(route - closed)), 2)
    assert row["p"] == float(f"{ttest_rel(route, closed).pvalue:.2g}")
    assert row[f"{ROUTE} log p(x)"] == f"{route.mean():.2f} ± {route.std(ddof=1):.2f}"
    assert row[f"{CLOSED_FORM} IS s.e."] == 0.25
    assert markdown(table).splitlines()[2].startswith("| 2 | 4 | ")
    # a run still going: the finished tasks alone, one fold of the route missing
    (tmp_path / "tasks").mkdir()
    for r in rows[:-2] + rows[-1:]:
        path = tmp_path / "tasks" / f"{r['model']}__K2__fold{r['fold']}.json"
        path.write_text(json.dumps({**r, "path_states": [2]}))
    partial = log_px_table(finished_tasks(tmp_path)).loc[2]
    assert partial[f"{ROUTE} folds"] == 3 and partial[f"{CLOSED_FORM} folds"] == 4
    assert partial["paired folds"] == 3
    assert partial["difference"] == round(float(np.mean(route[:3] - closed[:3])), 2)
