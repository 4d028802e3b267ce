"""Database-level parameters of a variant: what the M-step learns and the E-step holds fixed.

:class:`VariantParameters` holds, for each of pi, A, B, a learned or fixed Dirichlet prior
(per-sequence groups), a Dirichlet posterior (shared groups) or a point estimate (point groups),
as :class:`ldhmm.inference.sharing.ParameterSharing` says; :func:`init_parameters` gives the
seeded starting point of a fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .ops.dirichlet import expected_log_dirichlet
from .sharing import GROUPS, POINT, SEQUENCE, SHARED, ParameterSharing

__all__ = [
    "EVENT_DIMS",
    "HMM_START_CONCENTRATION",
    "group_shape",
    "VariantParameters",
    "init_parameters",
    "symbol_seeded_parameters",
    "hmm_started_parameters",
]

#: The total concentration of each learned prior row of a start from the database-level HMM
#: (:func:`hmm_started_parameters`): the row's probabilities times this. Large enough that
#: every sequence starts near the HMM's own posterior, small enough that the first M-step moves
#: the priors freely (10 and 100 end within 0.002 nats/token of it on Entree and MSNBC;
#: docs/performance.md, "Effort presets"). The default of the fitting setting
#: ``hmm_start_concentration``.
HMM_START_CONCENTRATION = 30.0
#: The Dirichlet event dimensions of each group's arrays.
EVENT_DIMS = {"pi": (-1,), "A": (-1, -2), "B": (-1, -2)}


@dataclass
class VariantParameters:
    """Database-level parameters of a variant.

    Attributes
    ----------
    sharing : ParameterSharing
    prior : dict[str, Tensor]
        Dirichlet concentration of every ``"sequence"`` and ``"shared"`` group:
        ``pi`` (K,), ``A`` (K, K) (row i is the prior of row i), ``B`` (K, V).
    posterior : dict[str, Tensor]
        Dirichlet posterior of every ``"shared"`` group (same shapes).
    log_point : dict[str, Tensor]
        Log-probabilities of every ``"point"`` group (same shapes; rows normalized).
    """

    sharing: ParameterSharing
    prior: dict = field(default_factory=dict)
    posterior: dict = field(default_factory=dict)
    log_point: dict = field(default_factory=dict)

    def _any(self) -> torch.Tensor:
        for d in (self.prior, self.posterior, self.log_point):
            if "B" in d:
                return d["B"]
        raise RuntimeError("parameters lack B")

    @property
    def n_states(self) -> int:
        return int(self._any().shape[0])

    @property
    def n_symbols(self) -> int:
        return int(self._any().shape[1])

    @property
    def dtype(self) -> torch.dtype:
        return self._any().dtype

    def fixed_expected_log(self, group: str) -> torch.Tensor:
        """E[log theta] of a database-level group, with a leading batch dimension of 1."""
        kind = self.sharing.kind(group)
        if kind == SHARED:
            return expected_log_dirichlet(self.posterior[group])[None]
        if kind == POINT:
            return self.log_point[group][None]
        raise ValueError(f"group {group} is per-sequence")

    def expected_logs(self, counts: dict, fixed: dict | None = None) -> dict:
        """``E log theta`` of every group: per-sequence groups from ``Dir(prior + counts)``
        (leading dimension M), database-level groups with a leading dimension of 1.

        ``fixed`` may carry the database-level values already computed (they do not change
        within an E-step).
        """
        # Digamma differences in float64 whatever the dtype: with concentrations up to 1e6,
        # float32 cannot even represent prior + counts (see docs/performance.md).
        elog = {
            g: expected_log_dirichlet(self.prior[g].double() + counts[g].double()).to(counts[g].dtype)
            for g in self.sharing.groups(SEQUENCE)
        }
        for g in GROUPS:
            if g not in elog:
                elog[g] = fixed[g] if fixed is not None else self.fixed_expected_log(g)
        return elog

    def clone(self) -> VariantParameters:
        return VariantParameters(
            self.sharing,
            {k: v.clone() for k, v in self.prior.items()},
            {k: v.clone() for k, v in self.posterior.items()},
            {k: v.clone() for k, v in self.log_point.items()},
        )


def group_shape(group: str, K: int, V: int) -> tuple:
    """Shape of a group's array: pi (K,), A (K, K), B (K, V)."""
    return {"pi": (K,), "A": (K, K), "B": (K, V)}[group]


