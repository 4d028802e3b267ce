"""An HMM whose emissions see the events before: ``ContextualHMM`` (``HMM-ctx1``), the point variant.

One pi, A and one emission row ``B[k, c]`` per hidden state and context row (the contexts of
:mod:`ldhmm.inference.contexts`), shared by every sequence and estimated by Baum-Welch (MAP with
symmetric ``Dir(1 + pseudocount)`` priors, as the HMM baseline: its defaults 0.01): the
autoregressive HMM of order one with ``emission_context="previous"``. Its score is the exact
``log p(x)``. The per-sequence variant is :class:`ldhmm.models.contextual.ContextualLDHMM`;
both run on the same kernels (:mod:`ldhmm.inference.cavi.context_vem`).
"""

from __future__ import annotations

import numpy as np
import torch

from ..inference.cavi.context_vem import (
    context_batches,
    next_event_proba,
    point_e_step,
    point_m_step,
    position_potentials,
    random_point_parameters,
)
from ..inference.contexts import (
    check_context_smoothing,
    check_emission_context,
    context_ids,
    next_context_rows,
)
from ..inference.distributed.context_partition import POINT
from ..inference.monitor import AbsoluteGain, ConvergenceMonitor
from ..inference.ops.viterbi import unpad_paths, viterbi_log
from .base import SequenceModel
from .contextual_description import describe_contextual
from .contextual_file import read_contextual_file, write_contextual_file
from .contextual_fit import fit_contextual, held_out_scores, sum_rounds
from .description import ModelDescription
from .registry import register

__all__ = ["ContextualHMM"]


