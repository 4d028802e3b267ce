"""What a fitted model says, as tables: :meth:`VariantHMM.describe` and the ``ldhmm report`` page.

Without data, a model of the LDHMM family describes its database-level parameters: each state
named by its most likely events (the mean of the Dirichlet over B, with its spread: how much
users' emission rows differ), the initial and transition structure, and the fit's history.
With data (the users of a log, in the model's codes) it adds what the held-out E-step says
about each user: the per-token bound (typical and unusual users), groups of users with similar
posterior dynamics (k-means, seeded, on the posterior means of ``A_m`` and ``B_m`` and the
state occupancy), the decoded state paths of a few users, and how well the model predicts each
user's last event from the rest, beside a baseline chain fitted on the same prefixes.

The math is in small pure functions of arrays; :func:`describe_model` assembles the
:class:`ModelDescription` (a set of pandas DataFrames) that the HTML page renders.
"""

from __future__ import annotations

import copy
import importlib.metadata
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd

from ..inference.cavi.emissions import dense_emission_posterior
from ..inference.sharing import GROUPS, POINT, SEQUENCE
from .collapse import diagnose_collapse, users_differ
from .file_format import stop_report
from .predictive_scores import next_event_verdict, prediction_scores, target_losses
from .registry import get_spec

__all__ = [
    "ModelDescription",
    "describe_model",
    "dirichlet_mean",
    "dirichlet_std",
    "state_names",
    "kmeans",
    "posterior_features",
    "top_events",
    "restart_table",
    "start_table",
    "vocabulary_names",
    "package_version",
    "training_rows",
    "next_event_table",
    "user_posteriors",
    "user_tables",
    "assemble_description",
]

#: Events shown per state in the states table.
TOP_EVENTS = 3
#: Smallest probability of an event named in a state's name after its most likely one (0.01
#: when rounded to two decimals, as the tables show it).
NAME_MIN = 0.005
#: Events of an example user shown along the decoded path (the page stays readable).
MAX_PATH_EVENTS = 60


# ------------------------------------------------------------------------ pure math
def dirichlet_mean(concentration: np.ndarray) -> np.ndarray:
    """Mean of a Dirichlet over the last axis: ``alpha / sum(alpha)``; shape of ``concentration``."""
    c = np.asarray(concentration, dtype=np.float64)
    return c / c.sum(axis=-1, keepdims=True)


def dirichlet_std(concentration: np.ndarray) -> np.ndarray:
    """Standard deviation of each coordinate of a Dirichlet over the last axis.

    ``Var[theta_i] = alpha_i (alpha_0 - alpha_i) / (alpha_0^2 (alpha_0 + 1))`` with
    ``alpha_0 = sum(alpha)``; shape of ``concentration``.
    """
    c = np.asarray(concentration, dtype=np.float64)
    total = c.sum(axis=-1, keepdims=True)
    return np.sqrt(c * (total - c) / (total**2 * (total + 1.0)))


def top_events(probabilities: np.ndarray, n: int) -> np.ndarray:
    """The ``n`` most likely events of each row, most likely first (ties: lower code first).

    Parameters
    ----------
    probabilities : np.ndarray, shape (K, V)
    n : int

    Returns
    -------
    np.ndarray, shape (K, min(n, V)), int64
    """
    p = np.asarray(probabilities, dtype=np.float64)
    order = np.argsort(-p, axis=1, kind="stable")
    return order[:, : min(n, p.shape[1])].astype(np.int64)


def state_names(emission_mean: np.ndarray, vocabulary: list[str], n: int = 2) -> list[str]:
    """A name for each state: its number and its ``n`` most likely events, e.g. ``"S0: home + news"``;
    an event after the first only where its probability is at least :data:`NAME_MIN` (it would
    read 0.00 in the tables), so ``"S1: delivery_choice"`` rather than ``"... + cart"``.

    Parameters
    ----------
    emission_mean : np.ndarray, shape (K, V)
    vocabulary : list of V str
    n : int
    """
    p = np.asarray(emission_mean, dtype=np.float64)
    return [
        f"S{k}: " + " + ".join(vocabulary[v] for i, v in enumerate(row) if i == 0 or p[k, v] >= NAME_MIN)
        for k, row in enumerate(top_events(p, n))
    ]


