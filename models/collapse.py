"""Whether the per-user layer of a fitted model collapsed: do the users share one HMM?

An LDHMM draws each user's pi, A and B from Dirichlet priors learned for the database. When the
users' sequences agree so closely that their own parameters do not pay, the M-step drives the
concentrations of a prior to its cap (:data:`ldhmm.inference.ops.dirichlet.MAX_CONCENTRATION`,
1e6): every user then has, to about 1e-3, the prior's mean. That is a finding about the data, not
a failure of the fit (the model is then one shared HMM), and an analyst should read it in words
beside the fit.

:func:`diagnose_collapse` says, for each per-user group (pi, A, B), how many rows of its prior
sit at the cap, and in one sentence what that means (``"the users share one HMM: every prior is
at its cap, so per-user dynamics do not pay on this data"``). Given the users' posterior means
(:meth:`VariantHMM.posterior`), :func:`users_differ` says whether they differ at all: the largest
difference between two users' posterior means of any entry.

A row counts as at the cap when its largest concentration is within a factor
:data:`CAP_FACTOR` of the cap: a Dirichlet row of total at least 1e5 lets a probability vary
between users by a standard deviation of at most 0.0016.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..inference.ops.dirichlet import MAX_CONCENTRATION
from ..inference.sharing import GROUPS, SEQUENCE

__all__ = [
    "SHARED_HMM",
    "CAP_FACTOR",
    "USERS_ALIKE",
    "CollapseDiagnosis",
    "diagnose_collapse",
    "users_differ",
    "group_list",
    "share_at_cap",
]

#: A prior row whose largest concentration is at least ``MAX_CONCENTRATION / CAP_FACTOR`` is at
#: the cap.
CAP_FACTOR = 10.0
#: The sentence of a model whose every per-user prior is at its cap.
SHARED_HMM = (
    "the users share one HMM: every prior is at its cap, so per-user dynamics do not pay on this data"
)
#: Users whose posterior means differ by at most this much (any entry, any two users) do not
#: differ.
USERS_ALIKE = 1e-3


@dataclass(frozen=True)
class CollapseDiagnosis:
    """Which per-user priors sit at their cap, and what it means.

    Attributes
    ----------
    per_user : tuple of str
        The model's per-user groups (``"pi"``, ``"A"``, ``"B"`` whose sharing is ``"sequence"``).
    rows_at_cap : dict of str to (int, int)
        Per group: (rows of its prior at the cap, rows). pi has 1 row, A and B have K.
    largest : dict of str to float
        Per group: the largest concentration of its prior.
    collapsed : bool
        Every row of every per-user prior is at the cap: the users share one HMM.
    sentence : str
        What it means, one sentence (no final period).
    """

    per_user: tuple
    rows_at_cap: dict
    largest: dict
    collapsed: bool
    sentence: str

    def line(self) -> str:
        """The sentence with the numbers, for a terminal: ``"per-user priors: ..."``."""
        if not self.per_user:
            return f"per-user priors: {self.sentence}"
        counts = "; ".join(
            f"{g}: {n} of {rows} row{'s' if rows > 1 else ''} at the cap, largest {self.largest[g]:.3g}"
            for g, (n, rows) in self.rows_at_cap.items()
        )
        return f"per-user priors: {self.sentence} ({counts}; cap {MAX_CONCENTRATION:.0e})"


def group_list(groups) -> str:
    """``["pi"]`` -> ``"pi"``; ``["pi", "A"]`` -> ``"pi and A"``; three: ``"pi, A and B"``."""
    groups = list(groups)
    return groups[0] if len(groups) == 1 else ", ".join(groups[:-1]) + " and " + groups[-1]


def _rows_at_cap(concentration: np.ndarray) -> tuple[int, int]:
    rows = np.atleast_2d(np.asarray(concentration, dtype=np.float64))
    at_cap = rows.max(axis=-1) >= MAX_CONCENTRATION / CAP_FACTOR
    return int(at_cap.sum()), int(at_cap.size)


def diagnose_collapse(params) -> CollapseDiagnosis:
    """The :class:`CollapseDiagnosis` of a fitted model's parameters (``model.params_``).

    Parameters
    ----------
    params : ModelParams
        ``sharing`` says which groups are per-user; ``prior[g]`` is the learned prior of such a
        group: pi (K,), A (K, K), B (K, V) (any array-like or tensor, read as float64).
    """
    per_user = tuple(g for g in GROUPS if params.sharing.kind(g) == SEQUENCE)
    if not per_user:
        return CollapseDiagnosis((), {}, {}, False, "no group is drawn per user: the model is one shared HMM")
    priors = {g: np.asarray(_numpy(params.prior[g]), dtype=np.float64) for g in per_user}
    rows = {g: _rows_at_cap(priors[g]) for g in per_user}
    largest = {g: float(priors[g].max()) for g in per_user}
    full = [g for g in per_user if rows[g][0] == rows[g][1]]
    some = [g for g in per_user if 0 < rows[g][0] < rows[g][1]]
    free = [g for g in per_user if g not in full]
    collapsed = len(full) == len(per_user)
    if collapsed:
        sentence = SHARED_HMM
    elif full:
        sentence = (
            f"the users share {group_list(full)}: every row of {'its' if len(full) == 1 else 'their'} "
            f"prior is at its cap; {group_list(free)} still differ{'s' if len(free) == 1 else ''} "
            "between users"
        )
    elif some:
        sentence = (
            f"some rows of the priors of {group_list(some)} are at their cap, shared by every user; "
            "the other rows differ between users"
        )
    else:
        sentence = "no prior is at its cap: the users have dynamics of their own"
    return CollapseDiagnosis(per_user, rows, largest, collapsed, sentence)


def share_at_cap(model) -> float:
    """The share of the rows of a fitted model's per-user priors that sit at the cap (pi's one
    row, A's and B's K rows each, counted alike): 1.0 when the users share one HMM; NaN for a
    model without per-user priors (no ``params_``, or no group drawn per user)."""
    params = getattr(model, "params_", None)
    if params is None or not hasattr(params, "sharing"):
        return float("nan")
    d = diagnose_collapse(params)
    rows = sum(n for _, n in d.rows_at_cap.values())
    return sum(k for k, _ in d.rows_at_cap.values()) / rows if rows else float("nan")


def users_differ(means) -> tuple[float, str]:
    """How much the users' posterior means differ: the largest difference between two users'
    posterior means of any entry, and a sentence.

    Parameters
    ----------
    means : list of np.ndarray, each of shape (M, ...)
        The users' posterior means of their per-user groups (M users); an array with no entry
        beyond the first axis is skipped.

    Returns
    -------
    (float, str): the largest difference (0.0 with fewer than two users or no per-user group)
    and ``"the users' posterior means differ by at most 5e-07: the users do not differ"`` (or
    ``"... by up to 0.41"``).
    """
    ranges = [
        float(np.ptp(np.reshape(m, (len(m), -1)), axis=0).max())
        for m in means
        if len(m) > 1 and np.reshape(m, (len(m), -1)).shape[1]
    ]
    if not ranges:
        return 0.0, "one user, or no per-user group: nothing to compare between users"
    spread = max(ranges)
    if spread <= USERS_ALIKE:
        return spread, f"the users' posterior means differ by at most {spread:.1g}: the users do not differ"
    return spread, f"the users' posterior means differ by up to {spread:.2g} (an entry of pi, A or B)"


def _numpy(value):
    """A tensor or array as a numpy array (a torch tensor detached, on the CPU)."""
    if hasattr(value, "detach"):
        return value.detach().cpu().double().numpy()
    return value
