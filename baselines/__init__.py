"""The baselines the paper compares LDHMM against, each registered with the harness.

Importing this package registers every baseline (:func:`ldhmm.models.register`, run by each
module's class decorator), in the order the result tables list them. A new baseline is one
module here and one import line below. :class:`MarkovChain` (:mod:`.markov`, the first-order
chain over symbols of next-event prediction) is exported but not registered.
"""

# Each import registers its model; their order is the order of the result tables, so the
# import sorter must leave it alone.
# isort: off
from . import hmm  # noqa: F401
from . import lda  # noqa: F401
from . import vbhmm  # noqa: F401
from . import hmmv  # noqa: F401

# isort: on
from .hmm import HMM
from .hmmv import HMMV
from .lda import LDA
from .markov import MarkovChain  # not registered: it stays out of the comparison tables
from .vbhmm import VBHMM

__all__ = ["HMM", "LDA", "VBHMM", "HMMV", "MarkovChain"]
