"""Layer 2 of :mod:`ldhmm.inference`: compiled numba kernels; they import numpy and numba only.

:mod:`.special` (lgamma, digamma, trigamma), :mod:`.chain` (the one scaled forward-backward
core), :mod:`.e_step` (the per-sequence PF/FF updates and the whole compiled E-step),
:mod:`.dirichlet_multinomial` (the collapsed M-step's sums). Each has a reference twin in
:mod:`ldhmm.inference.ops` that the tests compare against.
"""

#: Run the compiled kernels where they apply (CPU tensors). Set to False to force the torch
#: reference paths (benchmarks and tests compare both).
ENABLED = True
