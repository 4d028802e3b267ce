"""The baselines the paper compares LDHMM against, each registered with the harness.

Importing this package registers every baseline (:func:`ldhmm.models.register`, run by each
module's class decorator), in the order the result tables list them. A new baseline is one
module here and one import line below. :class:`SmoothedMarkovChain` (:mod:`.markov_smoothed`)
is registered twice, as MARKOV1 (first order) and MARKOV3 (interpolated orders 0..3), models
without hidden states (``has_states = False``: fitted once per fold). :class:`MarkovChain`
(:mod:`.markov`, the fixed add-0.5 first-order chain that ``next-event`` names MARKOV) is
exported but not registered.
"""

# Each import registers its model; their order is the order of the result tables, so the
# import sorter must leave it alone.
# isort: off
from . import hmm  # noqa: F401
from . import lda  # noqa: F401
from . import vbhmm  # noqa: F401
from . import hmmv  # noqa: F401
from . import markov_smoothed  # noqa: F401  (MARKOV1, MARKOV3)

# isort: on
from .hmm import HMM
from .hmmv import HMMV
from .lda import LDA
from .markov import MarkovChain  # not registered: next-event's fixed add-0.5 chain "MARKOV"
from .markov_smoothed import SmoothedMarkovChain
from .vbhmm import VBHMM

__all__ = ["HMM", "LDA", "VBHMM", "HMMV", "SmoothedMarkovChain", "MarkovChain"]
