"""LDHMM with contextual emissions in Pyro: the observed site, the SVI route's model and the guide
that reproduces the closed form's ``q``.

The variant (docs/math.md, "Emission contexts"; the closed form is
:mod:`ldhmm.inference.cavi.context_vem`): for each sequence m::

    pi_m ~ Dir(alpha_pi),  A_m[j] ~ Dir(alpha_A[j]),  B_m[k, c] ~ Dir(beta[k, c])  (every k, c)
    z_1 ~ pi_m,  z_n ~ A_m[z_(n-1)],  x_n ~ B_m[z_n, c_n]

where ``c_n`` is the context row of position n, computed from the data alone
(:func:`ldhmm.inference.contexts.context_ids`; order 1: the previous symbol, row V at the start
of a sequence). The hidden chain is LDHMM's; only the emission row of a position moves, so the
model is LDHMM's building blocks (:mod:`ldhmm.models.pyro_model`) with the context passed:

* :func:`~ldhmm.models.pyro_model.ldhmm_priors` with ``n_contexts=C`` (``beta`` of shape (K, C, V))
  and :func:`~ldhmm.models.pyro_model.sequence_parameters` with ``contextual=True`` (site ``B`` of
  event shape (K, C, V));
* :func:`observe_contextual_hmm` (here), the sibling of
  :func:`~ldhmm.models.pyro_model.observe_hmm`: the observed site ``x`` under
  :class:`ContextualCategoricalHMM`, the forward algorithm with the emission row of each position
  gathered by its context, ``log B_m[k, c_n, x_n]``;
* :func:`~ldhmm.models.pyro_model.ldhmm_model` with ``contexts=`` (hidden states sampled as sites
  ``z_n``), whose Pyro ELBO under :class:`ContextualChainGuide` at :func:`contextual_guide_init`
  equals the closed form's bound (``tests/test_contextual_pyro.py``).

:class:`ContextualSequenceModel` is the SVI route's model (:mod:`ldhmm.inference.svi.svi_fit`): a
callable of one :class:`~ldhmm.inference.svi.minibatch.SequenceBatch` that computes the batch's
contexts from its tokens with a fixed :class:`~ldhmm.inference.contexts.ContextTable`, so
:class:`~ldhmm.models.pyro_sequence.PyroSequenceModel` fits it with the Dirichlet mean field
(``score_samples`` and ``log_marginal_is`` too; the per-sequence posteriors of
:mod:`ldhmm.inference.svi.chain_draws` read a
:class:`~ldhmm.inference.svi.hmm_distribution.MaskedCategoricalHMM` and refuse this model).
"""

from __future__ import annotations

import numpy as np
import pyro
import torch

from ..inference.cavi.context_vem import (
    ContextBatch,
    SweepResult,
    e_step,
    expected_logs,
    position_potentials,
    prior_at_pairs,
)
from ..inference.cavi.guides import PFGuide
from ..inference.contexts import ContextTable, context_ids
from ..inference.ops.forward import chain_log_likelihood, gather_emissions
from ..inference.svi.hmm_distribution import ChainDistribution, chain_constraints, clamped_logs
from ..inference.svi.minibatch import SequenceBatch
from .pyro_model import ldhmm_priors, sequence_parameters

__all__ = [
    "ContextualCategoricalHMM",
    "observe_contextual_hmm",
    "padded_contexts",
    "batch_contexts",
    "ContextualSequenceModel",
    "ContextualChainGuide",
    "context_batch_positions",
    "dense_emission_counts",
    "contextual_guide_init",
]


