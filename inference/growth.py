"""Growing a fit by one state: the K-state starting point made by splitting a state of a (K-1)-state fit.

:func:`split_state` is the move that :meth:`ldhmm.models.variant_hmm.VariantHMM.fit_path` starts
each K after the first from (docs/math.md, "Growing K by splitting a state"). State ``k`` of the
(K-1)-state parameters becomes two states, ``k`` and a new last state ``K - 1``, that share what
``k`` had:

* columns (where the chain goes: ``pi`` and the columns of ``A``) are divided between the two,
  ``(1 - w)`` and ``w``. For a Dirichlet prior this keeps the distribution of the sum of the two
  entries (the aggregation property), so the prior of going to "``k`` or its copy" is the one of
  going to ``k``; for shared posteriors and point estimates it keeps the mass of ``k``;
* rows (what the chain does from there: the row of ``A`` and the emission row ``B``) are copied,
  so both copies move and emit as ``k`` did.

Two exact copies would stay copies (EM is deterministic and every update treats them alike), so
a seeded, antisymmetric perturbation ``exp(+-delta u)`` of the copied rows lets them separate;
fixed priors (not learned) are copied, never divided or perturbed: they are the model's
settings, not something EM learned.
"""

from __future__ import annotations

import dataclasses

import torch

from .parameters import VariantParameters
from .sharing import GROUPS, POINT, SEQUENCE, SHARED

__all__ = [
    "SPLIT_WEIGHT",
    "SPLIT_JITTER",
    "UNUSED_WEIGHT",
    "split_state",
    "pad_states",
    "expected_occupancy",
]

#: Share ``w`` of the new copy in the columns of the split state (``1 - w`` stays).
SPLIT_WEIGHT = 0.5
#: Size ``delta`` of the antisymmetric perturbation of the copied rows (log scale).
SPLIT_JITTER = 0.1
#: Share of the copy in a split that adds an unused state (:func:`pad_states`): its column
#: concentrations end at the M-step's lower bound.
UNUSED_WEIGHT = 1e-12


def _pad(t: torch.Tensor, dims: tuple[int, ...], n_new: int) -> torch.Tensor:
    """``t`` with ``n_new`` zero entries appended along each of ``dims``."""
    for dim in dims:
        shape = list(t.shape)
        shape[dim] = n_new
        t = torch.cat([t, torch.zeros(shape, dtype=t.dtype)], dim=dim)
    return t


def pad_states(states: list, n_states: int, n_new: int = 1) -> list | None:
    """Per-sequence states of a ``n_states``-state fit with ``n_new`` unused states appended
    (the last ones): no expected visits, counts or state marginals there.

    Under parameters split from that fit with a vanishing copy (:data:`UNUSED_WEIGHT`), each
    sequence's bound from this state is the fit's, up to the copy's vanishing prior mass: EM
    continued from here cannot end below the fit (docs/math.md, "Growing K by splitting a
    state").

    Parameters
    ----------
    states : list of BucketState
        Counts ``pi`` (M_b, K), ``A`` (M_b, K, K), ``B`` (M_b, K, W); the guide's state None or
        a tensor of state marginals (..., K) (the FF guide's ``phi`` (M_b, T, K)).
    n_states : int
        ``K``.
    n_new : int

    Returns
    -------
    list of BucketState (new tensors; ``states`` is not changed), or None where a guide's state
    is of another kind (it cannot be padded).
    """
    out = []
    for st in states:
        guide_state = st.guide_state
        if guide_state is not None:
            if not isinstance(guide_state, torch.Tensor) or guide_state.shape[-1] != n_states:
                return None
            guide_state = _pad(guide_state, (guide_state.dim() - 1,), n_new)
        counts = {
            "pi": _pad(st.counts["pi"], (1,), n_new),
            "A": _pad(st.counts["A"], (1, 2), n_new),
            "B": _pad(st.counts["B"], (1,), n_new),
        }
        out.append(dataclasses.replace(st, counts=counts, guide_state=guide_state, sum_expected_log={}))
    return out


def _split_columns(x: torch.Tensor, k: int, weight: float) -> torch.Tensor:
    """``x`` (..., D) with a new last column ``weight * x[..., k]``, column ``k`` scaled by ``1 - weight``."""
    new = x[..., k : k + 1] * weight
    out = torch.cat([x, new], dim=-1)
    out[..., k] = x[..., k] * (1.0 - weight)
    return out


def _copy_columns(x: torch.Tensor, k: int) -> torch.Tensor:
    """``x`` (..., D) with a copy of column ``k`` appended."""
    return torch.cat([x, x[..., k : k + 1]], dim=-1)


def _copy_row(x: torch.Tensor, k: int) -> torch.Tensor:
    """``x`` (R, D) with a copy of row ``k`` appended."""
    return torch.cat([x, x[k : k + 1]], dim=0)


def _jitter_rows(x: torch.Tensor, k: int, noise: torch.Tensor, delta: float, log: bool) -> torch.Tensor:
    """Rows ``k`` and the last of ``x`` (R, D) times ``exp(+delta u)`` and ``exp(-delta u)``
    (added to log-probabilities when ``log``); ``noise`` is ``u`` (D,), in [-1, 1]."""
    out = x.clone()
    step = delta * noise
    if log:
        out[k] = x[k] + step
        out[-1] = x[-1] - step
        return out - torch.logsumexp(out, dim=-1, keepdim=True)
    out[k] = x[k] * torch.exp(step)
    out[-1] = x[-1] * torch.exp(-step)
    return out


