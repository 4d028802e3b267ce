"""What a fitted contextual LDHMM says, as tables: ``ContextualLDHMM.describe`` and its report.

The tables of :class:`ldhmm.models.description.ModelDescription`, read through the contexts. A
state's emission distribution is the mean of its context rows weighted by each context's share
of the training events (``context_counts_``): ``B_k = sum_c w_c E[B[k, c]]``, so that the states
are named and compared as in LDHMM, and its spread the weighted root mean square of the rows'
standard deviations. What the contexts add is one more table, ``contexts``: for the most
frequent contexts, what each state emits after them, and how alike the users' rows are (the
row's concentration). With data, a user's emission means are its posterior rows weighted the
same way (the rows it never used keep the prior's means).

The math is in small pure functions of arrays;
:func:`ldhmm.models.description.assemble_description` builds the tables.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..inference.contexts import context_labels
from ..inference.sharing import GROUPS
from .description import (
    TOP_EVENTS,
    ModelDescription,
    assemble_description,
    dirichlet_mean,
    dirichlet_std,
    package_version,
    top_events,
    training_rows,
    vocabulary_names,
)
from .file_format import stop_report

__all__ = [
    "TOP_CONTEXTS",
    "context_weights",
    "state_emissions",
    "user_emission_means",
    "contexts_table",
    "describe_contextual",
]

#: The most frequent contexts shown per state in the contexts table.
TOP_CONTEXTS = 8


def context_weights(counts, n_contexts: int) -> np.ndarray:
    """Each context row's share of the training events, (C,), summing to 1: ``counts`` (C,) the
    training positions per row (uniform where None or all zero: a model file without them)."""
    if counts is None:
        return np.full(n_contexts, 1.0 / n_contexts)
    counts = np.asarray(counts, dtype=np.float64)
    total = counts.sum()
    return counts / total if total > 0 else np.full(n_contexts, 1.0 / n_contexts)


def state_emissions(beta: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The states' emission means ``sum_c w_c E[B[k, c]]`` and spreads (the weighted root mean
    square of the rows' standard deviations), each (K, V), from the priors ``beta`` (K, C, V)."""
    mean = np.einsum("c,kcv->kv", weights, dirichlet_mean(beta))
    spread = np.sqrt(np.einsum("c,kcv->kv", weights, dirichlet_std(beta) ** 2))
    return mean, spread


def user_emission_means(beta: np.ndarray, weights: np.ndarray, contexts, symbols, counts) -> np.ndarray:
    """One user's emission means ``sum_c w_c E_q[B_m[k, c]]``, (K, V), from its pairs' context
    rows and symbols (P,) and expected counts (K, P) (``q(B_m[k, c]) = Dir(beta[k, c] + n_m[k, c])``;
    the rows it never used are the prior's)."""
    prior_mean = dirichlet_mean(beta)
    used, slot = np.unique(np.asarray(contexts, dtype=np.int64), return_inverse=True)
    rows = beta[:, used, :].copy()  # (K, U, V)
    np.add.at(rows, (slice(None), slot.reshape(-1), np.asarray(symbols, dtype=np.int64)), counts)
    change = dirichlet_mean(rows) - prior_mean[:, used, :]
    return np.einsum("c,kcv->kv", weights, prior_mean) + np.einsum("u,kuv->kv", weights[used], change)


def contexts_table(
    means, concentrations, weights, labels, names, vocabulary, n_contexts: int = TOP_CONTEXTS
) -> pd.DataFrame:
    """One row per (state, context) for the ``n_contexts`` most frequent contexts: ``state``,
    ``state_name``, ``context`` (its label), ``share`` (of the training events), the state's
    most likely ``next_events`` after it (``means`` (K, C, V): the rows' probabilities) and the
    row's ``concentration`` (``concentrations`` (K, C): ``sum_v beta[k, c, v]``; the column is
    left out for point estimates, None)."""
    order = np.argsort(-np.asarray(weights), kind="stable")[:n_contexts]
    rows = []
    for k, name in enumerate(names):
        tops = top_events(means[k][order], TOP_EVENTS)
        for c, top in zip(order.tolist(), tops):
            rows.append(
                {
                    "state": k,
                    "state_name": name,
                    "context": labels[c],
                    "share": float(weights[c]),
                    "next_events": ", ".join(f"{vocabulary[v]} ({means[k, c, v]:.2f})" for v in top),
                    "concentration": None if concentrations is None else float(concentrations[k, c]),
                }
            )
    columns = ["state", "state_name", "context", "share", "next_events", "concentration"]
    return pd.DataFrame(rows, columns=columns[: 5 if concentrations is None else 6])


def _user_posteriors(model, sequences):
    """The users' posterior means by group (B: :func:`user_emission_means`; (M, 0) for point
    estimates: nothing per user), occupancy, bounds (the exact log p(x) for point estimates)."""
    post = model.posterior(sequences)
    occupancy = np.stack([np.asarray(m, dtype=np.float64).mean(axis=0) for m in post["state_marginals"]])
    if not hasattr(model, "beta_"):
        means = dict.fromkeys(GROUPS, np.zeros((len(sequences), 0)))
        return means, occupancy, np.asarray(post["elbo"], dtype=np.float64)
    weights = context_weights(model.context_counts_, model.context_table_.n_contexts)
    none = np.zeros((len(sequences), 0))  # a group the database shares: nothing per user
    means = {g: dirichlet_mean(post[f"g_{g}"]) if f"g_{g}" in post else none for g in ("pi", "A")}
    means["B"] = (
        np.stack(
            [
                user_emission_means(model.beta_, weights, c, v, n)
                for c, v, n in zip(post["B_contexts"], post["B_symbols"], post["B_counts"])
            ]
        )
        if "B_counts" in post
        else none
    )
    return means, occupancy, np.asarray(post["elbo"], dtype=np.float64)


