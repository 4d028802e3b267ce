"""Generative models: the LDHMM Pyro model, the estimators users call, and the harness registry.

:class:`SequenceModel` is the base of every model the comparison harness runs (LDHMM, its
variants and the baselines); :func:`register` enters a model class into the harness.
"""

from ..data.lazy_modules import LazyModule
from .base import SCORE_KINDS, NotFittedError, SequenceModel, SequenceModelProtocol
from .ldhmm import LDHMM
from .registry import ModelSpec, register
from .variant_hmm import VariantHMM

#: The Pyro model's names, imported from :mod:`.pyro_model` on first use (PEP 562): scoring with
#: a fitted model does not load Pyro.
_PYRO_NAMES = ("ldhmm_model", "sample_database")
_pyro_model = LazyModule(".pyro_model", __name__)


def __getattr__(name: str):
    if name in _PYRO_NAMES:
        return getattr(_pyro_model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_PYRO_NAMES))


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
