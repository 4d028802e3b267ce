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
sequences), :mod:`ldhmm.experiments` (the paper's experiments, the harness, benchmarks) and
:mod:`ldhmm.cli` (the ``ldhmm`` command).
"""

from .experiments.classify import ClassificationResult, classify
from .experiments.compare import ComparisonResult, compare
from .inference import FFGuide, ParameterSharing, PFGuide
from .models import LDHMM, VariantHMM

__version__ = "0.2.0"

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
