"""Inference for LDHMM and its variants, in layers (docs/architecture.md); each imports only
the layers before it:

1. :mod:`.ops`: pure math (Dirichlet, log-space chain reference, FF updates in torch).
2. :mod:`.kernels`: compiled numba kernels (chain core, E-step, Dirichlet-multinomial sums).
3. :mod:`.variants`, :mod:`.batch`, :mod:`.parameters`, :mod:`.protocol`, :mod:`.chain`,
   :mod:`.e_step`, :mod:`.m_step`, :mod:`.em`: the variational EM.
4. :mod:`.guides`: the FF and PF guides (closed-form q(Z) updates and Pyro guides).
5. :mod:`.svi`: Pyro's route, ``fit_svi(model, guide, ...)``.
"""

from .batch import Bucket, infer_n_symbols, make_buckets, validate_sequences
from .chain import forward_backward, forward_log_normalizer
from .e_step import (
    RANDOM_STARTS,
    STARTS,
    BucketState,
    EStepTotals,
    default_starts,
    e_step,
    e_step_bucket,
    expected_counts,
    guide_starts,
)
from .em import FitResult, VariationalEM
from .guides import ChainGuide, FFGuide, PFGuide, resolve_guide
from .m_step import M_STEP_METHODS, m_step, newton_dirichlet_multinomial, total_elbo
from .ops.chain import (
    ChainPosterior,
    emission_potentials,
    expected_complete_log_lik,
    forward_backward_log,
)
from .ops.dirichlet import (
    dirichlet_log_density,
    expected_log_dirichlet,
    kl_dirichlet,
    log_multivariate_beta,
    sample_dirichlet,
)
from .ops.viterbi import ViterbiPaths, unpad_paths, viterbi_log
from .parameters import VariantParameters, init_parameters
from .protocol import GuideProtocol, HiddenUpdate
from .svi import SVIResult, fit_svi, guide_init_from_state, pad_database
from .variants import (
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
    "newton_dirichlet_multinomial",
    "total_elbo",
    "ChainPosterior",
    "emission_potentials",
    "expected_complete_log_lik",
    "forward_backward_log",
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
    "GuideProtocol",
    "HiddenUpdate",
    "SVIResult",
    "fit_svi",
    "guide_init_from_state",
    "pad_database",
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
