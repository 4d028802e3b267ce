"""The closed-form route's compiled numba kernels; they import numpy, numba and the
standard library only.

:mod:`.special` (lgamma, digamma, trigamma), :mod:`.scaled_chain` (the one compiled
forward-backward), :mod:`.fused_sweeps` (the per-sequence PF/FF updates and the whole compiled
E-step), :mod:`.factorized_batch` (the FF update over emission columns of a sequence's own:
the contextual model's pairs), :mod:`.dirichlet_multinomial` (the collapsed M-step's sums),
:mod:`.sparse` (slot maps and sums by symbol of the sparse emission layout). Each is checked
against a twin in torch or scipy (:mod:`ldhmm.inference.ops`, the torch route of the E-step
driver, or the tests).
:mod:`.cache` keeps their machine code where every checkout of the same code finds it; it is
installed here, before any kernel module is imported (numba picks a kernel's cache when the
kernel is decorated).
"""

from .cache import install as _install_kernel_cache

_install_kernel_cache()

#: Run the compiled kernels where they apply (CPU tensors). Set to False to force the torch
#: reference paths (benchmarks and tests compare both).
ENABLED = True