class ContextualHMM(SequenceModel):
    """Baum-Welch for an HMM with emission rows chosen by (hidden state, context); exact score.

    Parameters
    ----------
    n_states : int
    n_symbols : int, optional
    emission_context : ``"previous"`` or int 1..8
    min_context_count : int
    max_iter : int
    tol : float
        Stop when the MAP objective gains less than ``tol`` nats in one iteration (hmmlearn's rule).
    n_init : int
        Random starts; the one of highest final objective is kept.
    emission_pseudocount, transition_pseudocount : float >= 0
    context_smoothing : ``"chain"`` or float >= 0
        Pseudo-events ``s m_parent(c)`` added to each emission row's prior beside the symmetric
        pseudocount: the row tied to its shorter context (MacKay and Peto's backoff), so that
        an event never seen after a context in training keeps about ``s m / (n_kc + s)`` of the
        row; ``"chain"`` (the default) and numbers as in
        :class:`ldhmm.models.contextual.ContextualLDHMM`. 0: none.
    seed : int

    Attributes
    ----------
    startprob_ (K,), transmat_ (K, K), emissionprob_ (K, C, V) : ndarray
    context_table_ : ContextTable
    context_counts_ : ndarray (C,) int64
        Training positions per context row (the weights of :meth:`describe`).
    objective_history_ : list of float
        The MAP objective (log-likelihood plus the log priors) after every E-step.
    """

    name = "HMM-CTX"
    score_kind = "exact"

    def __init__(
        self,
        n_states: int = 2,
        n_symbols=None,
        emission_context="previous",
        min_context_count: int = 20,
        max_iter: int = 100,
        tol: float = 1e-2,
        n_init: int = 1,
        emission_pseudocount: float = 1e-2,
        transition_pseudocount: float = 1e-2,
        context_smoothing="chain",
        seed: int = 0,
    ):
        super().__init__(n_states, seed)
        self.n_symbols = n_symbols
        if check_emission_context(emission_context) is None:
            raise ValueError("ContextualHMM needs an emission_context ('previous' or an order 1..8)")
        self.emission_context = emission_context
        for name, value in (
            ("min_context_count", min_context_count),
            ("max_iter", max_iter),
            ("n_init", n_init),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name, value in (
            ("tol", tol),
            ("emission_pseudocount", emission_pseudocount),
            ("transition_pseudocount", transition_pseudocount),
        ):
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not np.isfinite(value)
                or value < 0
            ):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        self.min_context_count, self.max_iter, self.n_init = (
            int(min_context_count),
            int(max_iter),
            int(n_init),
        )
        self.tol = float(tol)
        self.emission_pseudocount = float(emission_pseudocount)
        self.transition_pseudocount = float(transition_pseudocount)
        self.context_smoothing = check_context_smoothing(context_smoothing)

    def _pseudocounts(self, pseudo_B) -> dict:
        """The Dir(1 + c) priors' pseudocounts: scalars, and the context smoothing's (C, V)
        added to the emission rows' (broadcast over the states)."""
        c = self.transition_pseudocount
        B = self.emission_pseudocount
        if pseudo_B is not None:
            B = B + torch.from_numpy(pseudo_B)
        return {"pi": c, "A": c, "B": B}

    @staticmethod
    def _log_prior(log_theta: dict, pseudocounts: dict) -> float:
        """``sum c log theta`` of the Dir(1 + c) priors (the MAP objective's prior part; an entry
        of pseudocount 0 adds 0, also where maximum likelihood put theta at 0)."""
        total = 0.0
        for g, c in pseudocounts.items():
            c = torch.as_tensor(c, dtype=log_theta[g].dtype).expand_as(log_theta[g])
            total += float(torch.where(c > 0, c * log_theta[g], 0.0).sum())
        return total

    def _run(self, runner, rng, pseudo_B=None):
        """One Baum-Welch run from random parameters over the partitions of ``runner``:
        (log parameters, monitor)."""
        K, C, V = self.n_states, self.context_table_.n_contexts, self.n_symbols_
        pseudocounts = self._pseudocounts(pseudo_B)
        log_theta = random_point_parameters(rng, K, C, V)
        monitor = ConvergenceMonitor(AbsoluteGain(self.tol), self.max_iter, unit="Baum-Welch iteration")
        while True:
            log_px, totals = sum_rounds(runner.call("e_step", POINT, log_theta, iteration=monitor.n_iter + 1))
            if monitor.record(log_px + self._log_prior(log_theta, pseudocounts)):
                break
            log_theta = point_m_step(totals, pseudocounts)
        if monitor.reason == "non_finite":
            raise FloatingPointError(f"ContextualHMM: the training objective is {monitor.bad_value}")
        return log_theta, monitor

    def _batches(self, sequences):
        return context_batches(sequences, context_ids(sequences, self.context_table_), self.n_symbols_)

    def fit(self, sequences, backend: str = "local", client=None, n_partitions=None) -> ContextualHMM:
        """Baum-Welch on a database (sequences, a :class:`ldhmm.data.SequenceDatabase`, or a
        directory written by :func:`ldhmm.data.write_partitioned`); returns ``self``.
        ``backend``, ``client``, ``n_partitions`` as in
        :meth:`ldhmm.models.contextual.ContextualLDHMM.fit`."""
        fit_contextual(self, sequences, backend, client, n_partitions)
        return self

    def _fit(self, sequences, n_symbols, **fit_params):
        fit_contextual(self, sequences, **fit_params)

    def _keep(self, result) -> None:
        log_theta, monitor = result
        self.startprob_ = log_theta["pi"].exp().numpy()
        self.transmat_ = log_theta["A"].exp().numpy()
        self.emissionprob_ = log_theta["B"].exp().numpy()
        self.objective_history_ = list(monitor.history)
        self._set_convergence(monitor.report())

    def _log_theta(self) -> dict:
        return {
            "pi": torch.log(torch.from_numpy(self.startprob_)),
            "A": torch.log(torch.from_numpy(self.transmat_)),
            "B": torch.log(torch.from_numpy(self.emissionprob_)),
        }

    def score_samples(self, sequences, backend: str = "local", client=None, n_partitions=None) -> np.ndarray:
        """Per-sequence exact ``log p(x)`` in nats, (M,); ``backend``, ``client``,
        ``n_partitions`` as in :meth:`fit` (sequences in memory)."""
        if backend == "local" and n_partitions is None:
            return super().score_samples(sequences)
        self._check_fitted()
        return held_out_scores(self, POINT, self._log_theta(), sequences, backend, client, n_partitions)

    def _score_samples(self, sequences):
        out = np.empty(len(sequences))
        log_theta = self._log_theta()
        for batch in self._batches(sequences):
            out[batch.index.numpy()] = point_e_step(log_theta, batch).bounds.numpy()
        return out

    def posterior(self, sequences) -> dict:
        """Each sequence's state marginals ``q(z_n) = p(z_n | x)`` (list of (N_m, K)) and exact
        ``log p(x)`` (``elbo``, (M,): the name the other models' posteriors give their score);
        nothing else is per sequence (pi, A, B are point estimates)."""
        seqs = self._validate_for_score(sequences)
        marginals, out = [None] * len(seqs), np.empty(len(seqs))
        log_theta = self._log_theta()
        for batch in self._batches(seqs):
            res = point_e_step(log_theta, batch)
            lengths = batch.mask.sum(1).tolist()
            for row, i in enumerate(batch.index.tolist()):
                marginals[i] = res.marginals[row, : lengths[row]].numpy()
                out[i] = float(res.bounds[row])
        return {"state_marginals": marginals, "elbo": out}

    def describe(
        self, data=None, *, baseline=None, n_clusters: int = 3, n_examples: int = 2, seed: int = 0
    ) -> ModelDescription:
        """The model explained as tables, what ``ldhmm report`` shows, its ``contexts`` table
        included (:func:`ldhmm.models.contextual_description.describe_contextual`)."""
        return describe_contextual(
            self, data, baseline=baseline, n_clusters=n_clusters, n_examples=n_examples, seed=seed
        )

    def save(self, path, vocabulary=None) -> None:
        """Write the fitted model to ``path`` as JSON (:mod:`ldhmm.models.contextual_file`)."""
        self._check_fitted()
        write_contextual_file(path, self, vocabulary=vocabulary)

    @classmethod
    def load(cls, path, guide=None) -> ContextualHMM:
        """A model written by :meth:`save`, every field checked (``guide``: accepted for
        :func:`ldhmm.load_model`; an HMM has none)."""
        if guide is not None:
            raise ValueError(f"{path}: a ContextualHMM has no guide to set")
        return read_contextual_file(path, cls)

    def decode(self, sequences) -> list:
        """Most probable hidden-state path of each sequence (Viterbi), a list of (N_m,) int64 arrays."""
        seqs = self._validate_for_score(sequences)
        out = [None] * len(seqs)
        log_theta = self._log_theta()
        for batch in self._batches(seqs):
            log_B = log_theta["B"][:, batch.pair_context, batch.pair_symbol].permute(1, 0, 2)
            log_obs = position_potentials(log_B * batch.pair_mask[:, None, :], batch)
            paths = viterbi_log(log_theta["pi"], log_theta["A"], log_obs, batch.mask)
            for i, path in zip(batch.index.tolist(), unpad_paths(paths)):
                out[i] = path
        return out

    def predict_next_proba(self, sequences) -> np.ndarray:
        """``p(x_(n+1) = v | x_1..x_n)`` of each sequence (the forward filter), (M, V)."""
        seqs = self._validate_for_score(sequences)
        rows = next_context_rows(seqs, self.context_table_)
        out = np.empty((len(seqs), self.n_symbols_))
        log_theta = self._log_theta()
        for batch in self._batches(seqs):
            idx = batch.index.numpy()
            res = point_e_step(log_theta, batch)
            last = res.marginals[torch.arange(batch.n_sequences), batch.mask.sum(1) - 1]  # (M, K)
            q_next = last @ torch.from_numpy(self.transmat_)
            B = torch.from_numpy(self.emissionprob_)[:, torch.from_numpy(rows[idx]), :].permute(1, 0, 2)
            out[idx] = next_event_proba(q_next, B)
        return out


register(
    ContextualHMM,
    name="HMM-ctx1",
    options={"emission_context": "previous"},
    em_settings=("max_iter", "tol", "n_init"),
    in_lineup=False,
)
