"""Inference for LDHMM: guides (FF, PF), closed-form variational EM, Newton M-step, SVI."""

from .guides import FFGuide, PFGuide, ChainGuide, HiddenUpdate
from .variants import ParameterSharing
from .variational_em import VariationalEM

__all__ = ["FFGuide", "PFGuide", "ChainGuide", "HiddenUpdate", "ParameterSharing", "VariationalEM"]