def posterior_features(mean_A: np.ndarray, mean_B: np.ndarray, occupancy: np.ndarray) -> np.ndarray:
    """What a user's dynamics are, as one vector: posterior means of ``A_m`` and ``B_m``
    (flattened) and the expected share of the user's events in each state.

    Parameters
    ----------
    mean_A : np.ndarray, shape (M, K, K) (or (M, 0) when A is not per-user)
    mean_B : np.ndarray, shape (M, K, V) (or (M, 0))
    occupancy : np.ndarray, shape (M, K)

    Returns
    -------
    np.ndarray, shape (M, F), float64
    """
    M = occupancy.shape[0]
    return np.concatenate(
        [np.reshape(mean_A, (M, -1)), np.reshape(mean_B, (M, -1)), np.asarray(occupancy)], axis=1
    ).astype(np.float64)


def kmeans(features: np.ndarray, n_clusters: int, seed: int, n_iter: int = 100) -> np.ndarray:
    """Seeded k-means (k-means++ start, Lloyd's iterations) of the rows of ``features``.

    Parameters
    ----------
    features : np.ndarray, shape (M, F)
    n_clusters : int, 1 <= n_clusters <= M
    seed : int
    n_iter : int
        At most this many Lloyd iterations (it stops when no label changes).

    Returns
    -------
    np.ndarray, shape (M,), int64: labels ``0..n_clusters-1``, numbered by decreasing cluster
    size (ties: first member first), so that cluster 0 is the largest.
    """
    x = np.asarray(features, dtype=np.float64)
    rng = np.random.default_rng(seed)
    centers = [x[rng.integers(len(x))]]
    for _ in range(1, n_clusters):
        d2 = np.min(((x[:, None, :] - np.asarray(centers)[None]) ** 2).sum(-1), axis=1)
        # all points on a center already: any point will do
        p = d2 / d2.sum() if d2.sum() > 0 else np.full(len(x), 1.0 / len(x))
        centers.append(x[rng.choice(len(x), p=p)])
    centers = np.asarray(centers)
    labels = np.full(len(x), -1)
    for _ in range(n_iter):
        new = np.argmin(((x[:, None, :] - centers[None]) ** 2).sum(-1), axis=1)
        if np.array_equal(new, labels):
            break
        labels = new
        for c in range(n_clusters):
            if np.any(labels == c):  # an empty cluster keeps its center
                centers[c] = x[labels == c].mean(axis=0)
    sizes = np.bincount(labels, minlength=n_clusters)
    first = np.array([np.flatnonzero(labels == c)[0] if sizes[c] else len(x) for c in range(n_clusters)])
    order = np.lexsort((first, -sizes))
    rename = np.empty(n_clusters, dtype=np.int64)
    rename[order] = np.arange(n_clusters)
    return rename[labels]


def database_dirichlet(params, group: str) -> tuple[np.ndarray, np.ndarray]:
    """Mean and spread of a group's parameter for the database: the Dirichlet of a new user
    (per-user groups: the learned prior), the shared posterior (shared groups) or the point
    estimate (spread 0).

    Returns
    -------
    (mean, std), each of the group's shape (pi (K,), A (K, K), B (K, V)), float64.
    """
    kind = params.sharing.kind(group)
    if kind == POINT:
        mean = np.exp(params.log_point[group].double().numpy())
        return mean, np.zeros_like(mean)
    concentration = (params.prior if kind == SEQUENCE else params.posterior)[group].double().numpy()
    return dirichlet_mean(concentration), dirichlet_std(concentration)