def init_parameters(
    sharing: ParameterSharing,
    n_states: int,
    n_symbols: int,
    symbol_frequencies: np.ndarray | None = None,
    seed: int = 0,
    prior_concentration: float = 1.0,
    n_tokens: float = 1.0,
    dtype=torch.float64,
) -> VariantParameters:
    """Random asymmetric starting parameters (identical rows would stay identical forever).

    Parameters
    ----------
    sharing : ParameterSharing
    n_states, n_symbols : int
    symbol_frequencies : array of shape (V,), optional
        Empirical symbol frequencies; emission starting points are random perturbations of it.
    seed : int
    prior_concentration : float
        Per-entry concentration of fixed priors (``"shared"`` groups, and ``"sequence"`` groups
        when the prior is not learned).
    n_tokens : float
        Size of the database, used to give shared posteriors a data-sized starting point.
    dtype : torch.dtype

    Returns
    -------
    VariantParameters
    """
    K, V = n_states, n_symbols
    gen = torch.Generator().manual_seed(int(seed))
    if symbol_frequencies is None:
        freq = torch.full((V,), 1.0 / V, dtype=dtype)
    else:
        freq = torch.as_tensor(symbol_frequencies, dtype=dtype)
        freq = (freq + 1e-3) / (freq + 1e-3).sum()

    def random_rows(group):
        shape = group_shape(group, K, V)
        noise = 0.5 + torch.rand(shape, generator=gen, dtype=dtype)
        base = freq.expand(shape) if group == "B" else torch.ones(shape, dtype=dtype)
        rows = base * noise
        return rows / rows.sum(-1, keepdim=True)

    # one group at a time, in GROUPS' order: the generator's draws stay those of every release
    rows = {}
    for group in GROUPS:
        rows[group] = random_rows(group)
    # Mean entry ~1: neither sparse nor so concentrated that sequences cannot differ.
    learned = {group: r * r.shape[-1] for group, r in rows.items()}
    return _parameters_from_rows(sharing, rows, learned, K, prior_concentration, n_tokens)


def symbol_seeded_parameters(
    sharing: ParameterSharing,
    n_states: int,
    symbol_counts: np.ndarray,
    prior_concentration: float = 1.0,
    dtype=torch.float64,
) -> VariantParameters | None:
    """The symbol-seeded starting point: state k's emission row seeded on the k-th most frequent
    symbol, every initial and transition entry equal (docs/math.md, "Restarts and
    initialization").

    Learned emission priors ``beta[k] = V / 2 * frequency + 5 * onehot(k-th most frequent)``
    (frequencies smoothed by 1e-3 as in :func:`init_parameters`),
    ``alpha_pi`` and ``alpha_A`` all 1; database-level and point groups take the same rows'
    means. Random starts spread every state over the frequent symbols, and under sparse priors
    (each sequence uses a few states) EM then keeps a state that mixes several symbols; this
    start gives each state a symbol of its own.

    Parameters
    ----------
    sharing : ParameterSharing
    n_states : int
        K.
    symbol_counts : array of shape (V,)
        How often each symbol occurs in the training data.
    prior_concentration : float
        As in :func:`init_parameters`.
    dtype : torch.dtype

    Returns
    -------
    VariantParameters, or None where fewer than K symbols occur (two states would start alike,
    and identical states stay identical).
    """
    K = n_states
    counts = np.asarray(symbol_counts, dtype=np.float64)
    V = counts.shape[0]
    if np.count_nonzero(counts) < K:
        return None
    top = np.argsort(-counts, kind="stable")[:K]
    # smoothed as init_parameters smooths: a symbol absent from the data keeps a positive concentration
    freq = counts / counts.sum() + 1e-3
    beta = np.tile(freq / freq.sum() * V * 0.5, (K, 1))
    beta[np.arange(K), top] += 5.0
    learned = {
        "pi": torch.ones(group_shape("pi", K, V), dtype=dtype),
        "A": torch.ones(group_shape("A", K, V), dtype=dtype),
        "B": torch.as_tensor(beta, dtype=dtype),
    }
    rows = {group: c / c.sum(-1, keepdim=True) for group, c in learned.items()}
    return _parameters_from_rows(sharing, rows, learned, K, prior_concentration, float(counts.sum()))


def hmm_started_parameters(
    sharing: ParameterSharing,
    hmm: VariantParameters,
    concentration: float = HMM_START_CONCENTRATION,
    prior_concentration: float = 1.0,
    n_tokens: float = 1.0,
) -> VariantParameters:
    """The start from the database-level HMM: every group's rows the HMM's probabilities.

    Parameters
    ----------
    sharing : ParameterSharing
        The variant to start.
    hmm : VariantParameters
        A fitted HMM: every group a point estimate (``log_point``), rows (K,), (K, K), (K, V).
    concentration : float
        Total concentration of each learned prior row (the row times it).
    prior_concentration, n_tokens : float
        As in :func:`init_parameters` (fixed priors, shared posteriors).

    Returns
    -------
    VariantParameters
    """
    rows = {g: hmm.log_point[g].exp() for g in GROUPS}
    rows = {g: r / r.sum(-1, keepdim=True) for g, r in rows.items()}
    learned = {g: r * concentration for g, r in rows.items()}
    return _parameters_from_rows(sharing, rows, learned, hmm.n_states, prior_concentration, n_tokens)


def _parameters_from_rows(
    sharing: ParameterSharing, rows: dict, learned: dict, K: int, prior_concentration: float, n_tokens: float
) -> VariantParameters:
    """Starting parameters from each group's mean rows (``rows``) and, for groups whose prior
    is learned per sequence, its starting concentrations (``learned``)."""
    params = VariantParameters(sharing)
    for group in GROUPS:
        kind = sharing.kind(group)
        if kind == SEQUENCE:
            if sharing.learn_prior:
                params.prior[group] = learned[group]
            else:
                params.prior[group] = torch.full_like(rows[group], prior_concentration)
        elif kind == SHARED:
            params.prior[group] = torch.full_like(rows[group], prior_concentration)
            scale = n_tokens / (K if group != "pi" else max(n_tokens, 1.0))
            params.posterior[group] = params.prior[group] + rows[group] * max(scale, 1.0)
        else:
            params.log_point[group] = torch.log(rows[group])
    return params
