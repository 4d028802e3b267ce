"""Closed-form variational EM of LDHMM with contextual emissions (the PF family).

The model (docs/math.md, "Emission contexts"): per sequence m, ``pi_m ~ Dir(alpha_pi)``,
``A_m[j] ~ Dir(alpha_A[j])``, ``B_m[k, c] ~ Dir(beta[k, c])`` for every state k and context row c;
``z`` a Markov chain under ``(pi_m, A_m)`` and ``x_t ~ B_m[z_t, c_t]``, ``c_t`` the context row of
position t (:mod:`ldhmm.inference.contexts`). The PF family ``q(z_m) q(pi_m) q(A_m) q(B_m)``
with ``q(z_m)`` a chain is the one of LDHMM-PF: its q(z) update is the forward-backward of
:func:`ldhmm.inference.cavi.exact_chain.forward_backward` (the compiled chain core) on the
potentials ``E log pi``, ``E log A`` and ``E log B_m[k, c_t, x_t]``; its q(theta) update
``Dir(prior + expected counts)``.

Emission counts are kept **per (context, symbol) pair that a sequence contains** (``P_m <= T_m``
pairs; a Dirichlet row's other entries keep their prior, by the aggregation property), so a
sequence costs O(T K^2 + K P) and nothing of size K x C x V.

The bound of a sequence at ``q(theta) = Dir(prior + n)`` optimal for its ``q(z)`` is the
*collapsed* bound ``H(q(z)) + sum_rows [log B(a + n) - log B(a)]``; with ``q(z)`` the chain of
potentials ``E log theta`` it is ``log Z - n . E log theta + sum_rows [...]``
(:func:`sequence_bounds`). The M-step maximizes ``sum_m sum_rows [log B(a + n_m) - log B(a)]``
over the priors (every group's rows; the project's collapsed Newton,
:func:`ldhmm.inference.cavi.maximization.maximize_collapsed`, on a count table built here), so
E- and M-steps both raise the same bound.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch

from ..ops.dirichlet import MIN_CONCENTRATION, expected_log_dirichlet, kl_dirichlet
from .exact_chain import forward_backward
from .kernels.dirichlet_multinomial import CountTable, table_sums
from .kernels.factorized_batch import factorized_pass
from .maximization import maximize_collapsed

__all__ = [
    "FixedLogs",
    "fixed_dirichlet",
    "fixed_point",
    "database_terms",
    "ContextBatch",
    "context_batch",
    "context_batches",
    "PriorAtPairs",
    "prior_at_pairs",
    "expected_logs",
    "position_potentials",
    "pair_counts",
    "sequence_bounds",
    "SweepResult",
    "e_step",
    "mean_start",
    "best_of_starts",
    "point_e_step",
    "point_m_step",
    "random_point_parameters",
    "chain_counts",
    "total_counts",
    "importance_log_weights",
    "count_table",
    "m_step",
    "log_hyperprior",
    "posterior_mean_logs",
    "posterior_mean_emissions",
    "next_event_proba",
]

#: Positions (padded) per batch: bounds the chain's (M, T, K, K) scan.
BATCH_POSITIONS = 65536


@dataclass
class ContextBatch:
    """Padded sequences with their (context, symbol) pairs.

    Attributes
    ----------
    index : LongTensor (M,)
        The sequences' positions in the caller's list.
    mask : BoolTensor (M, T)
    pair_index : LongTensor (M, T)
        The pair of each position (0 on padding).
    pair_context, pair_symbol : LongTensor (M, P)
        Each pair's context row and symbol (0 on padding pairs).
    pair_mask : BoolTensor (M, P)
    pair_slot : LongTensor (M, P)
        Each pair's context among the sequence's distinct contexts (its *context slot*).
    slot_context : LongTensor (M, Q)
        The context row of each slot (0 on padding slots); rows a sequence never uses keep
        their prior and add nothing to its bound, so nothing of size C is kept per sequence.
    """

    index: torch.Tensor
    mask: torch.Tensor
    pair_index: torch.Tensor
    pair_context: torch.Tensor
    pair_symbol: torch.Tensor
    pair_mask: torch.Tensor
    pair_slot: torch.Tensor
    slot_context: torch.Tensor

    @property
    def n_sequences(self) -> int:
        return int(self.mask.shape[0])


def context_batch(sequences, contexts, index, n_symbols: int) -> ContextBatch:
    """The :class:`ContextBatch` of ``sequences[i]`` for ``i`` in ``index`` (each at least one event)."""
    index = list(index)
    M = len(index)
    T = max(len(sequences[i]) for i in index)
    pairs = []
    for i in index:
        composite = np.asarray(contexts[i], dtype=np.int64) * n_symbols + np.asarray(
            sequences[i], dtype=np.int64
        )
        pairs.append(np.unique(composite, return_inverse=True))
    P = max(p[0].size for p in pairs)
    slots = [np.unique(keys // n_symbols, return_inverse=True) for keys, _ in pairs]
    Q = max(u.size for u, _ in slots)
    mask = np.zeros((M, T), dtype=bool)
    pair_index = np.zeros((M, T), dtype=np.int64)
    pair_key = np.zeros((M, P), dtype=np.int64)
    pair_mask = np.zeros((M, P), dtype=bool)
    pair_slot = np.zeros((M, P), dtype=np.int64)
    slot_context = np.zeros((M, Q), dtype=np.int64)
    for row, ((keys, inverse), (contexts_used, slot_of)) in enumerate(zip(pairs, slots)):
        L = inverse.size
        mask[row, :L] = True
        pair_index[row, :L] = inverse.reshape(-1)
        pair_key[row, : keys.size] = keys
        pair_mask[row, : keys.size] = True
        pair_slot[row, : keys.size] = slot_of.reshape(-1)
        slot_context[row, : contexts_used.size] = contexts_used
    return ContextBatch(
        torch.as_tensor(index, dtype=torch.long),
        torch.from_numpy(mask),
        torch.from_numpy(pair_index),
        torch.from_numpy(pair_key // n_symbols),
        torch.from_numpy(pair_key % n_symbols),
        torch.from_numpy(pair_mask),
        torch.from_numpy(pair_slot),
        torch.from_numpy(slot_context),
    )


def context_batches(sequences, contexts, n_symbols: int, positions: int = BATCH_POSITIONS) -> list:
    """The sequences in batches of similar lengths (at most ``positions`` padded positions each,
    one sequence at least), in order of length; each batch's ``index`` maps back."""
    order = np.argsort([len(s) for s in sequences], kind="stable")
    batches, start = [], 0
    while start < len(order):
        stop = start + 1
        while stop < len(order) and (stop - start + 1) * len(sequences[order[stop]]) <= positions:
            stop += 1
        batches.append(context_batch(sequences, contexts, order[start:stop], n_symbols))
        start = stop
    return batches