class ContextualCategoricalHMM(ChainDistribution):
    """Categorical emissions from a discrete Markov chain, each position's row chosen by its context.

    ``log p(x | pi, A, B) = log sum_z pi[z_1] B[z_1, c_1, x_1] prod_n A[z_(n-1), z_n] B[z_n, c_n, x_n]``
    over the real positions (mask), by the forward algorithm
    (:func:`ldhmm.inference.ops.forward.chain_log_likelihood`), as
    :class:`~ldhmm.inference.svi.hmm_distribution.MaskedCategoricalHMM` with
    ``log B[k, x_n]`` replaced by ``log B[k, c_n, x_n]``. ``log_prob`` returns one number per
    sequence; the contexts are a function of the data, so the distribution is for observed sites
    only (no ``sample``).

    Parameters
    ----------
    initial_logits : Tensor, shape (..., K)
        ``log pi`` (normalized here).
    transition_logits : Tensor, shape (..., K, K)
        ``log A`` (rows normalized here).
    emission_logits : Tensor, shape (..., K, C, V)
        ``log B``, one row per state and context row (rows normalized here).
    contexts : LongTensor, shape (..., T)
        The context row (0..C-1) of every position (padding: any row in range).
    mask : BoolTensor, shape (..., T)
        True on the real positions of each sequence; a prefix of each row, at least one.
    """

    arg_constraints = chain_constraints(3)
    tensors = ChainDistribution.tensors + ("contexts",)

    def __init__(
        self, initial_logits, transition_logits, emission_logits, contexts, mask, validate_args=None
    ):
        K = initial_logits.shape[-1]
        if (
            transition_logits.shape[-2:] != (K, K)
            or emission_logits.dim() < 3
            or emission_logits.shape[-3] != K
        ):
            raise ValueError(
                f"ContextualCategoricalHMM: initial_logits {tuple(initial_logits.shape)}, transition_logits "
                f"{tuple(transition_logits.shape)} and emission_logits {tuple(emission_logits.shape)} "
                "do not share one number of states K in (..., K), (..., K, K), (..., K, C, V)"
            )
        if mask.dtype != torch.bool or mask.dim() < 1:
            raise ValueError(
                f"ContextualCategoricalHMM: mask must be a bool tensor (..., T), got {mask.dtype}"
            )
        if contexts.dtype != torch.long or contexts.shape[-1:] != mask.shape[-1:]:
            raise ValueError(
                f"ContextualCategoricalHMM: contexts must be a long tensor (..., T) with the mask's T = "
                f"{mask.shape[-1]}, got {contexts.dtype} {tuple(contexts.shape)}"
            )
        C = emission_logits.shape[-2]
        if contexts.numel() and (int(contexts.min()) < 0 or int(contexts.max()) >= C):
            raise ValueError(f"ContextualCategoricalHMM: contexts must lie in 0..{C - 1} (C = {C} rows)")
        self.contexts = contexts
        super().__init__(initial_logits, transition_logits, emission_logits, mask, validate_args, (contexts,))

    @classmethod
    def from_probs(cls, initial, transition, emission, contexts, mask, validate_args=None):
        """The same from probabilities (e.g. Dirichlet draws ``pi``, ``A``, ``B``); entries are
        clamped at the smallest normal float before the log, so an underflowed draw is finite."""
        return cls(*clamped_logs(initial, transition, emission), contexts, mask, validate_args=validate_args)

    @property
    def n_contexts(self) -> int:
        return int(self.emission_logits.shape[-2])

    def expand(self, batch_shape, _instance=None):
        return self._expanded(ContextualCategoricalHMM, batch_shape, _instance)

    def log_obs(self, value) -> torch.Tensor:
        """``log B[k, c_n, x_n]`` at every position, shape (..., T, K) (broadcast batch shape)."""
        K, C, V = self.emission_logits.shape[-3:]
        flat = self.emission_logits.reshape(self.emission_logits.shape[:-2] + (C * V,))
        return gather_emissions(flat, self.contexts * V + value)

    def log_prob(self, value):
        """``log p(x)`` per sequence, shape ``broadcast(batch_shape, value.shape[:-1])``."""
        if self._validate_args:
            self._validate_sample(value)
        out = chain_log_likelihood(
            self.initial_logits, self.transition_logits, self.log_obs(value), self.mask
        )
        return out.expand(torch.broadcast_shapes(out.shape, self.batch_shape))


def observe_contextual_hmm(batch: SequenceBatch, pi, A, B, contexts) -> torch.Tensor:
    """The observed site ``x`` of the contextual variant: ``log p(x_m | pi_m, A_m, B_m)`` with the
    hidden states summed out and each position's emission row ``B_m[:, c_mn, :]``; call inside the
    plate over sequences (the sibling of :func:`ldhmm.models.pyro_model.observe_hmm`).

    Parameters
    ----------
    batch, pi, A
        As for :func:`~ldhmm.models.pyro_model.observe_hmm`.
    B : Tensor, shape (..., B, K, C, V)
    contexts : LongTensor, shape (B, T)
        The context row of every position (:func:`batch_contexts`).

    Returns
    -------
    LongTensor, shape (B, T): the observed tokens.
    """
    chain = ContextualCategoricalHMM.from_probs(pi, A, B, contexts, batch.mask)
    return pyro.sample("x", chain, obs=batch.tokens)


def padded_contexts(contexts, width: int) -> torch.Tensor:
    """The context rows of each sequence (a list of int arrays, :func:`ldhmm.inference.contexts.context_ids`)
    padded with row 0 to ``width`` positions: LongTensor (M, width)."""
    out = np.zeros((len(contexts), int(width)), dtype=np.int64)
    for row, c in enumerate(contexts):
        out[row, : len(c)] = c
    return torch.from_numpy(out)


