"""Layer 1 of :mod:`ldhmm.inference`: pure math on tensors and arrays, no project imports.

:mod:`.dirichlet` (expectations, KL, log-Beta, the paper's Newton M-step, references of the
collapsed M-step's sums), :mod:`.chain` (the log-space forward-backward reference and its
helpers), :mod:`.viterbi` (the most probable state path, log space), :mod:`.mean_field` (the
FF coordinate updates in torch).
"""

from .viterbi import ViterbiPaths, unpad_paths, viterbi_log

__all__ = ["ViterbiPaths", "unpad_paths", "viterbi_log"]