@dataclass(frozen=True)
class FixedLogs:
    """A group whose parameters every sequence shares (``ParameterSharing``'s ``"shared"``, one
    ``q(theta) = Dir(posterior)``, or ``"point"``, one ``theta``), in place of its Dirichlet prior
    in the ``prior`` dict of the functions below: ``logs`` its ``E_q log theta`` (``log theta``
    for a point), the same in every sweep, and ``means`` its ``E_q theta``; ``pi`` (K,), ``A``
    (K, K), ``B`` (K, C, V); ``concentration`` a shared group's Dirichlet (None for a point).
    A sequence's bound then holds ``n_m . logs`` for the group in place of the collapsed
    ``log B(a + n_m) - log B(a)``; the group's database-level terms are :func:`database_terms`."""

    logs: torch.Tensor
    means: torch.Tensor
    concentration: torch.Tensor | None = None


def fixed_dirichlet(posterior: torch.Tensor) -> FixedLogs:
    """The :class:`FixedLogs` of a shared group ``q(theta) = Dir(posterior)`` (rows on the last
    axis; ``concentration`` the posterior, which importance sampling draws from)."""
    return FixedLogs(
        expected_log_dirichlet(posterior), posterior / posterior.sum(-1, keepdim=True), posterior
    )


def fixed_point(log_theta: torch.Tensor) -> FixedLogs:
    """The :class:`FixedLogs` of a point group (log probabilities, rows on the last axis)."""
    return FixedLogs(log_theta, log_theta.exp())


def database_terms(shared: dict, priors: dict, point: dict, pseudocounts: dict) -> float:
    """The ELBO's database-level terms (the sequences' bounds hold ``n_m . E log theta`` of these
    groups already, :func:`sequence_bounds`): each shared group's
    ``-KL(Dir(posterior) || Dir(prior))`` (``shared``: group -> posterior, ``priors``: group -> its
    fixed prior), and each point group's log prior ``sum c log theta`` (MAP with ``Dir(1 + c)``:
    ``pseudocounts[g]``, scalar or broadcast; entries of pseudocount 0 add 0)."""
    value = 0.0
    for g, posterior in shared.items():
        value -= float(kl_dirichlet(posterior, priors[g]).sum())
    for g, log_theta in point.items():
        c = torch.as_tensor(pseudocounts[g], dtype=log_theta.dtype).expand_as(log_theta)
        value += float(torch.where(c > 0, c * log_theta, 0.0).sum())
    return value


@dataclass
class PriorAtPairs:
    """``beta`` gathered for one batch, the same every sweep of an E-step: at each pair
    (M, K, P), and the row totals ``sum_v beta[k, c]`` at each context slot (M, K, Q). For a
    B every sequence shares (:class:`FixedLogs`): its ``logs`` at each pair (0 on padding
    pairs) and ``slot_rows`` None."""

    at_pairs: torch.Tensor
    slot_rows: torch.Tensor | None


def prior_at_pairs(beta, batch: ContextBatch) -> PriorAtPairs:
    if isinstance(beta, FixedLogs):
        logs = beta.logs[:, batch.pair_context, batch.pair_symbol].permute(1, 0, 2)
        return PriorAtPairs(logs * batch.pair_mask[:, None, :], None)
    at_pairs = beta[:, batch.pair_context, batch.pair_symbol].permute(1, 0, 2)
    slot_rows = beta.sum(-1)[:, batch.slot_context].permute(1, 0, 2)
    return PriorAtPairs(at_pairs, slot_rows)


