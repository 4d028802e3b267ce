"""The baselines the paper compares LDHMM against, each registered with the harness.

Importing this package registers every baseline (:func:`ldhmm.models.register`, run by each
module's class decorator), in the order the result tables list them. A new baseline is one
module here and one line below.
"""

from . import hmm, lda, vbhmm, hmmv  # noqa: F401  (the imports register the models, in table order)
from .hmm import HMM
from .hmmv import HMMV
from .lda import LDA
from .vbhmm import VBHMM

__all__ = ["HMM", "LDA", "VBHMM", "HMMV"]