def restart_table(histories, seeds, kept) -> pd.DataFrame:
    """Every restart's training ELBO per EM iteration, one row per (restart, iteration).

    Parameters
    ----------
    histories : list of R 1-D arrays
        The ELBO per iteration of each restart (``restart_elbo_histories_``).
    seeds : list of R int
        Each restart's seed (``restart_seeds()``).
    kept : int or None
        The restart the fit kept (``kept_restart_``).

    Returns
    -------
    DataFrame, columns ``restart`` (1-based), ``seed``, ``iteration`` (1-based), ``elbo``, ``kept``
    """
    rows = [
        {"restart": r + 1, "seed": seed, "iteration": i + 1, "elbo": float(value), "kept": r == kept}
        for r, (run, seed) in enumerate(zip(histories, seeds))
        for i, value in enumerate(run)
    ]
    return pd.DataFrame(rows, columns=["restart", "seed", "iteration", "elbo", "kept"])


def start_table(histories: dict, kept_kind) -> pd.DataFrame:
    """The training ELBO per EM iteration of every run from a start that is no random restart,
    one row per (start, iteration).

    Parameters
    ----------
    histories : dict of str to 1-D array
        ``start_elbo_histories_``: ``"seeded"`` (the symbol-seeded start), ``"hmm"`` (from the
        database-level HMM).
    kept_kind : str or None
        ``start_kind_``: the start of the kept run.

    Returns
    -------
    DataFrame, columns ``start``, ``iteration`` (1-based), ``elbo``, ``kept``
    """
    rows = [
        {"start": kind, "iteration": i + 1, "elbo": float(value), "kept": kind == kept_kind}
        for kind, run in histories.items()
        for i, value in enumerate(run)
    ]
    return pd.DataFrame(rows, columns=["start", "iteration", "elbo", "kept"])


# ------------------------------------------------------------------------ the description
@dataclass
class ModelDescription:
    """A fitted model as tables (:meth:`ldhmm.models.variant_hmm.VariantHMM.describe`).

    Attributes
    ----------
    summary : DataFrame, columns ``field``, ``value``
        K, V, the model class, guide, restarts, iterations, final ELBO, how the fit stopped,
        ``per-user priors`` (the collapse diagnosis, :mod:`ldhmm.models.collapse`), ldhmm
        version, and with data the users described, ``do the users differ`` and, with a
        baseline, ``next event`` (the verdict of the next-event table).
    states : DataFrame, one row per state
        ``state``, ``name`` (its two most likely events), ``initial`` (mean of pi), ``stay``
        (mean of A's diagonal), ``top_events``, and with data ``occupancy`` (the users'
        expected share of events in the state).
    emissions : DataFrame, one row per (state, event)
        ``mean`` (database-level mean of B), ``spread`` (its standard deviation: how much users'
        rows differ under the model), with data ``users_mean``/``users_spread`` (mean and
        standard deviation over the users of their posterior means of ``B_m``).
    initial : DataFrame, one row per state: ``mean``, ``spread`` of pi.
    transitions : DataFrame, K x K
        Mean of A (rows: from, columns: to, labelled by state names).
    transition_spread : DataFrame, K x K
        Standard deviation of A's entries (database level).
    history : DataFrame, columns ``iteration``, ``elbo``
        The training ELBO per EM iteration of the kept run.
    restarts : DataFrame or None
        Every restart's training ELBO per EM iteration (:func:`restart_table`: ``restart``,
        ``seed``, ``iteration``, ``elbo``, ``kept``); None when the model does not record them
        (a model file written before they were saved).
    starts : DataFrame or None
        The training ELBO per EM iteration of every run from a start that is no random restart
        (:func:`start_table`: ``start`` "seeded" or "hmm", ``iteration``, ``elbo``, ``kept``);
        None when the model does not record them.
    users, clusters, examples, next_event : DataFrame or None (None without data)
        ``users``: one row per user (``sequence_id``, ``length``, ``bound``, ``bound_per_token``,
        ``cluster``, ``rank``: 1 is the most typical); ``clusters``: one row per group of users
        (size, share, occupancy of each state, the user nearest its centre); ``examples``: one
        row per event of a few typical and unusual users (``role``, ``position``, ``event``,
        ``state``); ``next_event``: log loss, hit@1 and hit@3 of each user's last event
        predicted from the rest, the model and the baseline.
    contexts : DataFrame or None
        A model whose emissions see the events before
        (:func:`ldhmm.models.contextual_description.describe_contextual`): one row per (state,
        context) for the most frequent contexts: ``share`` (of the training events), the
        state's most likely next events after it and the row's ``concentration`` (the sum of its
        Dirichlet prior: the larger, the more alike the users' rows). None for other models.
    """

    summary: pd.DataFrame
    states: pd.DataFrame
    emissions: pd.DataFrame
    initial: pd.DataFrame
    transitions: pd.DataFrame
    transition_spread: pd.DataFrame
    history: pd.DataFrame
    restarts: pd.DataFrame | None = None
    starts: pd.DataFrame | None = None
    users: pd.DataFrame | None = None
    clusters: pd.DataFrame | None = None
    examples: pd.DataFrame | None = None
    next_event: pd.DataFrame | None = None
    contexts: pd.DataFrame | None = None

    def tables(self) -> dict[str, pd.DataFrame]:
        """Every table present, by name (the order of the page)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


def vocabulary_names(model) -> list[str]:
    """The model's V symbol names (its ``vocabulary_``; else the codes ``"0".."V-1"``)."""
    vocabulary = getattr(model, "vocabulary_", None)
    return (
        [str(v) for v in vocabulary] if vocabulary is not None else [str(v) for v in range(model.n_symbols_)]
    )