def _slot_counts(counts_B: torch.Tensor, batch: ContextBatch) -> torch.Tensor:
    """``N_m[k, c] = sum_v n_m[k, c, v]`` at each context slot (M, K, Q), from the pair counts (M, K, P)."""
    M, K, _ = counts_B.shape
    out = counts_B.new_zeros(M, K, batch.slot_context.shape[1])
    index = batch.pair_slot[:, None, :].expand(M, K, -1)
    return out.scatter_add_(2, index, counts_B * batch.pair_mask[:, None, :])


def expected_logs(prior: dict, counts: dict | None, batch: ContextBatch, gathered: PriorAtPairs) -> dict:
    """``E log pi_m`` (M, K), ``E log A_m`` (M, K, K) and ``E log B_m`` at each pair (M, K, P)
    under ``q(theta_m) = Dir(prior + counts)`` (``counts=None``: the prior); ``gathered`` is
    :func:`prior_at_pairs` of ``prior["B"]``. A group every sequence shares
    (:class:`FixedLogs`) gives its ``logs`` to every sequence."""
    M = batch.n_sequences
    out = {}
    for g in ("pi", "A"):
        a = prior[g]
        if isinstance(a, FixedLogs):
            out[g] = a.logs.expand(M, *a.logs.shape)
            continue
        g_a = a.expand(M, *a.shape) if counts is None else a + counts[g]
        out[g] = torch.digamma(g_a) - torch.digamma(g_a.sum(-1, keepdim=True))
    if gathered.slot_rows is None:
        out["B"] = gathered.at_pairs
        return out
    at_pairs, slot_rows = gathered.at_pairs, gathered.slot_rows
    if counts is not None:
        at_pairs = at_pairs + counts["B"]
        slot_rows = slot_rows + _slot_counts(counts["B"], batch)
    rows = torch.gather(slot_rows, 2, batch.pair_slot[:, None, :].expand_as(at_pairs))
    out["B"] = (torch.digamma(at_pairs) - torch.digamma(rows)) * batch.pair_mask[:, None, :]
    return out


def position_potentials(elog_B: torch.Tensor, batch: ContextBatch) -> torch.Tensor:
    """``E log B_m[k, c_t, x_t]`` at every position, (M, T, K)."""
    M, K, _ = elog_B.shape
    index = batch.pair_index[:, None, :].expand(M, K, -1)
    return torch.gather(elog_B, 2, index).transpose(1, 2)


def pair_counts(marginals: torch.Tensor, batch: ContextBatch, n_pairs: int) -> torch.Tensor:
    """Expected emission counts per pair, (M, K, P), from ``q(z_t = k)`` (M, T, K)."""
    M, _, K = marginals.shape
    out = marginals.new_zeros(M, K, n_pairs)
    weights = (marginals * batch.mask[..., None]).transpose(1, 2)
    return out.scatter_add_(2, batch.pair_index[:, None, :].expand(M, K, -1), weights)


def chain_counts(post, batch: ContextBatch) -> dict:
    """The expected counts of a chain's posterior (:class:`ldhmm.inference.ops.potentials.ChainPosterior`):
    ``pi`` (M, K), ``A`` (M, K, K) and ``B`` per pair (M, K, P)."""
    return {
        "pi": post.state_marginals[:, 0, :],
        "A": post.transition_counts,
        "B": pair_counts(post.state_marginals, batch, batch.pair_mask.shape[1]),
    }


