"""When does LDHMM pay? Held-out log p(x) per token of LDHMM-PF, HMM and the Markov chains on logs
of varying per-sequence heterogeneity and on the paper's data, with LDHMM-PF's learned priors.

The synthetic logs are drawn from one LDHMM (K = 3, V = 6) whose Dirichlet priors are the base
priors :data:`PI_PRIOR`, :data:`A_PRIOR`, :data:`B_PRIOR` times a scale ``c``: with a large
``c`` every sequence has nearly the same pi, A and B (one shared HMM); with a small ``c`` every
sequence has its own. Beside them: the per-sequence-favourites log of
:func:`ldhmm.experiments.datasets.click_log` and seeded samples of the paper's data sets
(Entree, MSNBC, splice; their labels unused).

Each log is one :func:`ldhmm.experiments.compare.compare` run (folds, K, restarts and
importance samples as given; its own ``OUT/<log>`` folder, so a rerun resumes), read back as:

* per token, over every held-out sequence of every fold: log p(x) (exact for HMM and the
  chains, importance-sampled for LDHMM-PF) and LDHMM-PF's bound; for the synthetic ``c=`` logs
  also the generating model's log p(x) on the whole log (importance-sampled; kept in the log's
  folder);
* LDHMM-PF's learned prior concentrations (from the fold fits the run saves): the total of
  each prior row (the Dirichlet's precision: how alike the sequences' rows are; a total of
  ``s`` lets a probability ``p`` of a sequence's row vary by about ``sqrt(p (1 - p) / (s + 1))``
  around the prior mean) and the share of entries at the M-step's box
  ``[MIN_CONCENTRATION, MAX_CONCENTRATION]``.

``python -m ldhmm.experiments.heterogeneity --out results/heterogeneity`` runs the study of
``experiments/README.md`` ("When does LDHMM pay?") and writes ``heterogeneity.csv`` and
``heterogeneity.md`` there.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from ..inference.ops.dirichlet import MAX_CONCENTRATION, MIN_CONCENTRATION
from ..models import LDHMM
from ..models.file_format import read_model_file
from .along_k import row_key
from .compare import compare
from .datasets import click_log
from .measures import LOG_PX, with_log_px
from .tasks import MODELS_DIR, atomic_write_text

__all__ = [
    "MODELS",
    "PI_PRIOR",
    "A_PRIOR",
    "B_PRIOR",
    "REAL_LOGS",
    "heterogeneous_log",
    "true_model",
    "truth_per_token",
    "study_logs",
    "prior_summary",
    "per_token",
    "fold_priors",
    "study_log",
    "heterogeneity",
    "markdown_table",
    "main",
]

MODELS = ("LDHMM-PF", "HMM", "MARKOV1", "MARKOV3")
#: The base priors of the synthetic logs (K = 3, V = 6): sticky rows of A, each state's emissions
#: peaked on one or two symbols. The logs scale all three by ``c``.
PI_PRIOR = np.ones(3)
A_PRIOR = np.array([[6.0, 1.0, 1.0], [1.0, 6.0, 1.0], [1.0, 1.0, 6.0]])
B_PRIOR = np.array(
    [[4.0, 1.0, 0.5, 0.5, 0.2, 0.2], [0.5, 4.0, 1.0, 0.2, 0.5, 0.2], [0.2, 0.5, 0.5, 1.0, 4.0, 1.0]]
)
REAL_LOGS = ("entree", "msnbc", "splice")
_GROUPS = {"pi": "alpha_pi", "A": "alpha_A", "B": "beta"}


def heterogeneous_log(scale: float, n_sequences: int, seed: int = 1, lengths=(20, 40)) -> list[np.ndarray]:
    """Sequences of the LDHMM with priors ``scale * (PI_PRIOR, A_PRIOR, B_PRIOR)``.

    Parameters
    ----------
    scale : float > 0
        ``c``: small, every sequence its own pi, A, B; large, all nearly one HMM.
    n_sequences : int
    seed : int
        Seeds the lengths and the draws.
    lengths : (int, int)
        Each sequence's length, uniform on this closed range.

    Returns
    -------
    list of int64 arrays, shapes (T_m,)
    """
    rng = np.random.default_rng(seed)
    sizes = rng.integers(lengths[0], lengths[1] + 1, n_sequences)
    return [
        np.asarray(x, dtype=np.int64) for x in true_model(scale).sample(n_sequences, lengths=sizes, seed=seed)
    ]


def true_model(scale: float) -> LDHMM:
    """The LDHMM that draws :func:`heterogeneous_log`'s sequences (priors scaled by ``scale``)."""
    return LDHMM.from_hyperparameters(scale * PI_PRIOR, scale * A_PRIOR, scale * B_PRIOR)


