"""Pure math shared by the routes of :mod:`ldhmm.inference`: tensors and arrays, no project
imports beyond this package.

:mod:`.dirichlet` (expectations, KL, log-Beta, the paper's Newton M-step, references of the
collapsed M-step's sums), :mod:`.potentials` (chain potentials, shape checks, the backward
messages PF's Pyro guide samples from, expected complete log-likelihoods), :mod:`.forward` (the
one torch recursion: log Z by the masked log-space scan, and the marginals as its gradients),
:mod:`.viterbi` (the most probable state path, log space), :mod:`.mean_field` (the FF
coordinate updates in torch), :mod:`.hashing` (counter-based uniforms for reproducible random
starts), :mod:`.importance` (the standard error and effective sample size of an
importance-sampled log p(x), and the pooling of two runs' draws).
"""

from .viterbi import ViterbiPaths, unpad_paths, viterbi_log

__all__ = ["ViterbiPaths", "unpad_paths", "viterbi_log"]