def package_version() -> str:
    """The installed ldhmm's version (``"unknown"`` in a source tree that is not installed)."""
    try:
        return importlib.metadata.version("ldhmm")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree without installing
        return "unknown"


def _summary_rows(model, extra: dict) -> pd.DataFrame:
    history = np.asarray(getattr(model, "elbo_history_", []), dtype=np.float64)
    rows = {
        "model": type(model).__name__,
        "K (states)": model.n_states,
        "V (events)": model.n_symbols_,
        "guide": getattr(model.guide, "name", "custom"),
        "sharing (pi, A, B)": ", ".join(model.sharing.kind(g) for g in GROUPS),
        "restarts (n_init)": _restarts(model),
        "restart seeds (the kept run: highest final ELBO)": ", ".join(map(str, model.restart_seeds())),
        "kept restart": _kept(model),
        "start of the kept run": getattr(model, "start_kind_", "not recorded in the model file"),
        "EM iterations": len(history),
        "final training ELBO (nats)": f"{history[-1]:.6g}" if history.size else "not recorded",
        "stopped because": stop_report(model)
        or "not recorded in the model file (written by an earlier ldhmm)",
        "per-user priors": diagnose_collapse(model.params_).line().partition(": ")[2],
        **training_rows(getattr(model, "training_data_", None)),
        "ldhmm version": package_version(),
        **extra,
    }
    return pd.DataFrame({"field": list(rows), "value": [str(v) for v in rows.values()]})


def _restarts(model) -> str:
    """``n_init``, or how many restarts ran where the fit ran fewer (a path's K after the first:
    ``path_n_init``)."""
    n_init = getattr(model, "n_init", 1)
    settings = getattr(model, "fit_settings", None)
    if settings is not None and settings.resolved().start_policy != "restarts":
        return f"{n_init} of the database-level HMM (start_policy {settings.resolved().start_policy!r})"
    ran = getattr(model, "restart_elbo_histories_", None)
    if ran and len(ran) < n_init:
        return f"{len(ran)} (n_init = {n_init}; path_n_init at a K grown from the K - 1 fit)"
    return str(n_init)