def _log_beta_gain(prior: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """``sum_rows [log B(a + n) - log B(a)]`` per sequence for dense rows (..., R, D) or (..., D)."""
    g = prior + counts
    gain = (torch.lgamma(g) - torch.lgamma(prior)).sum(-1)
    gain = gain - (torch.lgamma(g.sum(-1)) - torch.lgamma(prior.sum(-1)))
    return gain.reshape(counts.shape[0], -1).sum(-1)


def _group_gain(prior, counts: torch.Tensor) -> torch.Tensor:
    """A sequence group's part of each sequence's bound (M,): the collapsed
    ``log B(a + n_m) - log B(a)`` of a Dirichlet prior, ``n_m . logs`` of a :class:`FixedLogs`."""
    if isinstance(prior, FixedLogs):
        return (counts * prior.logs).reshape(counts.shape[0], -1).sum(-1)
    return _log_beta_gain(prior.expand_as(counts), counts)


def sequence_bounds(prior: dict, counts: dict, batch: ContextBatch, gathered: PriorAtPairs) -> torch.Tensor:
    """``sum_rows [log B(a + n_m) - log B(a)]`` of every sequence (M,), B's rows sparse (only
    the pairs and context slots a sequence has: its other entries and rows add exactly 0); a
    group every sequence shares adds ``n_m . E log theta`` instead (:class:`FixedLogs`)."""
    out = _group_gain(prior["pi"], counts["pi"])
    out = out + _group_gain(prior["A"], counts["A"])
    at_pairs, slot_rows = gathered.at_pairs, gathered.slot_rows
    live = batch.pair_mask[:, None, :]
    n_B = counts["B"] * live
    if slot_rows is None:
        return out + (n_B * at_pairs).sum((1, 2))
    entries = ((torch.lgamma(at_pairs + n_B) - torch.lgamma(at_pairs)) * live).sum((1, 2))
    N = _slot_counts(n_B, batch)  # (M, K, Q); zero on padding slots: they add lgamma(r) - lgamma(r) = 0
    return out + entries - (torch.lgamma(slot_rows + N) - torch.lgamma(slot_rows)).sum((1, 2))


@dataclass
class SweepResult:
    """The E-step of one batch: counts of ``q(theta_m) = Dir(prior + counts)``, the bound of
    every sequence (M,), the state marginals (M, T, K) and the sweeps run."""

    counts: dict
    bounds: torch.Tensor
    marginals: torch.Tensor
    n_sweeps: int


def _hidden_update(elog: dict, batch: ContextBatch, family: str, phi):
    """The q(Z) update of one sweep: (its entropy ``H[q(Z)]`` (M,), expected counts, marginals).
    PF: the chain under ``E log theta`` (``H = log Z - counts . E log theta``); FF: one pass of
    :func:`ldhmm.inference.cavi.kernels.factorized_batch.factorized_pass` over the positions'
    pairs, ``phi`` (M, T, K) numpy, updated in place (None: started from the emissions)."""
    if family == "pf":
        post = forward_backward(elog["pi"], elog["A"], position_potentials(elog["B"], batch), batch.mask)
        counts = chain_counts(post, batch)
        energy = sum((counts[g] * elog[g]).reshape(batch.n_sequences, -1).sum(-1) for g in ("pi", "A", "B"))
        return post.log_normalizer - energy, counts, post.state_marginals
    initialize = phi is None
    if initialize:
        phi = np.zeros((*batch.mask.shape, elog["pi"].shape[-1]))
    entropy, counts = factorized_pass(
        batch.pair_index.numpy(),
        batch.mask.sum(1).numpy(),
        batch.pair_mask.sum(1).numpy(),
        elog["pi"].numpy(),
        elog["A"].numpy(),
        elog["B"].numpy(),
        phi,
        initialize,
    )
    if not np.all(np.isfinite(entropy)):
        raise FloatingPointError("the FF update of a contextual E-step is not finite")
    return (
        torch.from_numpy(entropy),
        {g: torch.from_numpy(c) for g, c in counts.items()},
        torch.from_numpy(phi),
    )


def e_step(
    prior: dict,
    batch: ContextBatch,
    counts: dict | None,
    max_sweeps: int,
    tol: float,
    family: str = "pf",
    marginals: torch.Tensor | None = None,
) -> SweepResult:
    """Coordinate ascent of every sequence of ``batch`` from ``counts`` (None: the prior): each
    sweep the q(Z) update of the ``family`` under ``E log theta`` (``"pf"``: the chain's
    forward-backward; ``"ff"``: one fully factorized pass, from ``marginals`` (M, T, K), the
    factors of before, or from the emissions where None), then ``q(theta)`` from its counts.
    The bound of a sequence at ``q(theta) = Dir(prior + counts)`` optimal for its q(Z) is
    ``H[q(Z)] + sum_rows [log B(a + n) - log B(a)]`` in either family. Stops when no sequence's
    bound moves by more than ``tol`` relative, or after ``max_sweeps`` (``tol = 0``: exactly
    ``max_sweeps``, the bounds evaluated after the last one only). The bound never decreases
    from one sweep to the next (both are coordinate ascent steps)."""
    if family not in ("pf", "ff"):
        raise ValueError(f"family must be 'pf' or 'ff', got {family!r}")
    gathered = prior_at_pairs(prior["B"], batch)
    phi = None if family == "pf" or marginals is None else marginals.numpy().copy()
    bounds = None
    sweep = 0
    while sweep < max_sweeps:
        sweep += 1
        elog = expected_logs(prior, counts, batch, gathered)
        entropy, counts, marginals = _hidden_update(elog, batch, family, phi)
        if family == "ff":
            phi = marginals.numpy()
        if tol <= 0 and sweep < max_sweeps:
            continue
        new = entropy + sequence_bounds(prior, counts, batch, gathered)
        done = bounds is not None and bool(((new - bounds).abs() <= tol * new.abs()).all())
        bounds = new
        if done:
            break
    return SweepResult(counts, bounds, marginals, sweep)


def _log_means(prior) -> torch.Tensor:
    """``log E theta`` of a group: its Dirichlet prior's mean, or a :class:`FixedLogs`' means."""
    if isinstance(prior, FixedLogs):
        return torch.log(prior.means)
    return torch.log(prior / prior.sum(-1, keepdim=True))


def _log_mean_at_pairs(beta, batch: ContextBatch, counts_B: torch.Tensor | None = None) -> torch.Tensor:
    """``log E B_m[k, c, v]`` at each pair (M, K, P; 0 on padding pairs) under ``Dir(beta + counts)``
    (``counts_B`` (M, K, P) or None: the prior), or a shared B's (:class:`FixedLogs`) means."""
    live = batch.pair_mask[:, None, :]
    if isinstance(beta, FixedLogs):
        return torch.log(beta.means[:, batch.pair_context, batch.pair_symbol].permute(1, 0, 2)) * live
    gathered = prior_at_pairs(beta, batch)
    at_pairs, slot_rows = gathered.at_pairs, gathered.slot_rows
    if counts_B is not None:
        at_pairs = at_pairs + counts_B
        slot_rows = slot_rows + _slot_counts(counts_B, batch)
    rows = torch.gather(slot_rows, 2, batch.pair_slot[:, None, :].expand_as(at_pairs))
    return (torch.log(at_pairs) - torch.log(rows)) * live


def mean_start(prior: dict, batch: ContextBatch) -> dict:
    """Counts of the chain under the log prior *means* (``log E theta``, not ``E log theta``):
    where a learned prior is sparse, the cold start's ``psi(a) - psi(a_0)`` all but forbids what
    the prior makes rare and coordinate ascent stays in that corner; the log mean does not
    (the ``"mean"`` start of :mod:`ldhmm.inference.cavi.sequence_starts`)."""
    M = batch.n_sequences
    post = forward_backward(
        _log_means(prior["pi"]).expand(M, -1),
        _log_means(prior["A"]).expand(M, -1, -1),
        position_potentials(_log_mean_at_pairs(prior["B"], batch), batch),
        batch.mask,
    )
    return chain_counts(post, batch)


def best_of_starts(
    prior: dict, batch: ContextBatch, max_sweeps: int, tol: float, family: str = "pf"
) -> SweepResult:
    """The E-step from the ``"prior"`` start (q(theta) = the prior) and from :func:`mean_start`,
    each sequence keeping the result of higher bound (the held-out E-step). The FF family adds
    the ``"chain"`` start: the PF family's held-out E-step, then FF from its counts and
    marginals (where the factorized ascent alone stays in a poorer optimum)."""
    if family == "ff":
        chain = best_of_starts(prior, batch, max_sweeps, tol, "pf")
        results = [
            e_step(prior, batch, None, max_sweeps, tol, "ff"),
            e_step(prior, batch, mean_start(prior, batch), max_sweeps, tol, "ff"),
            e_step(prior, batch, chain.counts, max_sweeps, tol, "ff", chain.marginals),
        ]
    else:
        results = [
            e_step(prior, batch, None, max_sweeps, tol),
            e_step(prior, batch, mean_start(prior, batch), max_sweeps, tol),
        ]
    best = results[0]
    for other in results[1:]:
        better = other.bounds > best.bounds
        if not bool(better.any()):
            continue
        pick = lambda a, b, w=better: torch.where(w.reshape((-1,) + (1,) * (a.dim() - 1)), b, a)  # noqa: E731
        best = SweepResult(
            {g: pick(best.counts[g], other.counts[g]) for g in best.counts},
            pick(best.bounds, other.bounds),
            pick(best.marginals, other.marginals),
            max(best.n_sweeps, other.n_sweeps),
        )
    return best


def point_e_step(log_theta: dict, batch: ContextBatch) -> SweepResult:
    """The contextual HMM with point parameters ``log_theta`` (``pi`` (K,), ``A`` (K, K), ``B``
    (K, C, V), log probabilities): each sequence's expected counts (pair layout), its exact
    ``log p(x)`` (M,) as ``bounds`` and its state marginals."""
    M = batch.n_sequences
    log_B = log_theta["B"][:, batch.pair_context, batch.pair_symbol].permute(1, 0, 2)
    post = forward_backward(
        log_theta["pi"].expand(M, -1),
        log_theta["A"].expand(M, -1, -1),
        position_potentials(log_B * batch.pair_mask[:, None, :], batch),
        batch.mask,
    )
    return SweepResult(chain_counts(post, batch), post.log_normalizer, post.state_marginals, 1)


def random_point_parameters(rng, n_states: int, n_contexts: int, n_symbols: int) -> dict:
    """Log parameters of a contextual HMM drawn from flat Dirichlets (``rng``: numpy Generator):
    ``pi`` (K,), ``A`` (K, K), ``B`` (K, C, V) — where Baum-Welch starts."""
    K, C, V = n_states, n_contexts, n_symbols
    draws = {
        "pi": rng.dirichlet(np.ones(K)),
        "A": rng.dirichlet(np.ones(K), size=K),
        "B": rng.dirichlet(np.ones(V), size=(K, C)),
    }
    return {g: torch.from_numpy(np.log(v)) for g, v in draws.items()}


def point_m_step(totals: dict, pseudocounts: dict) -> dict:
    """``log theta`` maximizing the expected complete log-likelihood plus the log of a symmetric
    ``Dir(1 + c)`` prior per row (``pseudocounts[g] = c``; 0: maximum likelihood):
    ``theta = (n + c) / sum (n + c)`` row by row, for ``totals`` of :func:`total_counts`."""
    out = {}
    for g, n in totals.items():
        smoothed = n + pseudocounts[g]
        out[g] = torch.log(smoothed) - torch.log(smoothed.sum(-1, keepdim=True))
    return out


def total_counts(counts: list, batches: list, shape_B: tuple) -> dict:
    """Every batch's expected counts added up: ``pi`` (K,), ``A`` (K, K), ``B`` (K, C, V)."""
    K, C, V = shape_B
    out = {
        "pi": torch.zeros(K, dtype=torch.float64),
        "A": torch.zeros(K, K, dtype=torch.float64),
        "B": torch.zeros(K * C * V, dtype=torch.float64),
    }
    states = torch.arange(K)[None, :, None]
    for c, batch in zip(counts, batches):
        out["pi"] += c["pi"].sum(0)
        out["A"] += c["A"].sum(0)
        keys = (states * C + batch.pair_context[:, None, :]) * V + batch.pair_symbol[:, None, :]  # (M, K, P)
        weights = (c["B"] * batch.pair_mask[:, None, :]).double()
        out["B"] += torch.bincount(keys.reshape(-1), weights.reshape(-1), minlength=K * C * V)
    out["B"] = out["B"].reshape(K, C, V)
    return out


def _draw_parameters(prior, counts, M: int):
    """What a pi or A group's importance draws come from: ``("draw", g)`` with ``g`` the (M, ...)
    Dirichlet parameters of q (a sequence group's ``prior + counts``, a shared group's q), or
    ``("fixed", log theta)`` for a point group."""
    if isinstance(prior, FixedLogs):
        if prior.concentration is None:
            return "fixed", prior.logs.expand(M, *prior.logs.shape)
        return "draw", prior.concentration.expand(M, *prior.concentration.shape).numpy()
    return "draw", (prior + counts).numpy()


def importance_log_weights(
    prior: dict, batch: ContextBatch, counts: dict, rng, n_samples: int
) -> torch.Tensor:
    """``log p(x_m | theta_s) + log p(theta_s) - log q(theta_s)`` for ``n_samples`` draws
    ``theta_s ~ q(theta_m) = Dir(prior + counts)`` of every sequence, (S, M): their
    log-mean-exp is the importance-sampled ``log p(x_m)``.

    Each row of B is drawn aggregated (by the Dirichlet's aggregation property): the symbols a
    sequence has in that context, and the rest lumped into one entry, which is all the
    likelihood sees. ``p / q`` of the aggregated rows is ``B(g) / B(a) * prod theta^-n`` with
    ``g = a + n`` (the counts are zero off the sequence's pairs). A group every sequence shares
    (:class:`FixedLogs`) is drawn from its q (the held-out predictive ``integral p(x | theta)
    q(theta)``: its weight factor is 1) or, a point, held at its value."""
    M, K = counts["pi"].shape
    gathered = prior_at_pairs(prior["B"], batch)
    live = batch.pair_mask[:, None, :]
    slot_index = batch.pair_slot[:, None, :].expand(M, K, -1)
    fixed = {name for name in ("pi", "A", "B") if isinstance(prior[name], FixedLogs)}
    B_fixed = prior["B"] if "B" in fixed else None
    if B_fixed is None or B_fixed.concentration is not None:  # B drawn: q(B_m), or a shared B's q
        drawn = gathered if B_fixed is None else prior_at_pairs(B_fixed.concentration, batch)
        at_pairs = (drawn.at_pairs + (0.0 if B_fixed is not None else counts["B"])) * live
        present = torch.zeros_like(drawn.slot_rows).scatter_add_(2, slot_index, drawn.at_pairs * live)
        rest = (drawn.slot_rows - present).clamp_min(0.0).numpy()  # (M, K, Q)
    g = {name: _draw_parameters(prior[name], counts.get(name), M) for name in ("pi", "A")}
    # p / q of the sequence groups: their collapsed gain (the shared and point groups' n . E log
    # theta that the bound holds taken out)
    gain = sequence_bounds(prior, counts, batch, gathered)
    for name in fixed:
        logs = gathered.at_pairs if name == "B" else prior[name].logs
        gain = gain - (counts[name] * logs).reshape(M, -1).sum(-1)
    tiny = np.finfo(np.float64).tiny
    out = torch.empty(n_samples, M, dtype=torch.float64)
    # draws side by side: S copies of the batch in one forward pass, S * M * T <= BATCH_POSITIONS
    per_pass = max(1, BATCH_POSITIONS // max(1, batch.mask.numel()))
    for start in range(0, n_samples, per_pass):
        S = min(per_pass, n_samples - start)
        log_theta = {}
        for name in ("pi", "A"):
            kind, value = g[name]
            if kind == "fixed":
                log_theta[name] = value.expand(S, *value.shape)
                continue
            d = rng.standard_gamma(np.broadcast_to(value, (S, *value.shape)))
            log_theta[name] = torch.log(torch.from_numpy(np.maximum(d / d.sum(-1, keepdims=True), tiny)))
        if B_fixed is not None and B_fixed.concentration is None:  # a point B
            log_theta["B"] = gathered.at_pairs.expand(S, -1, -1, -1)
        else:
            B = (
                torch.from_numpy(rng.standard_gamma(np.broadcast_to(at_pairs.numpy(), (S, *at_pairs.shape))))
                * live
            )
            rest_draw = torch.from_numpy(rng.standard_gamma(np.broadcast_to(rest, (S, *rest.shape))))
            index = slot_index.expand(S, -1, -1, -1)
            totals = rest_draw.scatter_add(3, index, B)  # (S, M, K, Q): each aggregated row's sum
            log_theta["B"] = (
                torch.log((B / torch.gather(totals, 3, index).clamp_min(tiny)).clamp_min(tiny)) * live
            )
        flat = {name: v.reshape(S * M, *v.shape[2:]) for name, v in log_theta.items()}
        tiled = ContextBatch(*(t.repeat((S,) + (1,) * (t.dim() - 1)) for t in _fields(batch)))
        post = forward_backward(flat["pi"], flat["A"], position_potentials(flat["B"], tiled), tiled.mask)
        energy = sum(
            (counts[name][None] * log_theta[name]).reshape(S, M, -1).sum(-1)
            for name in ("pi", "A", "B")
            if name not in fixed
        )
        out[start : start + S] = post.log_normalizer.reshape(S, M) - energy + gain
    return out


def _fields(batch: ContextBatch) -> tuple:
    return tuple(getattr(batch, f.name) for f in fields(batch))


def count_table(
    counts: list, batches: list, shape_B: tuple, pseudo_B: np.ndarray | None = None
) -> CountTable:
    """The count table (:class:`ldhmm.inference.cavi.kernels.dirichlet_multinomial.CountTable`)
    of groups ``pi`` (1, K), ``A`` (K, K) and ``B`` (K C, V) over every batch's expected counts
    (``counts[i]``: ``pi`` (M, K), ``A`` (M, K, K), ``B`` (M, K, P) of ``batches[i]``), entries
    in sequence order (the order of ``batches``, then of their rows). No batches: a table of
    the pseudo-counts alone (or of nothing).

    ``pseudo_B`` (C, V), optional: one more sequence after the last, with these counts in every
    state's emission rows (:func:`ldhmm.inference.contexts.smoothing_pseudocounts`): the M-step
    then also maximizes :func:`log_hyperprior`."""
    K, C, V = shape_B
    entry_parts = {"pi": [], "A": [], "B": []}
    row_parts = {"pi": [], "A": [], "B": []}
    offset = 0
    for counts_m, batch in zip(counts, batches):
        M = batch.n_sequences
        seq = np.arange(offset, offset + M)
        offset += M
        for g, values in (("pi", counts_m["pi"][:, None, :]), ("A", counts_m["A"])):
            v = values.double().numpy()
            m, r, d = np.nonzero(v > 0)
            entry_parts[g].append((r * v.shape[2] + d, seq[m], v[m, r, d]))
            tot = v.sum(-1)
            m, r = np.nonzero(tot > 0)
            row_parts[g].append((r, seq[m], tot[m, r]))
        nB = (counts_m["B"] * batch.pair_mask[:, None, :]).double().numpy()  # (M, K, P)
        m, k, p = np.nonzero(nB > 0)
        ctx, sym = batch.pair_context.numpy()[m, p], batch.pair_symbol.numpy()[m, p]
        entry_parts["B"].append(((k * C + ctx) * V + sym, seq[m], nB[m, k, p]))
        N = _slot_counts(torch.from_numpy(nB), batch).numpy()  # (M, K, Q)
        m, k, q = np.nonzero(N > 0)
        row_parts["B"].append((k * C + batch.slot_context.numpy()[m, q], seq[m], N[m, k, q]))
    if pseudo_B is not None:
        k, c, v = np.nonzero(np.broadcast_to(pseudo_B > 0, (K, C, V)))
        entry_parts["B"].append(((k * C + c) * V + v, np.full(k.size, offset), pseudo_B[c, v]))
        k, c = np.nonzero(np.broadcast_to(pseudo_B.sum(1) > 0, (K, C)))
        row_parts["B"].append((k * C + c, np.full(k.size, offset), pseudo_B.sum(1)[c]))
    keys, bounds, values = [], [0], []
    entry_tasks, row_tasks = {}, {}
    n_tasks = n_values = 0
    for g in ("pi", "A", "B"):
        for parts, tasks in ((entry_parts[g], entry_tasks), (row_parts[g], row_tasks)):
            parts = parts or [(np.zeros(0, dtype=np.int64),) * 2 + (np.zeros(0),)]
            key = np.concatenate([p[0] for p in parts]).astype(np.int64)
            seq = np.concatenate([p[1] for p in parts])
            val = np.concatenate([p[2] for p in parts])
            order = np.lexsort((seq, key))  # by key, then in sequence order
            key, val = key[order], val[order]
            unique, starts = np.unique(key, return_index=True)
            tasks[g] = slice(n_tasks, n_tasks + unique.size)
            n_tasks += unique.size
            keys.append(unique)
            ends = np.append(starts[1:], key.size)[: unique.size].astype(np.int64)
            bounds.extend((n_values + ends).tolist())
            n_values += key.size
            values.append(val)
    shapes = {"pi": (1, K), "A": (K, K), "B": (K * C, V)}
    return CountTable(
        shapes,
        entry_tasks,
        row_tasks,
        np.concatenate(keys),
        np.asarray(bounds, dtype=np.int64),
        np.concatenate(values).astype(np.float64),
    )


def m_step(
    prior: dict, table, min_value: float = MIN_CONCENTRATION, groups: tuple = ("pi", "A", "B")
) -> tuple[dict, bool]:
    """The priors of ``groups`` that maximize ``sum_m sum_rows [log B(a + n_m) - log B(a)]`` from
    ``prior`` over concentrations of at least ``min_value`` (every row an ascent: never lower),
    and whether a concentration reached the cap; the other groups of ``prior`` as they are.

    ``table``: the :func:`count_table` of every sequence's counts, or a function
    ``sums(alphas, rows)`` that returns their :func:`table_sums` (the partitions' sums added up,
    :mod:`ldhmm.inference.distributed.context_partition`)."""
    sums = table if callable(table) else (lambda alphas, rows: table_sums(table, alphas, rows))
    shapes = {g: tuple(prior[g].shape) for g in groups}
    initial = {g: prior[g].double().numpy().reshape(-1, shapes[g][-1]) for g in groups}
    result = maximize_collapsed(initial, sums, min_value=min_value)
    new = dict(prior)
    for g in groups:
        new[g] = torch.from_numpy(result.concentration[g].reshape(shapes[g]).copy())
    return new, result.capped


def log_hyperprior(prior_B: torch.Tensor, pseudo_B: np.ndarray | None) -> float:
    """``sum_(k, c) [log B(beta[k, c] + s[c]) - log B(beta[k, c])]``, with ``log B`` the log
    multivariate Beta function: the log of the (unnormalized) hyperprior that pseudo-counts
    ``s = pseudo_B`` (C, V) put on the emission priors ``beta`` (K, C, V); 0 without them.
    The M-step with ``count_table(..., pseudo_B)`` maximizes the bound plus this term."""
    if pseudo_B is None:
        return 0.0
    beta = prior_B.double()
    s = torch.from_numpy(np.ascontiguousarray(pseudo_B))[None].expand_as(beta)
    gain = torch.lgamma(beta + s).sum(-1) - torch.lgamma(beta).sum(-1)
    gain -= torch.lgamma(beta.sum(-1) + s.sum(-1)) - torch.lgamma(beta.sum(-1))
    return float(gain.sum())


def posterior_mean_logs(prior: dict, counts: dict, batch: ContextBatch) -> dict:
    """``log E_q[pi_m]`` (M, K), ``log E_q[A_m]`` (M, K, K) and ``log E_q[B_m]`` at each pair
    (M, K, P; 0 on padding pairs) under ``q(theta_m) = Dir(prior + counts)`` (a group every
    sequence shares: its means, :class:`FixedLogs`): the chain a decoding runs on
    (:func:`ldhmm.inference.ops.viterbi.viterbi_log`)."""
    M = batch.n_sequences
    out = {}
    for g in ("pi", "A"):
        a = prior[g]
        if isinstance(a, FixedLogs):
            out[g] = torch.log(a.means).expand(M, *a.means.shape)
        else:
            g_a = a + counts[g]
            out[g] = torch.log(g_a / g_a.sum(-1, keepdim=True))
    out["B"] = _log_mean_at_pairs(prior["B"], batch, counts["B"])
    return out


def posterior_mean_emissions(prior_B, counts_B: torch.Tensor, batch: ContextBatch, rows) -> torch.Tensor:
    """``E_q[B_m[k, c_m, v]]`` for one context row ``c_m`` per sequence (``rows`` (M,)), (M, K, V)
    (a B every sequence shares, :class:`FixedLogs`: its mean rows)."""
    M, K, _ = counts_B.shape
    rows = torch.as_tensor(rows, dtype=torch.long)
    if isinstance(prior_B, FixedLogs):
        return prior_B.means[:, rows, :].permute(1, 0, 2).clone()
    base = prior_B[:, rows, :].permute(1, 0, 2).clone()  # (M, K, V)
    hit = (batch.pair_context == rows[:, None]) & batch.pair_mask  # (M, P)
    n = counts_B * hit[:, None, :]
    base.scatter_add_(2, batch.pair_symbol[:, None, :].expand(M, K, -1), n)
    return base / base.sum(-1, keepdim=True)


def next_event_proba(q_next: torch.Tensor, rows_B: torch.Tensor) -> np.ndarray:
    """``p(x_(n+1) = v) = sum_k q(z_(n+1) = k) B[k, v]`` of each sequence, rows renormalized,
    float64 (M, V), from the next state's distribution (M, K) and the next position's emission
    rows (M, K, V)."""
    p = torch.einsum("mk,mkv->mv", q_next, rows_B)
    return (p / p.sum(-1, keepdim=True)).numpy()
