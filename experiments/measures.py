"""What a held-out score is, and which measure compares a set of models.

A held-out score (``heldout_elbo`` of a result row) is one of three kinds
(:data:`ldhmm.models.base.SCORE_KINDS`): the exact log-likelihood, an estimate of it, or a
variational lower bound. A lower bound also belongs to a *family* (``score_family``: the
variational family it is the bound of, e.g. ``"PF"``, ``"FF"``, the SVI route's
``"z-summed, Dirichlet mean field"``): two bounds of one family differ by gaps of the same
construction, two bounds of different families by gaps that have nothing to do with the
models, so a bound is compared only with bounds of its own family.

:func:`comparison_measure` is the one rule the summaries, the t-tests and the "best model"
lines use: the models' own held-out score where all of them are of one kind and family, else
``log p(x)`` (:data:`LOG_PX`: the exact log-likelihood where a model has one, else its
importance-sampled estimate ``heldout_is``); a bound without an estimate of ``log p(x)`` is
then not ranked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = [
    "LOG_PX",
    "LOG_PX_LABEL",
    "LOG_PX_MEASURE",
    "Measure",
    "score_family_of",
    "score_label",
    "row_labels",
    "with_log_px",
    "comparison_measure",
]

#: The column :func:`with_log_px` adds: ``log p(x)`` per row (NaN where a bound has no estimate),
#: with ``_per_seq`` and ``_per_token`` twins.
LOG_PX = "log_px"
#: How the summaries name :data:`LOG_PX`.
LOG_PX_LABEL = "log p(x) (exact where there is one, importance-sampled otherwise)"

_KIND_WORDS = {"exact": "exact log-lik", "estimate": "estimate of log-lik", "lower_bound": "lower bound"}


@dataclass(frozen=True)
class Measure:
    """The measure that compares some models.

    Attributes
    ----------
    column : str
        ``"heldout_elbo"`` (the models' own scores, all of one kind and family) or :data:`LOG_PX`.
    label : str
        What the numbers are, for tables and sentences.
    note : str
        Why this measure (one clause, for the summary).
    """

    column: str
    label: str
    note: str

    @property
    def by_bound(self) -> bool:
        """Whether the measure compares lower bounds (of one family)."""
        return self.column == "heldout_elbo" and self.label.startswith("lower bound")


#: The measure across kinds and families.
LOG_PX_MEASURE = Measure(
    LOG_PX,
    "log p(x)",
    "the held-out scores are of different kinds or bound families, which are not compared with each other",
)


def score_family_of(model) -> str:
    """What a result row records as ``score_family``: a bound's family (the model's
    ``score_family``, ``""`` where it declares none), ``""`` for an exact score or an estimate."""
    if getattr(model, "score_kind", None) != "lower_bound":
        return ""
    return str(getattr(model, "score_family", "") or "")


def score_label(kind, family="") -> str:
    """The label of a held-out score: ``"exact log-lik"``, ``"lower bound (PF family)"``, ...

    A bound with no family (a result file written before families were recorded) is
    ``"lower bound (family unknown)"``.
    """
    kind = "" if kind is None or (isinstance(kind, float) and np.isnan(kind)) else str(kind)
    words = _KIND_WORDS.get(kind, kind or "unknown kind")
    if kind != "lower_bound":
        return words
    family = _family_text(family)
    return f"{words} ({family} family)" if family else f"{words} (family unknown)"


def _family_text(family) -> str:
    if family is None or (isinstance(family, float) and np.isnan(family)):
        return ""
    return str(family)


def _kind_family(df: pd.DataFrame) -> pd.Series:
    """``(kind, family)`` of every row; a bound with an unknown family is its model's own."""
    family = df["score_family"] if "score_family" in df else pd.Series("", index=df.index)
    pairs = []
    for model, kind, fam in zip(df["model"], df["score_kind"], family):
        fam = _family_text(fam) if kind == "lower_bound" else ""
        if kind == "lower_bound" and not fam:
            fam = f"unknown ({model})"  # compared with no other model's bound
        pairs.append((str(kind), fam))
    return pd.Series(pairs, index=df.index, dtype=object)


def row_labels(df: pd.DataFrame) -> pd.Series:
    """:func:`score_label` of every row of a result table (columns ``score_kind``, ``score_family``)."""
    family = df["score_family"] if "score_family" in df else pd.Series("", index=df.index)
    return pd.Series([score_label(k, f) for k, f in zip(df["score_kind"], family)], index=df.index)


def with_log_px(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of a result table with :data:`LOG_PX` (and ``log_px_kind``): ``heldout_elbo``
    where it is the exact log-likelihood or an estimate of it, else ``heldout_is``."""
    out = df.copy()
    direct = out["score_kind"].isin(["exact", "estimate"]).to_numpy()
    is_values = out["heldout_is"].to_numpy(float)
    for suffix in ("", "_per_seq", "_per_token"):
        own = out[f"heldout_elbo{suffix}"].to_numpy(float)
        out[LOG_PX + suffix] = np.where(direct, own, out[f"heldout_is{suffix}"].to_numpy(float))
    out["log_px_kind"] = np.where(
        direct,
        out["score_kind"].astype(str),
        np.where(np.isfinite(is_values), "importance-sampled", ""),
    )
    return out


def comparison_measure(df: pd.DataFrame, models) -> Measure:
    """The measure that compares ``models`` (rows of ``df`` whose ``model`` is one of them).

    Their own held-out score where every row is of one kind and, for bounds, one family;
    otherwise :data:`LOG_PX`: bounds of different families, or a bound beside an exact
    log-likelihood, are not compared.
    """
    rows = df[df["model"].isin(list(models))]
    kinds = set(_kind_family(rows)) if len(rows) else set()
    if len(kinds) == 1:
        kind, family = next(iter(kinds))
        if kind == "lower_bound":
            note = f"every score here is a bound of the {family} family"
            return Measure("heldout_elbo", score_label(kind, family), note)
        return Measure("heldout_elbo", score_label(kind), f"every score here is an {score_label(kind)}")
    return LOG_PX_MEASURE
