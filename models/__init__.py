"""Generative models: the LDHMM Pyro model and the estimators users call."""

from .estimator import VariantHMM
from .ldhmm import LDHMM
from .pyro_model import ldhmm_model, sample_database

__all__ = ["LDHMM", "VariantHMM", "ldhmm_model", "sample_database"]