def batch_contexts(batch: SequenceBatch, table: ContextTable) -> torch.Tensor:
    """The context row of every position of ``batch`` under ``table``, LongTensor (B, T) on the
    batch's device (row 0 on padding)."""
    tokens = batch.tokens.cpu().numpy()
    lengths = batch.lengths.cpu().numpy()
    seqs = [tokens[row, :n] for row, n in enumerate(lengths)]
    return padded_contexts(context_ids(seqs, table), tokens.shape[1]).to(batch.tokens.device)


class ContextualSequenceModel:
    """LDHMM with contextual emissions for the SVI route: hyper-parameters learned, hidden states
    summed out, contexts from ``table``.

    Called with one :class:`~ldhmm.inference.svi.minibatch.SequenceBatch`; for each sequence m of
    the batch (inside ``batch.plate()``)::

        pi_m ~ Dir(alpha_pi),  A_m[i] ~ Dir(alpha_A[i]),  B_m[i, c] ~ Dir(beta[i, c])
        x_m  ~ ContextualCategoricalHMM(pi_m, A_m, B_m, c_m)

    Pyro sites: params ``alpha_pi`` (K,), ``alpha_A`` (K, K), ``beta`` (K, C, V) of
    :func:`~ldhmm.models.pyro_model.ldhmm_priors`; samples ``pi`` (B, K), ``A`` (B, K, K), ``B``
    (B, K, C, V) of :func:`~ldhmm.models.pyro_model.sequence_parameters`; observed ``x`` (B, T)
    of :func:`observe_contextual_hmm`.

    Parameters
    ----------
    table : ContextTable
        The kept contexts (:func:`ldhmm.inference.contexts.build_context_table` of the training
        sequences): C = ``table.n_contexts`` rows per state; its V must be the batches'.
    """

    def __init__(self, table: ContextTable):
        self.table = table

    def __call__(self, batch: SequenceBatch) -> None:
        if batch.n_symbols != self.table.n_symbols:
            raise ValueError(
                f"the context table is over {self.table.n_symbols} symbols, the batch over {batch.n_symbols}"
            )
        priors = ldhmm_priors(batch, n_contexts=self.table.n_contexts)
        contexts = batch_contexts(batch, self.table)
        with batch.plate():
            observe_contextual_hmm(batch, *sequence_parameters(*priors, contextual=True), contexts)


class ContextualChainGuide:
    """The Pyro guide of :func:`ldhmm.models.pyro_model.ldhmm_model` with ``contexts``:
    ``q(pi_m) q(A_m) q(B_m) q(z_m)``, per-sequence Dirichlets with parameters ``g_pi`` (M, K),
    ``g_A`` (M, K, K), ``g_B`` (M, K, C, V) and the hidden family of ``hidden``.

    Parameters
    ----------
    hidden : ChainGuide, optional
        Whose ``init_pyro_hidden_params`` and ``sample_hidden`` give ``q(z)`` (default
        :class:`~ldhmm.inference.cavi.guides.PFGuide`: a chain with free log-potentials, the
        family of the contextual closed form).
    """

    def __init__(self, hidden=None):
        self.hidden = PFGuide() if hidden is None else hidden

    def __call__(self, tokens, lengths, alpha_pi, alpha_A, beta, init: dict | None = None, contexts=None):
        """Sample sites ``pi``, ``A``, ``B`` and ``z_0 .. z_(T-1)``; the signature of ``ldhmm_model``
        (``contexts`` is not read: ``q`` does not depend on it). ``init`` gives the parameters'
        starting values (:func:`contextual_guide_init`); default: the prior and a flat chain.
        The hidden family's own guide (:meth:`ldhmm.inference.cavi.guides.ChainGuide.__call__`)
        with B's prior rows (K, C, V): the site ``B`` of two event dimensions."""
        self.hidden(tokens, lengths, alpha_pi, alpha_A, beta, init)


def context_batch_positions(batch: ContextBatch) -> tuple:
    """The padded arguments of ``ldhmm_model`` for a :class:`~ldhmm.inference.cavi.context_vem.ContextBatch`.

    Returns
    -------
    tokens : LongTensor, shape (M, T)
        The symbol of every position (padding: pair 0's symbol).
    contexts : LongTensor, shape (M, T)
        Its context row (padding: pair 0's).
    lengths : LongTensor, shape (M,)
    """
    tokens = torch.gather(batch.pair_symbol, 1, batch.pair_index)
    contexts = torch.gather(batch.pair_context, 1, batch.pair_index)
    return tokens, contexts, batch.mask.sum(-1)


