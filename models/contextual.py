"""LDHMM whose emissions see the events before: ``ContextualLDHMM`` (``LDHMM-PF-ctx1``, ``-ctx3``).

Per sequence m: ``pi_m``, ``A_m`` and one emission row ``B_m[k, c]`` per hidden state k and
context row c (the previous event, or a longer history kept by
:func:`ldhmm.inference.contexts.build_context_table`), each drawn from a learned Dirichlet
prior; ``x_t ~ B_m[z_t, c_t]``. The hidden chain is LDHMM's; only the emission row of a position
moves with its context. Fitted by the closed-form variational EM of
:mod:`ldhmm.inference.cavi.context_vem` (PF family).

An ``order``-n model with ``min_context_count`` large enough to keep no history beyond one event is
the order-1 model; with a single context row (no events before) it would be LDHMM-PF itself.
"""

from __future__ import annotations

import numpy as np
import torch

from ..inference.cavi.context_sharing import ContextGroups, initial_groups
from ..inference.cavi.context_vem import (
    FixedLogs,
    best_of_starts,
    context_batches,
    fixed_dirichlet,
    fixed_point,
    importance_log_weights,
    log_hyperprior,
    m_step,
    next_event_proba,
    point_m_step,
    position_potentials,
    posterior_mean_emissions,
    posterior_mean_logs,
    random_point_parameters,
)
from ..inference.contexts import (
    check_context_smoothing,
    check_emission_context,
    context_ids,
    context_labels,
    next_context_rows,
)
from ..inference.distributed.context_partition import POINT, SCORE_SWEEPS, SCORE_TOL, VARIATIONAL
from ..inference.monitor import ConvergenceMonitor, RelativeChange
from ..inference.ops.dirichlet import MIN_CONCENTRATION
from ..inference.ops.viterbi import unpad_paths, viterbi_log
from ..inference.sharing import GROUPS, LDHMM_SHARING, SEQUENCE, ParameterSharing
from .base import SequenceModel, check_seed
from .contextual_description import describe_contextual
from .contextual_file import read_contextual_file, write_contextual_file
from .contextual_fit import check_fit_memory, fit_contextual, held_out_scores, partition_sums, sum_rounds
from .description import ModelDescription
from .registry import register

__all__ = ["ContextualLDHMM"]

#: EM iterations of the database-level contextual HMM a fit starts from, and its pseudo-count.
START_HMM_ITER = 10
START_SMOOTHING = 0.1