def truth_per_token(scale: float, sequences, n_samples: int, seed: int = 0) -> float:
    """The generating model's log p(x) per token of ``sequences`` (importance-sampled, ``n_samples``
    draws per sequence): what a model fitted to the log can at best reach, on average."""
    found = true_model(scale).log_marginal_is(sequences, n_samples=n_samples, seed=seed)
    return float(np.sum(found) / sum(len(x) for x in sequences))


def _saved_truth(folder: Path, scale: float, sequences, n_samples: int, seed: int) -> float:
    """:func:`truth_per_token`, kept in ``folder`` beside its compare run so that a rerun of the
    study reads it back (the file names everything the value depends on)."""
    digest = hashlib.sha256(np.concatenate([[len(x) for x in sequences], *sequences]).tobytes()).hexdigest()[
        :12
    ]
    path = folder / f"truth-c{scale:g}-S{n_samples}-seed{seed}-{digest}.json"
    if path.is_file():
        return float(json.loads(path.read_text())["log_px_per_token"])
    value = truth_per_token(scale, sequences, n_samples, seed)
    atomic_write_text(path, json.dumps({"log_px_per_token": value}))
    return value


def study_logs(
    scales: Iterable[float],
    n_sequences: int,
    seed: int = 1,
    real: Iterable[str] = REAL_LOGS,
    favourites: bool = True,
):
    """The study's logs, in table order: ``{name: data}`` where data is a list of sequences (the
    synthetic logs: ``c=<scale>`` and, with ``favourites``, ``favourites``, V = 30) or a data
    set name for :func:`compare` (sampled there to ``n_sequences``)."""
    logs: dict = {f"c={c:g}": heterogeneous_log(float(c), n_sequences, seed) for c in scales}
    if favourites:
        logs["favourites"] = click_log(n_sequences, 30, seed=seed, lengths="uniform:20:40")
    logs.update({name: name for name in real})
    return logs


def prior_summary(prior: dict) -> dict:
    """How concentrated LDHMM's learned priors are.

    Parameters
    ----------
    prior : dict
        ``"pi"`` shape (K,), ``"A"`` shape (K, K), ``"B"`` shape (K, V): Dirichlet concentrations
        (tensors or arrays; rows of A and B are the priors of the rows).

    Returns
    -------
    dict
        For each group g of pi, A, B: ``g_total``, the median over rows of a row's total
        concentration, and ``g_at_max`` / ``g_at_min``, the shares of its entries within 0.1% of
        ``MAX_CONCENTRATION`` (that probability the same in every sequence) and of
        ``MIN_CONCENTRATION`` (that probability near 0 in every sequence).
    """
    out = {}
    for g in _GROUPS:
        a = np.atleast_2d(np.asarray(prior[g], dtype=np.float64))
        out[f"{g}_total"] = float(np.median(a.sum(axis=1)))
        out[f"{g}_at_max"] = float(np.mean(a >= MAX_CONCENTRATION * 0.999))
        out[f"{g}_at_min"] = float(np.mean(a <= MIN_CONCENTRATION * 1.001))
    return out


def per_token(folds: pd.DataFrame) -> pd.DataFrame:
    """Per model: held-out log p(x) and the model's own score per token, over every fold.

    Parameters
    ----------
    folds : DataFrame
        ``compare``'s ``folds.csv`` rows of one K (and the chains' rows).

    Returns
    -------
    DataFrame indexed by model: ``log_px_per_token`` (sum over folds of log p(x) / held-out
    tokens; NaN where a bound has no estimate), ``score_per_token`` (the same with the model's
    own held-out score: LDHMM-PF's bound), ``score_kind``.
    """
    d = with_log_px(folds)
    sums = d.groupby("model")[[LOG_PX, "heldout_elbo", "n_test_tokens"]].sum(min_count=1)
    return pd.DataFrame(
        {
            "log_px_per_token": sums[LOG_PX] / sums["n_test_tokens"],
            "score_per_token": sums["heldout_elbo"] / sums["n_test_tokens"],
            "score_kind": d.groupby("model")["score_kind"].first(),
        }
    )


