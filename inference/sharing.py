"""Which of pi, A, B is per-sequence, shared with a posterior, or a shared point estimate.

HMM, VBHMM, HMMV and LDHMM are one model with different sharing (docs/math.md, "Variants"):

=========  ==========  ==========  ==========  ==============
variant    pi          A           B           prior
=========  ==========  ==========  ==========  ==============
LDHMM      sequence    sequence    sequence    learned
VBHMM      shared      shared      shared      fixed
HMMV       point       sequence    point       fixed
HMM        point       point       point       (none)
=========  ==========  ==========  ==========  ==============

- ``"sequence"``: every sequence has its own parameter with posterior ``Dir(g_m)``, drawn from the
  database-level Dirichlet prior (learned by Newton-Raphson when ``learn_prior``).
- ``"shared"``: one parameter for the database with a Dirichlet posterior and a fixed prior
  (variational Bayes).
- ``"point"``: one parameter for the database, a point estimate (maximum likelihood, or MAP
  with ``pseudocount``).

A new variant is a new :class:`ParameterSharing`; the E- and M-step code
(:mod:`ldhmm.inference.cavi.expectation`, :mod:`ldhmm.inference.cavi.maximization`) reads
nothing else. For example, "LDHMM with one emission matrix for everybody" is
``ParameterSharing(B="point")``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = [
    "SEQUENCE",
    "SHARED",
    "POINT",
    "GROUPS",
    "ParameterSharing",
    "LDHMM_SHARING",
    "VBHMM_SHARING",
    "HMMV_SHARING",
    "HMM_SHARING",
]

SEQUENCE = "sequence"
SHARED = "shared"
POINT = "point"
GROUPS = ("pi", "A", "B")
_KINDS = (SEQUENCE, SHARED, POINT)


@dataclass(frozen=True)
class ParameterSharing:
    """Declarative description of a model variant.

    Parameters
    ----------
    pi, A, B : {"sequence", "shared", "point"}
    learn_prior : bool
        Learn the Dirichlet prior of the ``"sequence"`` groups by Newton-Raphson (LDHMM) or keep
        it fixed (HMMV). Priors of ``"shared"`` groups are always fixed.
    pseudocount : float
        Added to the expected counts of ``"point"`` groups in the M-step (0 is maximum
        likelihood; a positive value is MAP with a symmetric Dirichlet(1 + pseudocount) prior).
    """

    pi: str = SEQUENCE
    A: str = SEQUENCE
    B: str = SEQUENCE
    learn_prior: bool = True
    pseudocount: float = 0.0

    def __post_init__(self):
        for group in GROUPS:
            kind = getattr(self, group)
            if kind not in _KINDS:
                raise ValueError(f"sharing of {group} must be one of {_KINDS}, got {kind!r}")
        if self.pseudocount < 0:
            raise ValueError(f"pseudocount must be >= 0, got {self.pseudocount}")

    def kind(self, group: str) -> str:
        return getattr(self, group)

    def groups(self, kind: str) -> list[str]:
        return [g for g in GROUPS if getattr(self, g) == kind]

    @property
    def has_sequence_groups(self) -> bool:
        return bool(self.groups(SEQUENCE))

    def to_dict(self) -> dict:
        return asdict(self)


LDHMM_SHARING = ParameterSharing()
VBHMM_SHARING = ParameterSharing(pi=SHARED, A=SHARED, B=SHARED, learn_prior=False)
HMMV_SHARING = ParameterSharing(pi=POINT, A=SEQUENCE, B=POINT, learn_prior=False)
HMM_SHARING = ParameterSharing(pi=POINT, A=POINT, B=POINT, learn_prior=False)