def _kept(model) -> str:
    if not hasattr(model, "restart_elbo_histories_"):
        return "not recorded in the model file"
    kept = getattr(model, "kept_restart_", None)
    runs = len(model.restart_elbo_histories_)
    if kept is None:
        start = kept_start_words(getattr(model, "start_kind_", None))
        if start is None:
            return "none (the kept run started from given parameters, a grown start or the SVI route)"
        if not runs:
            return f"none (no random restart ran): the kept run started from {start}"
        return f"none of {runs}: the kept run started from {start}"
    return f"{kept + 1} of {runs}"


#: What the summary says of a kept run that was no restart, by its ``start_kind_``.
_START_WORDS = {
    "seeded": "the symbol-seeded start, which ended above every other start",
    "hmm": "the database-level HMM",
    "init": "given parameters",
    "continued": "the K - 1 fit of its path, continued with an unused state",
}


def kept_start_words(kind) -> str | None:
    """How a kept run that was no restart started, in words (None: a restart, or not recorded);
    ``"split:k"``: state k of the path's K - 1 fit split in two."""
    if isinstance(kind, str) and kind.startswith("split:"):
        return f"state {kind.partition(':')[2]} of the K - 1 fit of its path, split in two"
    return _START_WORDS.get(kind)


def training_rows(record) -> dict:
    """The summary's rows of what the model was fitted on (``training_data_``)."""
    if record is None:
        return {"training data": "not recorded in the model file"}
    return {
        "training data": record["source"],
        "training sequences": record["n_sequences"],
        "training tokens": record["n_tokens"],
        "training data SHA-256": record["sha256"] or "not computed (read by the workers)",
    }


def _baseline_model(baseline, n_symbols: int, seed: int):
    """A fresh baseline: a registered harness name, or a copy of a model object."""
    if isinstance(baseline, str):
        return baseline, get_spec(baseline).make(1, n_symbols, seed=seed)
    return getattr(baseline, "name", type(baseline).__name__), copy.deepcopy(baseline)


def next_event_table(model, sequences, baseline, seed: int) -> pd.DataFrame:
    """Each user's last event predicted from the rest (users with at least 2 events): the model,
    and the baseline fitted on the same prefixes (the last events are never seen by it); and
    with a baseline, the verdict (:func:`ldhmm.models.predictive_scores.next_event_verdict`),
    else None."""
    test = [s for s in sequences if len(s) >= 2]
    columns = ["model", "log_loss", "hit1", "hit3", "n_users"]
    if not test:
        return pd.DataFrame(columns=columns), None
    prefixes = [s[:-1] for s in test]
    targets = np.array([int(s[-1]) for s in test])
    probas = [model.predict_next_proba(prefixes)]
    names = [type(model).__name__]
    if baseline is not None:
        name, chain = _baseline_model(baseline, model.n_symbols_, seed)
        chain.fit(prefixes)
        probas.append(chain.predict_next_proba(prefixes))
        names.append(name)
    rows = [{"model": n, **prediction_scores(p, targets)} for n, p in zip(names, probas)]
    verdict = (
        next_event_verdict(rows, [target_losses(p, targets) for p in probas]) if len(rows) == 2 else None
    )
    return pd.DataFrame([{**r, "n_users": len(test)} for r in rows], columns=columns), verdict


def user_posteriors(model, sequences):
    """The users' posterior means of pi, A and B (``(M, 0)`` when not per-user), state occupancy
    (M, K) and bound (M,)."""
    post = model.posterior(sequences)
    M, K = len(sequences), model.n_states
    if "B_symbols" in post:
        post["g_B"] = dense_emission_posterior(post, model.params_.prior["B"].double().numpy())
    means = {g: dirichlet_mean(post[f"g_{g}"]) if f"g_{g}" in post else np.zeros((M, 0)) for g in GROUPS}
    occupancy = np.stack([np.asarray(m, dtype=np.float64).mean(axis=0) for m in post["state_marginals"]])
    return means, occupancy.reshape(M, K), np.asarray(post["elbo"], dtype=np.float64)