def fold_priors(out, K: int, folds: int, model: str = "LDHMM-PF") -> pd.DataFrame:
    """:func:`prior_summary` of every fold's saved fit of ``model`` at ``K`` in a compare run's
    ``out`` folder (one row per fold found)."""
    rows = []
    for fold in range(folds):
        for path in sorted((Path(out) / MODELS_DIR).glob(f"{row_key(model, K, fold)}.*.json")):
            fitted = read_model_file(path, LDHMM)
            prior = {g: fitted.params_.prior[g].detach().cpu().numpy() for g in _GROUPS}
            rows.append({"fold": fold, **prior_summary(prior)})
    return pd.DataFrame(rows)


def study_log(name: str, data, out, *, K: int, folds: int, quiet: bool = True, **options) -> dict:
    """One log's row of the study: :func:`compare` of :data:`MODELS` at ``K`` in ``out/name``.

    Returns
    -------
    dict
        ``log``, ``data`` (compare's sentence naming the database), ``sequences``, ``tokens``,
        ``<model>`` (log p(x) per token) for every model, ``LDHMM-PF bound`` (per token),
        ``best chain``, ``margin`` (LDHMM-PF's log p(x) minus the best of the others, per
        token), the median over folds of :func:`prior_summary`'s totals and the mean over folds
        of its shares at the caps, and ``seconds`` (the run's wall time; a resumed run's is the
        time of the rest).
    """
    start = time.perf_counter()
    result = compare(
        list(MODELS), data=data, states=[K], folds=folds, out=Path(out) / name, quiet=quiet, **options
    )
    seconds = time.perf_counter() - start
    f = result.folds[result.folds["K"].isna() | (result.folds["K"] == K)]
    table = per_token(f)
    px = table["log_px_per_token"]
    row = {
        "log": name,
        "data": result.data,
        "sequences": int(f.groupby("model")["n_test"].sum().max()),
        "tokens": int(f.groupby("model")["n_test_tokens"].sum().max()),
        **{m: float(px.get(m, np.nan)) for m in MODELS},
        "LDHMM-PF bound": float(table["score_per_token"].get("LDHMM-PF", np.nan)),
    }
    chains = [m for m in ("MARKOV1", "MARKOV3") if m in px]
    row["best chain"] = max(chains, key=lambda m: px[m]) if chains else ""
    row["margin"] = float(px["LDHMM-PF"] - px.drop("LDHMM-PF").max())
    priors = fold_priors(Path(out) / name, K, folds)
    for column in priors.columns.drop("fold", errors="ignore"):
        row[column] = float(priors[column].median() if column.endswith("_total") else priors[column].mean())
    row["seconds"] = seconds
    return row


