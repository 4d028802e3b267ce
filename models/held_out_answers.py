"""The held-out passes' results as the estimator's per-sequence methods return them.

:func:`ldhmm.models.held_out.held_out` runs a pass where the data lives and hands back each
partition's rows; the functions here shape them for
:class:`ldhmm.models.variant_hmm.VariantHMM`'s ``impossible_events``, ``posterior`` and
``log_marginal_is`` (arrays in the input order, a stacked posterior, importance-sampling
diagnostics), and name the variational family its held-out bound belongs to
(:func:`bound_family`). The methods that only put one array back in order call
:mod:`ldhmm.models.held_out` themselves.
"""

from __future__ import annotations

import numpy as np

from ..inference.cavi.posterior import stack_posterior
from ..inference.ops.importance import ImportanceEstimate
from .held_out import by_key, check_importance_arguments, held_out, importance_memory_check, in_input_order

__all__ = ["bound_family", "first_impossible_events", "posterior_arrays", "importance_log_marginals"]


def bound_family(guide, sharing) -> str:
    """The variational family of a held-out bound: the guide's family of q(Z) (``"PF"``,
    ``"FF"``, a guide's own ``score_family`` or ``name``), and, for a sharing other than
    LDHMM's, which of pi, A, B are per sequence, shared or point estimates (their q(theta)
    differs, and so does the bound's gap)."""
    family = getattr(guide, "score_family", None) or getattr(guide, "name", "custom")
    family = {"pf": "PF", "ff": "FF"}.get(family, family)
    if (sharing.pi, sharing.A, sharing.B) == ("sequence", "sequence", "sequence"):
        return family
    return f"{family}; pi {sharing.pi}, A {sharing.A}, B {sharing.B}"


def first_impossible_events(model, sequences) -> np.ndarray:
    """(M, 2) int64 in the input order: the position and symbol of the first event of each
    sequence that no state path of ``model`` reaches, or (-1, -1)."""
    results, _ = held_out(model, "impossible", sequences)
    if not results:
        return np.empty((0, 2), dtype=np.int64)
    return by_key(results, False).astype(np.int64)


def posterior_arrays(model, sequences, backend: str = "local", client=None, n_partitions=None, out=None):
    """The held-out posterior of each sequence, stacked
    (:func:`ldhmm.inference.cavi.posterior.stack_posterior`: ``g_pi`` (M, K), ``g_A`` (M, K, K),
    ``g_B`` (M, K, V) or its sparse counts, ``state_marginals``, ``elbo`` (M,)), in the input
    order; a directory input's in partition order with ``sequence`` (the M ids). With ``out``:
    the Parquet paths written."""
    found = held_out(model, "posterior", sequences, backend, client, n_partitions, out)
    if out is not None:
        return found
    results, directory = found
    if directory:
        result = stack_posterior(
            [r for _, rows in results for r in rows], model.params_, model.sparse_emissions
        )
        result["sequence"] = [k for keys, _ in results for k in keys]
        return result
    return stack_posterior(in_input_order(results), model.params_, model.sparse_emissions)


def importance_log_marginals(
    model,
    sequences,
    n_samples: int,
    seed: int,
    backend: str = "local",
    client=None,
    n_partitions=None,
    out=None,
    diagnostics: bool = False,
):
    """Importance-sampled ``log p(x_m)`` of each sequence under ``model`` (the arguments and
    what it returns: :meth:`ldhmm.models.variant_hmm.VariantHMM.log_marginal_is`). Refused
    before anything is allocated when the draws would not fit in memory."""
    check_importance_arguments(n_samples, seed)
    if diagnostics and out is not None:
        raise ValueError("diagnostics=True returns the estimates: it does not write them (out=)")
    method = "log_marginal_is_diagnostics" if diagnostics else "log_marginal_is"
    check = importance_memory_check(model, int(n_samples))
    found = held_out(
        model, method, sequences, backend, client, n_partitions, out, (int(n_samples),), int(seed), check
    )
    if out is not None:
        return found
    if not diagnostics:
        return by_key(*found, "log_marginal")
    if found[1]:
        raise ValueError("diagnostics=True takes sequences in memory, not a partitioned directory")
    # each row: the estimate, its standard error, its effective sample size
    values = by_key(*found).reshape(-1, 3)
    return ImportanceEstimate(values[:, 0], values[:, 1], values[:, 2], np.full(len(values), int(n_samples)))