class ContextualLDHMM(SequenceModel):
    """LDHMM with emission rows chosen by (hidden state, context); the PF bound as its score.

    Parameters
    ----------
    n_states : int
        K.
    n_symbols : int, optional
        V; default max training symbol + 1.
    emission_context : ``"previous"`` or int 1..8
        The context of a position: the previous event (``"previous"`` = 1), or the last n
        events backed off to shorter histories seen fewer than ``min_context_count`` times.
    min_context_count : int
        Training occurrences a history longer than one event needs to get rows of its own.
    max_iter, tol : EM iterations at most; stop at a relative ELBO change below ``tol``.
    n_init : int
        Random starts; the one of highest final ELBO is kept.
    min_concentration : float
        The smallest concentration the M-step may learn (a floor on every prior entry): an
        event never seen after a context in training keeps at least this share of a row's
        prior, so a prediction never rules it out (default: the project's numerical floor).
    context_smoothing : ``"chain"`` or float >= 0
        Pseudo-events that tie each emission row to its shorter context (MacKay and Peto's
        hierarchical Dirichlet smoothing): the M-step maximizes the bound plus the log of the
        hyperprior they make (:func:`ldhmm.inference.cavi.context_vem.log_hyperprior`), so that
        an event rarely or never seen after a context in training keeps about
        ``s m_parent / (n_c + s)`` of the row. ``"chain"``: the strengths and parents of the
        interpolated Markov chain of the same order on the training data (the MARKOV
        baselines', :func:`ldhmm.inference.contexts.chain_pseudocounts`); a number ``s``: ``s``
        pseudo-events per row (:func:`ldhmm.inference.contexts.backoff_pseudocounts`); 0: the
        plain empirical-Bayes M-step. Default ``"chain"``.
    seed : int
    guide : ``"pf"`` or ``"ff"``
        The variational family of q(Z): ``"pf"`` a Markov chain (forward-backward), ``"ff"``
        fully factorized (:func:`ldhmm.inference.cavi.context_vem.e_step`); the held-out bound
        is that family's (FF's at most PF's at the same priors).
    sharing : ParameterSharing or dict, optional
        Which of pi, A, B are per sequence, shared by the database's q (VB) or point estimates
        (MAP with ``Dir(1 + pseudocount)``), and whether the sequence groups' priors are learned
        (:mod:`ldhmm.inference.cavi.context_sharing`); default LDHMM's (every group per
        sequence, learned). A B prior that is not learned is ``prior_concentration`` plus the
        context smoothing's pseudo-counts; a point B's pseudo-count is the sharing's plus them.
    prior_concentration : float > 0
        Every entry of a fixed Dirichlet prior (sequence groups not learned, shared groups).

    Attributes
    ----------
    alpha_pi_ (K,), alpha_A_ (K, K), beta_ (K, C, V) : ndarray
        The Dirichlet priors (learned, or fixed; a point group's is not used).
    shared_posterior_ : dict
        Each shared group's ``q(theta) = Dir(shared_posterior_[g])`` (empty for LDHMM's sharing).
    point_probabilities_ : dict
        Each point group's probabilities (empty for LDHMM's sharing).
    context_table_ : ContextTable
    context_counts_ : ndarray (C,) int64
        Training positions per context row (None for a model file written before they were
        saved): the weights of the states' emission means in :meth:`describe`.
    elbo_history_ : list of float
        The training objective after every E-step: the bound plus the log hyperprior of the
        context smoothing (non-decreasing; the bound itself where ``context_smoothing`` is 0).
    elbo_ : float
        The training bound of the last E-step (the sum of the sequences' bounds: what
        ``score_samples`` of the training set gives).
    """

    name = "LDHMM-CTX"
    score_kind = "lower_bound"

    def __init__(
        self,
        n_states: int = 2,
        n_symbols=None,
        emission_context="previous",
        min_context_count: int = 20,
        max_iter: int = 100,
        tol: float = 1e-4,
        n_init: int = 1,
        min_concentration: float = MIN_CONCENTRATION,
        context_smoothing="chain",
        seed: int = 0,
        guide: str = "pf",
        sharing=None,
        prior_concentration: float = 1.0,
    ):
        super().__init__(n_states, seed)
        if isinstance(sharing, dict):
            try:
                sharing = ParameterSharing(**sharing)
            except (TypeError, ValueError) as err:
                raise ValueError(f"sharing: {err}") from None
        if sharing is not None and not isinstance(sharing, ParameterSharing):
            raise ValueError(f"sharing must be a ParameterSharing (or its dict), got {sharing!r}")
        self.sharing = sharing
        if (
            isinstance(prior_concentration, bool)
            or not isinstance(prior_concentration, (int, float))
            or not np.isfinite(prior_concentration)
            or prior_concentration <= 0
        ):
            raise ValueError(f"prior_concentration must be a finite number > 0, got {prior_concentration!r}")
        self.prior_concentration = float(prior_concentration)
        if guide not in ("pf", "ff"):
            raise ValueError(f"guide must be 'pf' or 'ff' (a contextual model's family), got {guide!r}")
        self.guide = guide
        self.n_symbols = n_symbols
        if check_emission_context(emission_context) is None:
            raise ValueError("ContextualLDHMM needs an emission_context ('previous' or an order 1..8)")
        self.emission_context = emission_context
        if isinstance(min_context_count, bool) or not isinstance(min_context_count, (int, np.integer)):
            raise ValueError(f"min_context_count must be an integer >= 1, got {min_context_count!r}")
        if min_context_count < 1:
            raise ValueError(f"min_context_count must be an integer >= 1, got {min_context_count!r}")
        self.min_context_count = int(min_context_count)
        for name, value, low in (("max_iter", max_iter, 1), ("n_init", n_init, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(tol, (int, float)) or not np.isfinite(tol) or tol < 0:
            raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
        self.max_iter, self.tol, self.n_init = int(max_iter), float(tol), int(n_init)
        if (
            isinstance(min_concentration, bool)
            or not isinstance(min_concentration, (int, float))
            or not MIN_CONCENTRATION <= min_concentration <= 0.5
        ):
            raise ValueError(
                f"min_concentration must be a number in [{MIN_CONCENTRATION:g}, 0.5], "
                f"got {min_concentration!r}"
            )
        self.min_concentration = float(min_concentration)
        self.context_smoothing = check_context_smoothing(context_smoothing)

    @property
    def parameter_sharing(self) -> ParameterSharing:
        """The sharing of pi, A, B (``sharing``, LDHMM's where None)."""
        return LDHMM_SHARING if self.sharing is None else self.sharing

    def get_config(self) -> dict:
        """The constructor's arguments as a model file records them: ``sharing`` as its dict,
        left out (with ``prior_concentration``) where it is LDHMM's default."""
        config = super().get_config()
        if config["sharing"] is None:
            del config["sharing"]
            if config["prior_concentration"] == 1.0:
                del config["prior_concentration"]
        else:
            config["sharing"] = config["sharing"].to_dict()
        return config

    @property
    def score_family(self) -> str:
        """The held-out bound's variational family: the guide's (bounds compare within one)."""
        return self.guide

    # ------------------------------------------------------------------ fitting
    def fit(self, sequences, backend: str = "local", client=None, n_partitions=None) -> ContextualLDHMM:
        """Learn the priors from a database (sequences, a :class:`ldhmm.data.SequenceDatabase`, or
        a directory written by :func:`ldhmm.data.write_partitioned`); returns ``self``.

        ``backend``, ``client``, ``n_partitions``: where the E-steps run, as in
        :meth:`ldhmm.models.variant_hmm.VariantHMM.fit` (:mod:`ldhmm.models.contextual_fit`):
        the numbers depend on the partitioning, not on the number of Dask workers."""
        fit_contextual(self, sequences, backend, client, n_partitions)
        return self

    def _fit(self, sequences, n_symbols, **fit_params):
        fit_contextual(self, sequences, **fit_params)

    def _batches(self, sequences):
        contexts = context_ids(sequences, self.context_table_)
        return context_batches(sequences, contexts, self.n_symbols_)

    def _start(self, runner, rng) -> dict:
        """Flat priors, each sequence's counts (kept by its partition) those of a database-level
        contextual HMM fitted by a few EM iterations from random parameters (the symmetry
        breaker: the first E-step's q(theta_m) = Dir(prior + counts) already tells the states
        apart)."""
        K, C, V = self.n_states, self.context_table_.n_contexts, self.n_symbols_
        log_theta = random_point_parameters(rng, K, C, V)
        for _ in range(START_HMM_ITER):
            _, totals = sum_rounds(runner.call("e_step", POINT, log_theta, step="start"))
            log_theta = point_m_step(totals, dict.fromkeys(totals, START_SMOOTHING))
        prior = {
            "pi": torch.ones(K, dtype=torch.float64),
            "A": torch.ones(K, K, dtype=torch.float64),
            "B": torch.full((K, C, V), 0.5, dtype=torch.float64),
        }
        return prior, log_theta, totals

    def _groups(self, runner, rng, pseudo_B) -> ContextGroups:
        """The groups' state the EM starts from (:func:`_start`; the sharing's fixed priors and
        point pseudo-counts, with the context smoothing's pseudo-counts ``pseudo_B`` added to B's
        where its prior is not learned)."""
        start_prior, log_theta, totals = self._start(runner, rng)
        sharing = self.parameter_sharing
        fixed = {g: torch.full_like(a, self.prior_concentration) for g, a in start_prior.items()}
        pseudocounts = dict.fromkeys(GROUPS, sharing.pseudocount)
        if pseudo_B is not None:
            fixed["B"] = fixed["B"] + torch.from_numpy(pseudo_B)
            pseudocounts["B"] = sharing.pseudocount + torch.from_numpy(pseudo_B)
        return initial_groups(sharing, start_prior, fixed, log_theta, totals, pseudocounts)

    def _run(self, runner, rng, pseudo_B=None):
        """One EM run from a random start over the partitions of ``runner``: (the groups' state,
        monitor, whether a prior hit the cap, the sequences' bounds summed at the last E-step).
        The monitor records the training objective: those bounds plus the database-level terms
        (:meth:`ContextGroups.database_terms`) and the log hyperprior of a learned B prior
        (``pseudo_B``: the context smoothing's pseudo-counts (C, V))."""
        groups = self._groups(runner, rng, pseudo_B)
        learned = groups.learned
        hyper_B = pseudo_B if "B" in learned else None
        monitor = ConvergenceMonitor(RelativeChange(self.tol), self.max_iter, unit="EM iteration")
        capped = False
        sums = partition_sums(runner, tuple(groups.prior["B"].shape), hyper_B) if learned else None
        while True:
            answer = sum_rounds(
                runner.call(
                    "e_step",
                    VARIATIONAL,
                    groups.for_e_step(),
                    self.guide,
                    groups.needs_totals,
                    iteration=monitor.n_iter + 1,
                )
            )
            bound, totals = answer if groups.needs_totals else (answer, None)
            if monitor.record(bound + groups.database_terms() + log_hyperprior(groups.prior["B"], hyper_B)):
                break
            prior = groups.prior
            if learned:
                prior, cap = m_step(prior, sums, self.min_concentration, learned)
                capped |= cap
            groups = groups.updated(prior, totals)
        if monitor.reason == "non_finite":
            raise FloatingPointError(f"ContextualLDHMM: the training bound is {monitor.bad_value}")
        return groups, monitor, capped, bound

    def _keep(self, result) -> None:
        groups, monitor, capped, bound = result
        self.alpha_pi_ = groups.prior["pi"].numpy()
        self.alpha_A_ = groups.prior["A"].numpy()
        self.beta_ = groups.prior["B"].numpy()
        self.shared_posterior_ = {g: v.numpy() for g, v in groups.shared.items()}
        self.point_probabilities_ = {g: v.exp().numpy() for g, v in groups.log_point.items()}
        self.elbo_history_ = list(monitor.history)
        self.elbo_ = bound
        self.capped_ = capped
        self._set_convergence(monitor.report())

    @classmethod
    def fit_path(cls, sequences, states, *, previous=None, callback=None, **options) -> dict:
        """Fit a model at every K of ``states`` (strictly increasing), each from its own starts
        (seeded ``[seed, start]`` as :meth:`fit`; unlike LDHMM's path, no K is grown from the one
        before it, so a larger K's training objective is not bound to be higher).

        Parameters
        ----------
        sequences : list of 1-D integer arrays, or a SequenceDatabase
        states : iterable of int
        previous : accepted for :meth:`ldhmm.models.variant_hmm.VariantHMM.fit_path`'s callers
            (a run resumed after its last saved K); not used.
        callback : callable, optional
            ``callback(K, model)`` after each K is fitted (to save it).
        **options
            Constructor arguments of every model.

        Returns
        -------
        dict {K: fitted model}; each model's ``path_start_`` is ``"restart"``.
        """
        del previous  # every K starts afresh
        states = list(states)
        if not states or any(b <= a for a, b in zip(states, states[1:])):
            raise ValueError(f"states must be strictly increasing, got {states}")
        out = {}
        for K in states:
            model = cls(K, **options).fit(sequences)
            model.path_start_ = "restart"
            out[K] = model
            if callback is not None:
                callback(K, model)
        return out

    # ------------------------------------------------------------------ files
    def save(self, path, vocabulary=None) -> None:
        """Write the fitted model to ``path`` as JSON (:mod:`ldhmm.models.contextual_file`)."""
        self._check_fitted()
        write_contextual_file(path, self, vocabulary=vocabulary)

    @classmethod
    def load(cls, path, guide=None) -> ContextualLDHMM:
        """A model written by :meth:`save`, every field checked (``guide``: accepted for
        :func:`ldhmm.load_model`; a contextual model has the PF family only)."""
        if guide is not None:
            raise ValueError(f"{path}: a ContextualLDHMM has no guide to set")
        return read_contextual_file(path, cls)

    # ------------------------------------------------------------------ scoring
    def _prior(self) -> dict:
        """What a held-out E-step runs under: each sequence group's prior, each shared or point
        group's :class:`ldhmm.inference.cavi.context_vem.FixedLogs`."""
        out = {
            "pi": torch.from_numpy(self.alpha_pi_),
            "A": torch.from_numpy(self.alpha_A_),
            "B": torch.from_numpy(self.beta_),
        }
        for g, posterior in getattr(self, "shared_posterior_", {}).items():
            out[g] = fixed_dirichlet(torch.from_numpy(posterior))
        for g, probabilities in getattr(self, "point_probabilities_", {}).items():
            out[g] = fixed_point(torch.log(torch.from_numpy(probabilities)))
        return out

    def _posteriors(self, sequences):
        """Every sequence's converged E-step from the prior: (batch, SweepResult) pairs."""
        # a held-out E-step holds what a fit's does
        check_fit_memory(self, len(sequences), sum(len(s) for s in sequences))
        prior = self._prior()
        return [
            (b, best_of_starts(prior, b, SCORE_SWEEPS, SCORE_TOL, self.guide))
            for b in self._batches(sequences)
        ]

    def score_samples(self, sequences, backend: str = "local", client=None, n_partitions=None) -> np.ndarray:
        """Per-sequence held-out bound in nats, (M,), of the model's family (the held-out E-step
        from the prior and the mean start, best per sequence). ``backend``, ``client``,
        ``n_partitions`` as in :meth:`fit` (sequences in memory): each E-step runs where its
        partition lives, and a sequence's score does not depend on where (up to the E-step's
        tolerance, 1e-9 relative, by the batch it shares)."""
        if backend == "local" and n_partitions is None:
            return super().score_samples(sequences)
        self._check_fitted()
        return held_out_scores(self, VARIATIONAL, self._prior(), sequences, backend, client, n_partitions)

    def _score_samples(self, sequences):
        out = np.empty(len(sequences))
        for batch, res in self._posteriors(sequences):
            out[batch.index.numpy()] = res.bounds.numpy()
        return out

    def log_marginal_is(self, sequences, n_samples: int = 100, seed: int = 0) -> np.ndarray:
        """Importance-sampled ``log p(x_m)`` per sequence, (M,): ``n_samples`` draws from each
        sequence's ``q(theta_m)`` after the held-out E-step (a consistent estimate, whose
        expectation of ``exp`` is ``p(x_m)``; its log is at least the bound on average). A group
        the database shares is drawn from its ``q(theta)`` (the predictive ``integral p(x |
        theta) q(theta)``), a point group held at its value."""
        seqs = self._validate_for_score(sequences)
        if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
            raise ValueError(f"n_samples must be an integer >= 1, got {n_samples!r}")
        rng = np.random.default_rng([check_seed(seed), 47])
        out = np.empty(len(seqs))
        prior = self._prior()
        for batch, res in self._posteriors(seqs):
            w = importance_log_weights(prior, batch, res.counts, rng, int(n_samples))
            out[batch.index.numpy()] = (torch.logsumexp(w, 0) - np.log(n_samples)).numpy()
        return out

    def posterior(self, sequences) -> dict:
        """Per-sequence variational parameters after the held-out E-step (the PF family).

        Returns
        -------
        dict with ``g_pi`` (M, K) and ``g_A`` (M, K, K) (Dirichlet parameters of q), the
        emission rows in the sparse pair layout: ``B_contexts`` and ``B_symbols`` (lists of
        (P_m,) int64: the (context row, symbol) pairs sequence m contains, sorted) and
        ``B_counts`` (list of (K, P_m)): ``q(B_m[k, c]) = Dir(beta[k, c] + n_m[k, c])`` with
        ``n_m`` zero off the pairs (every other row of ``q(B_m)`` is its prior row);
        ``state_marginals`` (list of (N_m, K)), ``elbo`` (M,) and ``context_labels`` (C names,
        :func:`ldhmm.inference.contexts.context_labels`). Under another ``sharing`` only the
        groups per sequence have their keys (``g_pi``, ``g_A``, the ``B_`` lists); a shared or
        point group is the model's (``shared_posterior_``, ``point_probabilities_``).
        """
        seqs = self._validate_for_score(sequences)
        M, K = len(seqs), self.n_states
        per_sequence = self.parameter_sharing.groups(SEQUENCE)
        shapes = {"pi": (M, K), "A": (M, K, K)}
        out = {f"g_{g}": np.empty(shapes[g]) for g in ("pi", "A") if g in per_sequence}
        out["elbo"] = np.empty(M)
        keys = (("B_contexts", "B_symbols", "B_counts") if "B" in per_sequence else ()) + ("state_marginals",)
        lists = {key: [None] * M for key in keys}
        prior = self._prior()
        for batch, res in self._posteriors(seqs):
            idx = batch.index.numpy()
            for g in ("pi", "A"):
                if f"g_{g}" in out:
                    out[f"g_{g}"][idx] = (prior[g] + res.counts[g]).numpy()
            out["elbo"][idx] = res.bounds.numpy()
            lengths = batch.mask.sum(1).tolist()
            for row, i in enumerate(idx.tolist()):
                if "B_counts" in lists:
                    live = batch.pair_mask[row]
                    lists["B_contexts"][i] = batch.pair_context[row][live].numpy()
                    lists["B_symbols"][i] = batch.pair_symbol[row][live].numpy()
                    lists["B_counts"][i] = res.counts["B"][row][:, live].numpy()
                lists["state_marginals"][i] = res.marginals[row, : lengths[row]].numpy()
        vocabulary = getattr(self, "vocabulary_", None)
        return {**out, **lists, "context_labels": context_labels(self.context_table_, vocabulary)}

    def describe(
        self, data=None, *, baseline=None, n_clusters: int = 3, n_examples: int = 2, seed: int = 0
    ) -> ModelDescription:
        """The model explained as tables, what ``ldhmm report`` shows, its ``contexts`` table
        included (:func:`ldhmm.models.contextual_description.describe_contextual`; the arguments
        of :meth:`ldhmm.models.variant_hmm.VariantHMM.describe`)."""
        return describe_contextual(
            self, data, baseline=baseline, n_clusters=n_clusters, n_examples=n_examples, seed=seed
        )

    def decode(self, sequences) -> list:
        """Most probable hidden-state path of each sequence under its posterior-mean parameters
        (Viterbi after the held-out E-step, as LDHMM's ``decode``).

        Returns
        -------
        list of np.ndarray, each (N_m,) int64 (states in 0..K-1), in the input order.
        """
        seqs = self._validate_for_score(sequences)
        out = [None] * len(seqs)
        prior = self._prior()
        for batch, res in self._posteriors(seqs):
            logs = posterior_mean_logs(prior, res.counts, batch)
            paths = viterbi_log(logs["pi"], logs["A"], position_potentials(logs["B"], batch), batch.mask)
            for i, path in zip(batch.index.tolist(), unpad_paths(paths)):
                out[i] = path
        return out

    def predict_next_proba(self, sequences) -> np.ndarray:
        """``p(x_(n+1) = v | x_1..x_n)`` of each sequence under its posterior means, (M, V).

        The state after the last event from the chain's last marginal and ``E_q[A_m]``; the
        emission row of the next position's context (its history, the last events) from
        ``E_q[B_m]``."""
        seqs = self._validate_for_score(sequences)
        nxt = next_context_rows(seqs, self.context_table_)
        out = np.empty((len(seqs), self.n_symbols_))
        prior = self._prior()
        for batch, res in self._posteriors(seqs):
            idx = batch.index.numpy()
            last = batch.mask.sum(1) - 1
            q_last = res.marginals[torch.arange(batch.n_sequences), last]  # (M, K)
            if isinstance(prior["A"], FixedLogs):
                mean_A = prior["A"].means.expand(batch.n_sequences, -1, -1)
            else:
                g_A = prior["A"] + res.counts["A"]
                mean_A = g_A / g_A.sum(-1, keepdim=True)
            q_next = torch.einsum("mj,mjk->mk", q_last, mean_A)
            rows = torch.from_numpy(nxt[idx])
            out[idx] = next_event_proba(
                q_next, posterior_mean_emissions(prior["B"], res.counts["B"], batch, rows)
            )
        return out


register(
    ContextualLDHMM,
    name="LDHMM-PF-ctx1",
    options={"emission_context": "previous"},
    em_settings=("max_iter", "tol", "n_init"),
    in_lineup=False,
)
register(
    ContextualLDHMM,
    name="LDHMM-PF-ctx3",
    options={"emission_context": 3},
    em_settings=("max_iter", "tol", "n_init"),
    in_lineup=False,
)
register(
    ContextualLDHMM,
    name="LDHMM-FF-ctx1",
    options={"emission_context": "previous", "guide": "ff"},
    em_settings=("max_iter", "tol", "n_init"),
    in_lineup=False,
)
