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
"""

from __future__ import annotations

import importlib

__all__ = ["HMM", "LDA", "VBHMM", "HMMV", "SmoothedMarkovChain", "MarkovChain"]

#: ``{class: module of this package}``: what ``from ldhmm.baselines import X`` imports.
_MODULES = {
    "HMM": ".hmm",
    "LDA": ".lda",
    "VBHMM": ".vbhmm",
    "HMMV": ".hmmv",
    "SmoothedMarkovChain": ".markov_smoothed",
    "MarkovChain": ".markov",
}


def __getattr__(name):
    # PEP 562: a baseline's module (and its library) is imported on first use of its class.
    try:
        module = _MODULES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    return getattr(importlib.import_module(module, __name__), name)


def __dir__():
    return sorted([*globals(), *__all__])