def _split_group(group: str, x: torch.Tensor, k: int, weight: float, split: bool) -> torch.Tensor:
    """One group's array with state ``k`` split (``split``: divide the columns; else copy them)."""
    columns = _split_columns if split else (lambda a, j, _: _copy_columns(a, j))
    if group == "pi":
        return columns(x, k, weight)
    if group == "A":
        return _copy_row(columns(x, k, weight), k)
    return _copy_row(x, k)


def split_state(
    params: VariantParameters,
    state: int,
    *,
    weight: float = SPLIT_WEIGHT,
    jitter: float = SPLIT_JITTER,
    seed: int = 0,
    min_value: float = 0.0,
    max_value: float = float("inf"),
) -> VariantParameters:
    """The (K+1)-state parameters with ``state`` of ``params`` split in two (the module docstring).

    Parameters
    ----------
    params : VariantParameters
        K states: ``pi`` (K,), ``A`` (K, K), ``B`` (K, V) in each of ``prior`` (learned or
        fixed Dirichlet priors), ``posterior`` (shared groups) and ``log_point`` (point groups).
    state : int
        The state ``k`` split; its copy is the new last state, ``K``.
    weight : float
        ``w`` in (0, 1): the copy's share of ``k``'s columns.
    jitter : float
        ``delta >= 0``: rows ``k`` and ``K`` of ``A`` and ``B`` are multiplied by
        ``exp(delta u)`` and ``exp(-delta u)`` with ``u`` uniform in [-1, 1] (per row entry),
        drawn from ``seed``: learned priors, shared posteriors (their count part) and point
        estimates (renormalized); fixed priors are copied unchanged.
    seed : int
    min_value, max_value : float
        Learned concentrations are held in this box (the M-step's).

    Returns
    -------
    VariantParameters with K + 1 states, same sharing and dtype; ``params`` is not changed.
    """
    K = params.n_states
    if not 0 <= int(state) < K:
        raise ValueError(f"state must be in 0..{K - 1}, got {state!r}")
    if not 0.0 < weight < 1.0:
        raise ValueError(f"weight must be in (0, 1), got {weight!r}")
    if jitter < 0:
        raise ValueError(f"jitter must be >= 0, got {jitter!r}")
    k = int(state)
    sharing = params.sharing
    gen = torch.Generator().manual_seed(int(seed))
    noise = {
        g: 2.0 * torch.rand(d, generator=gen, dtype=torch.float64) - 1.0
        for g, d in (("A", K + 1), ("B", params.n_symbols))
    }
    out = VariantParameters(sharing)
    for g in GROUPS:
        kind = sharing.kind(g)
        learned = kind == SEQUENCE and sharing.learn_prior
        if kind in (SEQUENCE, SHARED):
            prior = params.prior[g]
            new_prior = _split_group(g, prior, k, weight, split=learned)
            if learned and g != "pi":
                new_prior = _jitter_rows(new_prior, k, noise[g].to(prior.dtype), jitter, log=False)
            if learned:
                new_prior = new_prior.clamp(min_value, max_value)
            out.prior[g] = new_prior
        if kind == SHARED:
            # the posterior's count part (posterior - prior) is split like the mass of a point estimate
            counts = params.posterior[g] - params.prior[g]
            new_counts = _split_group(g, counts, k, weight, split=True)
            if g != "pi":
                new_counts = _split_rows_mass(new_counts, k, weight)
                new_counts = _jitter_rows(new_counts, k, noise[g].to(counts.dtype), jitter, log=False)
            out.posterior[g] = out.prior[g] + new_counts
        elif kind == POINT:
            log_point = params.log_point[g]
            new_log = torch.log(_split_group(g, log_point.exp(), k, weight, split=True))
            if g != "pi":
                new_log = _jitter_rows(new_log, k, noise[g].to(log_point.dtype), jitter, log=True)
            out.log_point[g] = new_log
    return out


def _split_rows_mass(counts: torch.Tensor, k: int, weight: float) -> torch.Tensor:
    """Expected counts (R, D) whose rows ``k`` and the last are both ``k``'s: the visits of ``k``
    divided between them, ``1 - weight`` and ``weight``."""
    out = counts.clone()
    out[k] = counts[k] * (1.0 - weight)
    out[-1] = counts[-1] * weight
    return out


def _mean(params: VariantParameters, group: str) -> torch.Tensor:
    """The mean of a group's database-level distribution: the prior mean (per-sequence groups),
    the posterior mean (shared groups) or the point estimate, rows normalized."""
    kind = params.sharing.kind(group)
    if kind == POINT:
        return params.log_point[group].double().exp()
    conc = (params.posterior if kind == SHARED else params.prior)[group].double()
    return conc / conc.sum(-1, keepdim=True)


def expected_occupancy(params: VariantParameters, length: float) -> torch.Tensor:
    """Expected visits of each state in a sequence of ``length`` positions under the mean
    initial distribution and the mean transition matrix (:func:`_mean`): ``sum_(t < length)
    pi A^t``, shape (K,), float64. It orders the candidates of a split (most visited first)
    from the parameters alone."""
    pi, A = _mean(params, "pi"), _mean(params, "A")
    steps = max(int(round(float(length))), 1)
    visits = torch.zeros_like(pi)
    p = pi
    for _ in range(steps):
        visits = visits + p
        p = p @ A
    return visits