def user_tables(model, sequences, ids, names, vocabulary, n_clusters, n_examples, seed, posteriors=None):
    """users, clusters, examples, the states' occupancy, the users' posterior means of B and
    whether the users differ (:func:`ldhmm.models.collapse.users_differ`). ``posteriors``: the
    function of ``(model, sequences)`` that gives the users' posterior means by group, their
    occupancy and bounds (default :func:`user_posteriors`)."""
    lengths = np.array([len(s) for s in sequences])
    means, occupancy, bound = (posteriors or user_posteriors)(model, sequences)
    mean_B = means["B"]
    features = posterior_features(means["A"], mean_B, occupancy)
    k = max(1, min(n_clusters, len(sequences)))
    labels = kmeans(features, k, seed)
    per_token = bound / lengths
    rank = np.empty(len(sequences), dtype=np.int64)
    rank[np.argsort(-per_token, kind="stable")] = np.arange(1, len(sequences) + 1)
    users = pd.DataFrame(
        {
            "sequence_id": ids,
            "length": lengths,
            "bound": bound,
            "bound_per_token": per_token,
            "cluster": labels,
            "rank": rank,
        }
    )
    clusters = []
    for c in range(k):
        members = np.flatnonzero(labels == c)
        centre = features[members].mean(axis=0)
        nearest = members[np.argmin(((features[members] - centre) ** 2).sum(-1))]
        row = {"cluster": c, "users": members.size, "share": members.size / len(sequences)}
        row.update({f"occupancy {n}": float(occupancy[members, j].mean()) for j, n in enumerate(names)})
        row["main state"] = names[int(np.argmax(occupancy[members].mean(axis=0)))]
        row["bound_per_token"] = float(per_token[members].mean())
        row["nearest the centre"] = ids[nearest]
        clusters.append(row)
    order = np.argsort(rank)
    n = min(n_examples, len(sequences))
    picked = [(int(i), "typical") for i in order[:n]] + [
        (int(i), "unusual") for i in order[::-1][:n] if int(i) not in order[:n]
    ]
    paths = model.decode([sequences[i][:MAX_PATH_EVENTS] for i, _ in picked])
    examples = pd.DataFrame(
        [
            {
                "sequence_id": ids[i],
                "role": role,
                "rank": int(rank[i]),
                "position": t,
                "event": vocabulary[int(x)],
                "state": int(z),
                "state_name": names[int(z)],
            }
            for (i, role), path in zip(picked, paths)
            for t, (x, z) in enumerate(zip(sequences[i][:MAX_PATH_EVENTS], path))
        ],
        columns=["sequence_id", "role", "rank", "position", "event", "state", "state_name"],
    )
    differ = users_differ(list(means.values()))[1]
    return users, pd.DataFrame(clusters), examples, occupancy.mean(axis=0), mean_B, differ


def describe_model(
    model,
    data=None,
    *,
    ids=None,
    baseline=None,
    n_clusters: int = 3,
    n_examples: int = 2,
    seed: int = 0,
) -> ModelDescription:
    """The tables of :class:`ModelDescription` for a fitted model of the LDHMM family.

    Parameters
    ----------
    model : VariantHMM (fitted)
    data : list of 1-D int arrays or SequenceDatabase, optional
        The users to describe, in the model's codes (:func:`ldhmm.modelfiles.data_for_model`
        maps a log into them).
    ids : list, optional
        The users' ids (default: ``data.ids`` of a database, else ``0..M-1``).
    baseline : str or model, optional
        The next-event baseline: a registered harness name (``"MARKOV1"``: the first-order
        chain of :mod:`ldhmm.baselines.markov_smoothed`) or an unfitted model with ``fit`` and
        ``predict_next_proba`` (a copy is fitted on the users' prefixes); None: the model alone.
    n_clusters : int
        Groups of users (at most the number of users).
    n_examples : int
        Typical users and unusual users whose decoded paths are shown.
    seed : int
        Seed of the clustering (and of a baseline built by name).
    """
    model._check_fitted()
    params = model.params_
    levels = {g: database_dirichlet(params, g) for g in GROUPS}
    return assemble_description(
        model,
        levels,
        _summary_rows,
        data,
        ids=ids,
        baseline=baseline,
        n_clusters=n_clusters,
        n_examples=n_examples,
        seed=seed,
    )


