"""ldhmm: Latent Dirichlet Hidden Markov Models for databases of sequential behaviour.

The front door::

    from ldhmm import LDHMM, VariantHMM, ParameterSharing, PFGuide, FFGuide
    results = ldhmm.compare({"mine": my_factory, "LDHMM-PF": None, "HMM": None}, "log.txt",
                            states=range(2, 7), folds=10, jobs=2, out="results/mine")
    results.folds                      # the per-fold table, a pandas DataFrame
    ldhmm.classify(["LDHMM-PF", "HMM"], "splice", states=[2, 3])

Sub-packages (see ``docs/architecture.md``): :mod:`ldhmm.inference` (math, kernels,
variational EM, guides), :mod:`ldhmm.models` (the Pyro model and the estimators),
:mod:`ldhmm.baselines` (HMM, LDA, VBHMM, HMMV), :mod:`ldhmm.data` (loading and encoding
sequences), :mod:`ldhmm.experiments` (the paper's experiments and the harness) and
:mod:`ldhmm.cli` (the ``ldhmm`` command).
"""

import importlib

__version__ = "0.2.0"

#: The front door's names and the modules that define them. They are imported on first use
#: (PEP 562), so that ``import ldhmm`` stays cheap and importing a sub-package such as
#: ``ldhmm.inference`` (or starting a Dask worker) loads neither the experiments nor the libraries
#: only they need (gensim, hmmlearn, scikit-learn, matplotlib). The hook is this module's own, not
#: :func:`ldhmm.data.lazy_modules.lazy_attributes` (the sub-packages' one): importing ``ldhmm.data``
#: loads numpy and the loaders, about half a second that ``import ldhmm`` and ``ldhmm --help`` skip.
_EXPORTS = {
    "LDHMM": "models.ldhmm",
    "VariantHMM": "models.variant_hmm",
    "ParameterSharing": "inference.sharing",
    "PFGuide": "inference.cavi.guides",
    "FFGuide": "inference.cavi.guides",
    "compare": "experiments.compare",
    "ComparisonResult": "experiments.compare",
    "classify": "experiments.classify",
    "ClassificationResult": "experiments.classify",
}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "LDHMM",
    "VariantHMM",
    "ParameterSharing",
    "PFGuide",
    "FFGuide",
    "compare",
    "ComparisonResult",
    "classify",
    "ClassificationResult",
    "__version__",
]