def dense_emission_counts(counts_B: torch.Tensor, batch: ContextBatch, n_contexts: int, n_symbols: int):
    """The closed form's emission counts per (context, symbol) pair, (M, K, P), as dense rows
    (M, K, C, V): zero off each sequence's pairs."""
    M, K, P = counts_B.shape
    C, V = int(n_contexts), int(n_symbols)
    out = counts_B.new_zeros(M, K, C * V)
    keys = (batch.pair_context * V + batch.pair_symbol)[:, None, :].expand(M, K, P)
    out.scatter_add_(2, keys, counts_B * batch.pair_mask[:, None, :])
    return out.reshape(M, K, C, V)


def contextual_guide_init(prior: dict, batch: ContextBatch, counts: dict | None) -> tuple[dict, SweepResult]:
    """Parameter values that make :class:`ContextualChainGuide` (PF) the closed form's ``q``, and
    that ``q``'s bound.

    One more sweep of :func:`ldhmm.inference.cavi.context_vem.e_step` from ``counts``: its
    ``q(z)`` is the chain of potentials ``E log theta`` under ``Dir(prior + counts)``, its
    ``q(theta) = Dir(prior + n)`` with ``n`` that chain's expected counts, and its
    ``bounds`` the ELBO of exactly that ``q`` (the collapsed bound,
    ``H(q(z)) + sum_rows [log B(a + n) - log B(a)]``).

    The warm start of Pyro's SVI on the contextual model with the hidden states sampled
    (:func:`ldhmm.models.pyro_model.ldhmm_model` with ``contexts=``), as
    :func:`ldhmm.inference.svi.svi_fit.guide_init_from_state` is LDHMM's: the guide starts at a
    closed-form fit's ``q`` instead of the prior. For example, from a fitted
    :class:`~ldhmm.models.contextual.ContextualLDHMM` (``context_batch``, ``best_of_starts``:
    :mod:`ldhmm.inference.cavi.context_vem`)::

        model = ContextualLDHMM(2, emission_context="previous").fit(sequences)
        prior = {"pi": torch.from_numpy(model.alpha_pi_), "A": torch.from_numpy(model.alpha_A_),
                 "B": torch.from_numpy(model.beta_)}
        contexts = context_ids(sequences, model.context_table_)
        batch = context_batch(sequences, contexts, range(len(sequences)), model.n_symbols_)
        warm = best_of_starts(prior, batch, 200, 1e-9)  # the held-out E-step of score_samples
        init, result = contextual_guide_init(prior, batch, warm.counts)
        guide = ContextualChainGuide()
        tokens, contexts, lengths = context_batch_positions(batch)
        svi = pyro.infer.SVI(ldhmm_model, lambda *a, **k: guide(*a, init=init), optimizer, Trace_ELBO())
        svi.step(tokens, lengths, prior["pi"], prior["A"], prior["B"], contexts=contexts)

    ``result.bounds`` is then ``model.score_samples(sequences)`` (to rounding), and Pyro's
    ``Trace_ELBO`` at ``init`` estimates its sum (``tests/test_contextual_pyro.py``).

    Parameters
    ----------
    prior : dict
        ``pi`` (K,), ``A`` (K, K), ``B`` (K, C, V), float64.
    batch : ContextBatch
    counts : dict or None
        The closed form's counts to sweep from (pair layout, ``SweepResult.counts``); None: the prior.

    Returns
    -------
    init : dict
        ``g_pi`` (M, K), ``g_A`` (M, K, K), ``g_B`` (M, K, C, V), ``chain_initial`` (M, K) and
        ``chain_transition`` (M, T, K, K).
    result : SweepResult
        The sweep; ``result.bounds`` (M,) the closed-form ELBO of every sequence under ``init``.
    """
    K, C, V = prior["B"].shape
    result = e_step(prior, batch, counts, 1, 0.0)
    elog = expected_logs(prior, counts, batch, prior_at_pairs(prior["B"], batch))
    log_obs = position_potentials(elog["B"], batch)
    init = {
        "g_pi": prior["pi"] + result.counts["pi"],
        "g_A": prior["A"] + result.counts["A"],
        "g_B": prior["B"] + dense_emission_counts(result.counts["B"], batch, C, V),
    }
    init.update(PFGuide().pyro_hidden_params(None, elog["pi"], elog["A"], log_obs, batch.mask))
    return init, result
