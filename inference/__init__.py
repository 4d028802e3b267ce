"""Inference for LDHMM and its variants, grouped by route (docs/architecture.md); each layer
imports only the layers before it:

1. :mod:`.ops`: pure math shared by the routes (Dirichlet, chain potentials, the masked
   log-space forward scan, mean-field updates, Viterbi, hashing).
2. :mod:`.sharing`, :mod:`.parameters`, :mod:`.growth`, :mod:`.batch`, :mod:`.copies`,
   :mod:`.monitor`, :mod:`.progress`, :mod:`.interpolated_chain`, :mod:`.contexts`: what a
   variant shares, its parameters (and a state split in two, to grow K), length-sorted buckets
   of sequences (identical sequences once, weighted by their copies), the
   convergence monitor and its rules, how a progress bar shows itself (live on a terminal, a
   few lines elsewhere), the interpolated Markov chain's kernels, the emission contexts of a
   sequence's positions (and their smoothing).
3. :mod:`.cavi`: the closed-form route (compiled kernels, guide protocol, PF and FF guides,
   E-step driver, M-steps, posteriors and importance sampling).
4. :mod:`.distributed`: partition workers, in process and as Dask actors.
5. :mod:`.state_store`: the one store of per-sequence state (NPZ and a JSON manifest) that
   checkpoints, paths along K and the harness write and read back checked;
   :mod:`.checkpoint`: an EM run's state after every iteration, to resume a stopped fit;
   :mod:`.em_observers`: what watches a run (its checkpoint, progress bar, a callback);
   :mod:`.acceleration`: SQUAREM and damped Anderson acceleration on the learned priors' path
   (``acceleration="squarem"``, ``"anderson"``);
   :mod:`.em`: the variational EM driver over a backend's partitions, reporting to them.
6. :mod:`.svi`: Pyro's route, ``fit_svi(model, guide, ...)``.
"""

from ..data.lazy_modules import LazyModule, lazy_attributes
from .batch import Bucket, infer_n_symbols, make_buckets, validate_sequences
from .cavi.e_step_totals import EStepTotals, e_step
from .cavi.exact_chain import forward_backward, forward_log_normalizer
from .cavi.expectation import BucketState, e_step_bucket, expected_counts
from .cavi.guides import ChainGuide, FFGuide, PFGuide, resolve_guide
from .cavi.maximization import M_STEP_METHODS, m_step, total_elbo
from .cavi.protocol import GuideProtocol, HiddenUpdate
from .cavi.sequence_starts import RANDOM_STARTS, STARTS, default_starts, guide_starts, held_out_starts
from .em import FitResult, VariationalEM
from .ops.dirichlet import (
    dirichlet_log_density,
    expected_log_dirichlet,
    kl_dirichlet,
    log_multivariate_beta,
    sample_dirichlet,
)
from .ops.forward import chain_posterior
from .ops.potentials import (
    ChainPosterior,
    emission_potentials,
    expected_complete_log_lik,
)
from .ops.viterbi import ViterbiPaths, unpad_paths, viterbi_log
from .parameters import (
    HMM_START_CONCENTRATION,
    VariantParameters,
    hmm_started_parameters,
    init_parameters,
    symbol_seeded_parameters,
)
from .sharing import (
    GROUPS,
    HMM_SHARING,
    HMMV_SHARING,
    LDHMM_SHARING,
    POINT,
    SEQUENCE,
    SHARED,
    VBHMM_SHARING,
    ParameterSharing,
)

#: The SVI route's names, imported from :mod:`.svi.svi_fit` on first use (PEP 562): the route
#: needs Pyro, which the closed form, its scoring and the commands built on it do not load.
_SVI_NAMES = ("SVIResult", "fit_svi", "guide_init_from_state")
__getattr__, __dir__ = lazy_attributes({LazyModule(".svi.svi_fit", __name__): _SVI_NAMES}, globals())


__all__ = [
    "Bucket",
    "infer_n_symbols",
    "make_buckets",
    "validate_sequences",
    "forward_backward",
    "forward_log_normalizer",
    "RANDOM_STARTS",
    "STARTS",
    "default_starts",
    "held_out_starts",
    "guide_starts",
    "BucketState",
    "EStepTotals",
    "e_step",
    "e_step_bucket",
    "expected_counts",
    "FitResult",
    "VariationalEM",
    "ChainGuide",
    "FFGuide",
    "PFGuide",
    "resolve_guide",
    "M_STEP_METHODS",
    "m_step",
    "total_elbo",
    "ChainPosterior",
    "emission_potentials",
    "expected_complete_log_lik",
    "chain_posterior",
    "ViterbiPaths",
    "unpad_paths",
    "viterbi_log",
    "dirichlet_log_density",
    "expected_log_dirichlet",
    "kl_dirichlet",
    "log_multivariate_beta",
    "sample_dirichlet",
    "VariantParameters",
    "init_parameters",
    "symbol_seeded_parameters",
    "hmm_started_parameters",
    "HMM_START_CONCENTRATION",
    "GuideProtocol",
    "HiddenUpdate",
    "SVIResult",
    "fit_svi",
    "guide_init_from_state",
    "GROUPS",
    "HMM_SHARING",
    "HMMV_SHARING",
    "LDHMM_SHARING",
    "POINT",
    "SEQUENCE",
    "SHARED",
    "VBHMM_SHARING",
    "ParameterSharing",
]
