"""The closed-form route: coordinate-ascent variational inference (CAVI) and Newton M-steps.

Modules, each importing only those before it:

1. :mod:`.kernels`: the compiled numba kernels (special functions, the scaled chain recursion,
   the fused E-step sweeps, Dirichlet-multinomial sums, sparse slot maps).
2. :mod:`.protocol`: the guide protocol; :mod:`.exact_chain`: forward-backward on batches;
   :mod:`.support`: which sequences a model gives probability 0 (the rule every scoring
   route applies).
3. :mod:`.guides`: the PF and FF guides; :mod:`.emissions`: emission layouts.
4. :mod:`.expectation`: the E-step of one bucket (the compiled and torch routes).
5. :mod:`.sequence_starts`: where a sequence's ascent starts without a warm state (the start policy);
   :mod:`.e_step_totals`: the E-step of many buckets reduced to the M-step's sums;
   :mod:`.maximization`: the M-steps; :mod:`.posterior`: per-sequence posteriors and
   importance sampling.
6. :mod:`.context_vem`: the E-step, bound, M-step and importance weights of LDHMM with
   contextual emissions (over :mod:`.exact_chain` and :mod:`.maximization`).
7. :mod:`.context_sharing`: a contextual fit's groups under any ``ParameterSharing`` (per
   sequence, shared by the database's q, point) and their database-level updates.
"""