def assemble_description(
    model, levels: dict, summary_rows, data, *, ids, baseline, n_clusters, n_examples, seed, posteriors=None
) -> ModelDescription:
    """The :class:`ModelDescription` of a fitted model from its database-level means and spreads.

    Parameters
    ----------
    model : a fitted model with ``decode``, ``posterior`` and ``predict_next_proba``
    levels : dict
        ``"pi"``, ``"A"``, ``"B"``: (mean, spread) pairs of shapes (K,), (K, K), (K, V).
    summary_rows : callable
        ``summary_rows(model, extra)``: the summary table (``extra``: the rows that data add).
    data, ids, baseline, n_clusters, n_examples, seed
        As in :func:`describe_model`.
    posteriors : callable, optional
        The users' posterior means, occupancy and bounds (:func:`user_tables`).
    """
    vocabulary = vocabulary_names(model)
    (pi_mean, pi_std), (A_mean, A_std), (B_mean, B_std) = levels["pi"], levels["A"], levels["B"]
    names = state_names(B_mean, vocabulary)
    K, V = B_mean.shape
    states = pd.DataFrame(
        {
            "state": np.arange(K),
            "name": names,
            "initial": pi_mean,
            "stay": np.diag(A_mean),
            "top_events": [
                ", ".join(f"{vocabulary[v]} ({B_mean[k, v]:.2f})" for v in row)
                for k, row in enumerate(top_events(B_mean, TOP_EVENTS))
            ],
        }
    )
    emissions = pd.DataFrame(
        {
            "state": np.repeat(np.arange(K), V),
            "state_name": np.repeat(names, V),
            "event": vocabulary * K,
            "mean": B_mean.reshape(-1),
            "spread": B_std.reshape(-1),
        }
    )
    extra, users, next_event = {}, [None, None, None], None
    if data is not None:
        sequences = list(getattr(data, "sequences", data))
        if not sequences:
            raise ValueError("describe: the data hold no sequence")
        given = ids if ids is not None else getattr(data, "ids", None)
        ids = [str(i) for i in (given if given is not None else range(len(sequences)))]
        *users, occupancy, mean_B, differ = user_tables(
            model, sequences, ids, names, vocabulary, n_clusters, n_examples, seed, posteriors
        )
        states["occupancy"] = occupancy
        if mean_B.size:
            emissions["users_mean"] = mean_B.mean(axis=0).reshape(-1)
            emissions["users_spread"] = mean_B.std(axis=0).reshape(-1)
        next_event, verdict = next_event_table(model, sequences, baseline, seed)
        extra = {
            "users described": len(sequences),
            "their events": int(sum(len(s) for s in sequences)),
            "do the users differ": differ,
            **({"next event": verdict} if verdict else {}),
        }
    history = np.asarray(getattr(model, "elbo_history_", []), dtype=np.float64)
    return ModelDescription(
        summary=summary_rows(model, extra),
        states=states,
        emissions=emissions,
        initial=pd.DataFrame({"state": np.arange(K), "name": names, "mean": pi_mean, "spread": pi_std}),
        transitions=pd.DataFrame(A_mean, index=pd.Index(names, name="from"), columns=names),
        transition_spread=pd.DataFrame(A_std, index=pd.Index(names, name="from"), columns=names),
        history=pd.DataFrame({"iteration": np.arange(1, history.size + 1), "elbo": history}),
        restarts=restart_table(model.restart_elbo_histories_, model.restart_seeds(), model.kept_restart_)
        if hasattr(model, "restart_elbo_histories_")
        else None,
        starts=start_table(model.start_elbo_histories_, getattr(model, "start_kind_", None))
        if hasattr(model, "start_elbo_histories_")
        else None,
        users=users[0],
        clusters=users[1],
        examples=users[2],
        next_event=next_event,
    )
