"""Layer 1 of :mod:`ldhmm.inference`: pure math on tensors and arrays, no project imports.

:mod:`.dirichlet` (expectations, KL, log-Beta, the paper's Newton M-step, references of the
collapsed M-step's sums), :mod:`.chain` (the log-space forward-backward reference and its
helpers), :mod:`.mean_field` (the FF coordinate updates in torch).
"""
