"""Generative models: the LDHMM Pyro model, the estimators users call, and the harness registry.

:class:`SequenceModel` is the base of every model the comparison harness runs (LDHMM, its
variants and the baselines); :func:`register` enters a model class into the harness.
"""

from ..data.lazy_modules import LazyModule, lazy_attributes
from .base import SCORE_KINDS, NotFittedError, SequenceModel
from .ldhmm import LDHMM
from .registry import ModelSpec, register
from .variant_hmm import VariantHMM

#: The Pyro model's names, imported from :mod:`.pyro_model` on first use (PEP 562): scoring with
#: a fitted model does not load Pyro.
_PYRO_NAMES = ("ldhmm_model", "sample_database")
__getattr__, __dir__ = lazy_attributes({LazyModule(".pyro_model", __name__): _PYRO_NAMES}, globals())


__all__ = [
    "LDHMM",
    "VariantHMM",
    "SequenceModel",
    "NotFittedError",
    "SCORE_KINDS",
    "ModelSpec",
    "register",
    "ldhmm_model",
    "sample_database",
]