def _levels(model, weights: np.ndarray) -> tuple[dict, np.ndarray, np.ndarray | None]:
    """A ContextualLDHMM's database level by group ((mean, spread); B's weighted by ``weights``),
    and B's rows (K, C, V) with their concentrations (K, C) for the contexts table: a sequence
    group's prior, a shared group's ``q(theta)``, a point group's probabilities (spread 0, no
    concentration)."""
    held = {"pi": model.alpha_pi_, "A": model.alpha_A_, "B": model.beta_}
    held.update(getattr(model, "shared_posterior_", {}))
    point = getattr(model, "point_probabilities_", {})
    levels = {}
    for g in GROUPS:
        if g in point:
            mean = point[g] if g != "B" else np.einsum("c,kcv->kv", weights, point[g])
            levels[g] = (mean, np.zeros_like(mean))
        elif g == "B":
            levels[g] = state_emissions(held[g], weights)
        else:
            levels[g] = (dirichlet_mean(held[g]), dirichlet_std(held[g]))
    if "B" in point:
        return levels, point["B"], None
    return levels, dirichlet_mean(held["B"]), held["B"].sum(-1)


def _fit_rows(model) -> dict:
    """The summary's rows of the fit: the family, sharing, iterations and final objective."""
    if not hasattr(model, "beta_"):  # point estimates (Baum-Welch, MAP)
        history = model.objective_history_
        return {
            "guide": "none: point estimates (Baum-Welch), the exact log p(x)",
            "sharing (pi, A, B)": ", ".join("point" for _ in GROUPS),
            "Baum-Welch iterations": len(history),
            "final training objective (log p(x) + log prior)": f"{history[-1]:.6g}",
        }
    sharing = model.parameter_sharing
    learned = "learned" if sharing.learn_prior else f"fixed at {model.prior_concentration:g}"
    return {
        "guide": model.guide,
        "sharing (pi, A, B)": ", ".join(sharing.kind(g) for g in GROUPS) + f" (sequence priors {learned})",
        "EM iterations": len(model.elbo_history_),
        "final training ELBO (nats)": f"{model.elbo_:.6g}",
        "final training objective (ELBO + log hyperprior)": f"{model.elbo_history_[-1]:.6g}",
    }


def _summary_rows(model, extra: dict) -> pd.DataFrame:
    table = model.context_table_
    rows = {
        "model": type(model).__name__,
        "K (states)": model.n_states,
        "V (events)": model.n_symbols_,
        "emission context": f"{model.emission_context!r} (order {table.order}: "
        f"{table.n_contexts} context rows)",
        "min context count": model.min_context_count,
        "context smoothing": repr(model.context_smoothing),
        "restarts (n_init)": model.n_init,
        **_fit_rows(model),
        "stopped because": stop_report(model) or "not recorded in the model file",
        "context shares": "from the training data"
        if model.context_counts_ is not None
        else "not recorded in the model file (written by an earlier ldhmm): contexts weighted alike",
        **training_rows(getattr(model, "training_data_", None)),
        "ldhmm version": package_version(),
        **extra,
    }
    return pd.DataFrame({"field": list(rows), "value": [str(v) for v in rows.values()]})


def describe_contextual(
    model, data=None, *, ids=None, baseline=None, n_clusters: int = 3, n_examples: int = 2, seed: int = 0
) -> ModelDescription:
    """The tables of :class:`ModelDescription` for a fitted
    :class:`ldhmm.models.contextual.ContextualLDHMM` or
    :class:`ldhmm.models.contextual_hmm.ContextualHMM` (point estimates: no spread, nothing per
    user but the state paths and the exact log p(x)), its ``contexts`` table included; the
    arguments as in :func:`ldhmm.models.description.describe_model`."""
    model._check_fitted()
    weights = context_weights(model.context_counts_, model.context_table_.n_contexts)
    if hasattr(model, "beta_"):
        levels, rows, concentrations = _levels(model, weights)
    else:  # point estimates: every user's parameters are the model's (spread 0)
        rows, concentrations = model.emissionprob_, None
        B_mean = np.einsum("c,kcv->kv", weights, rows)
        levels = {
            g: (p, np.zeros_like(p))
            for g, p in (("pi", model.startprob_), ("A", model.transmat_), ("B", B_mean))
        }
    settings = {"ids": ids, "baseline": baseline, "n_clusters": n_clusters, "n_examples": n_examples}
    description = assemble_description(
        model, levels, _summary_rows, data, seed=seed, posteriors=_user_posteriors, **settings
    )
    vocabulary = vocabulary_names(model)
    description.contexts = contexts_table(
        rows,
        concentrations,
        weights,
        context_labels(model.context_table_, vocabulary),
        list(description.states["name"]),
        vocabulary,
    )
    return description
