"""Generative models: the LDHMM Pyro model, the estimators users call, and the harness registry.

:class:`SequenceModel` is the base of every model the comparison harness runs (LDHMM, its
variants and the baselines); :func:`register` enters a model class into the harness.
"""

from .base import SCORE_KINDS, NotFittedError, SequenceModel, SequenceModelProtocol
from .ldhmm import LDHMM
from .pyro_model import ldhmm_model, sample_database
from .registry import ModelSpec, register
from .variant_hmm import VariantHMM

__all__ = [
    "LDHMM",
    "VariantHMM",
    "SequenceModel",
    "SequenceModelProtocol",
    "NotFittedError",
    "SCORE_KINDS",
    "ModelSpec",
    "register",
    "ldhmm_model",
    "sample_database",
]
