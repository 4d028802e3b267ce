"""ldhmm: Latent Dirichlet Hidden Markov Models for databases of sequential behaviour.

The front door::

    from ldhmm import LDHMM, VariantHMM, ParameterSharing, PFGuide, FFGuide

Sub-packages (see ``docs/architecture.md``): :mod:`ldhmm.inference` (math, kernels,
variational EM, guides), :mod:`ldhmm.models` (the Pyro model and the estimators),
:mod:`ldhmm.baselines` (HMM, LDA, VBHMM, HMMV), :mod:`ldhmm.data` (loading and encoding
sequences), :mod:`ldhmm.experiments` (the paper's experiments, the harness, benchmarks) and
:mod:`ldhmm.cli` (the ``ldhmm`` command).
"""

from .inference import FFGuide, ParameterSharing, PFGuide
from .models import LDHMM, VariantHMM

__version__ = "0.2.0"

__all__ = ["LDHMM", "VariantHMM", "ParameterSharing", "PFGuide", "FFGuide", "__version__"]