def heterogeneity(
    out,
    scales=(0.1, 0.3, 1.0, 3.0, 10.0, 30.0),
    real: Iterable[str] = REAL_LOGS,
    n_sequences: int = 300,
    K: int = 3,
    folds: int = 3,
    restarts: int = 1,
    is_samples: int = 50,
    seed: int = 0,
    data_seed: int = 1,
    max_iter: int | None = None,
    data_dir=None,
    jobs: int = 1,
    quiet: bool = True,
    favourites: bool = True,
) -> pd.DataFrame:
    """The study: :func:`study_log` of every log of :func:`study_logs` (and for the synthetic
    ``c=`` logs :func:`truth_per_token` on the whole log); writes
    ``out/heterogeneity.csv`` and ``out/heterogeneity.md`` (rewritten after every log) and
    returns the table (one row per log)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    options = dict(
        restarts=restarts, is_samples=is_samples, seed=seed, max_iter=max_iter, jobs=jobs, data_dir=data_dir
    )
    for name, data in study_logs(scales, n_sequences, data_seed, real, favourites).items():
        # the real data sets are sampled by compare; the synthetic ones are drawn at this size
        sample = n_sequences if isinstance(data, str) else None
        row = study_log(name, data, out, K=K, folds=folds, quiet=quiet, n_sequences=sample, **options)
        scale = name.removeprefix("c=")
        row["truth"] = (
            _saved_truth(out / name, float(scale), data, is_samples, seed) if scale != name else np.nan
        )
        rows.append(row)
        table = pd.DataFrame(rows)
        table.to_csv(out / "heterogeneity.csv", index=False)
        (out / "heterogeneity.md").write_text(markdown_table(table))
        if not quiet:
            print(markdown_table(table.tail(1)).splitlines()[-1], flush=True)
    return pd.DataFrame(rows)


def markdown_table(table: pd.DataFrame) -> str:
    """The study's table: log p(x) per token of each model (the best in bold), of the generating
    model where there is one (``truth``: the synthetic ``c=`` logs), LDHMM-PF's bound,
    its margin over the best other model, its learned prior totals (pi / median row of A /
    median row of B), the shares of their entries at the upper and lower cap (:func:`prior_summary`)
    and the run's seconds."""
    lines = [
        "| log | tokens | LDHMM-PF (IS) | HMM | MARKOV1 | MARKOV3 | truth (IS) | LDHMM-PF bound | margin "
        "| prior totals pi / A / B | at max, at min: pi / A / B | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in table.iterrows():
        values = {m: r[m] for m in MODELS}
        best = max(values, key=lambda m: -np.inf if np.isnan(values[m]) else values[m])
        cells = [f"**{v:.4f}**" if m == best else f"{v:.4f}" for m, v in values.items()]
        totals = " / ".join(f"{r.get(f'{g}_total', np.nan):.3g}" for g in _GROUPS)
        caps = " / ".join(
            f"{r.get(f'{g}_at_max', np.nan):.2f}, {r.get(f'{g}_at_min', np.nan):.2f}" for g in _GROUPS
        )
        lines.append(
            f"| {r['log']} | {int(r['tokens'])} | {' | '.join(cells)} | {r.get('truth', np.nan):.4f} "
            f"| {r['LDHMM-PF bound']:.4f} "
            f"| {r['margin']:+.4f} | {totals} | {caps} | {r['seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m ldhmm.experiments.heterogeneity", description=__doc__.split("\n")[0]
    )
    p.add_argument("--out", required=True, help="output folder (one compare run per log under it)")
    p.add_argument(
        "--scales", type=float, nargs="*", default=[0.1, 0.3, 1.0, 3.0, 10.0, 30.0], help="values of c"
    )
    p.add_argument("--real", nargs="*", default=list(REAL_LOGS), choices=list(REAL_LOGS), help="data sets")
    p.add_argument("--n-sequences", type=int, default=300, help="sequences per log (default 300)")
    p.add_argument("--states", type=int, default=3, help="K (default 3)")
    p.add_argument("--folds", type=int, default=3, help="cross-validation folds (default 3)")
    p.add_argument("--restarts", type=int, default=1, help="restarts of LDHMM-PF and HMM (default 1)")
    p.add_argument("--is-samples", type=int, default=50, help="importance samples per sequence (default 50)")
    p.add_argument("--seed", type=int, default=0, help="seed of folds, fits and sampling (default 0)")
    p.add_argument("--data-seed", type=int, default=1, help="seed of the synthetic logs (default 1)")
    p.add_argument("--data-dir", default=None, help="the data sets' folder (default $LDHMM_DATA)")
    p.add_argument("--no-favourites", action="store_true", help="leave out the favourites log")
    p.add_argument("--jobs", type=int, default=1, help="worker processes per compare run (default 1)")
    a = p.parse_args(argv)
    try:
        table = heterogeneity(
            a.out, a.scales, a.real, a.n_sequences, a.states, a.folds, a.restarts, a.is_samples, a.seed,
            a.data_seed, data_dir=a.data_dir, jobs=a.jobs, quiet=False, favourites=not a.no_favourites,
        )  # fmt: skip
    except (ValueError, OSError) as error:  # a locked or mismatched run folder, missing data: one line
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(markdown_table(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
