"""Pyro's route: ``fit_svi(model, guide, ...)`` for variants written as Pyro programs.

Modules: :mod:`.minibatch` (length-sorted minibatches), :mod:`.model_check` (what a model must
declare), :mod:`.hmm_distribution` (the masked categorical HMM whose hidden states are summed
out), :mod:`.dirichlet_guide` (the mean-field Dirichlet guide), :mod:`.local_rows` (row-wise Adam
of per-sequence parameters), :mod:`.log_weights` (importance weights), :mod:`.chain_draws` (each
sequence's hidden chain under draws of the guide: posteriors, next event, decoding),
:mod:`.device` (the torch device a user names), :mod:`.svi_fit` (the loop).
"""
