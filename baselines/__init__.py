"""The baselines the paper compares LDHMM against, each registered with the harness.

The registry knows every baseline by name before its module is imported
(:data:`ldhmm.models.registry.BUILTIN_NAMES`, in the order the result tables list them), and a
module is imported when its class is first used: ``from ldhmm.baselines import HMM`` imports
hmmlearn, ``LDA`` gensim, and nothing else (why: those libraries cost seconds of start-up that a
command scoring an LDHMM never uses). A new baseline is one module here, its class in
:data:`ldhmm.models.registry.BUILTIN_CLASSES` and its names in ``BUILTIN_NAMES``.
:class:`SmoothedMarkovChain` (:mod:`.markov_smoothed`) is registered twice, as MARKOV1 (first
order) and MARKOV3 (interpolated orders 0..3), models without hidden states
(``has_states = False``: fitted once per fold). :class:`MarkovChain` (:mod:`.markov`, the fixed
add-0.5 first-order chain that ``next-event`` names MARKOV) is exported but not registered.
Beside them, :mod:`.library_logs`: the log of a wrapped library (hmmlearn, gensim) quietened
while a baseline fits; :mod:`.next_symbol`: ``predict_next_proba`` of HMM and the Markov chains.
"""

from __future__ import annotations

from ..data.lazy_modules import LazyModule, lazy_attributes

__all__ = ["HMM", "LDA", "VBHMM", "HMMV", "SmoothedMarkovChain", "MarkovChain"]

#: What ``from ldhmm.baselines import X`` imports: each class from its module of this package,
#: on first use (PEP 562), so that a baseline's library is loaded only by what uses it.
__getattr__, __dir__ = lazy_attributes(
    {
        LazyModule(".hmm", __name__): ("HMM",),
        LazyModule(".lda", __name__): ("LDA",),
        LazyModule(".vbhmm", __name__): ("VBHMM",),
        LazyModule(".hmmv", __name__): ("HMMV",),
        LazyModule(".markov_smoothed", __name__): ("SmoothedMarkovChain",),
        LazyModule(".markov", __name__): ("MarkovChain",),
    },
    globals(),
)
