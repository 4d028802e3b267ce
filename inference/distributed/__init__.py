"""Partitions of a database and where they run.

:mod:`.workers`: :class:`~.workers.PartitionWorker` (the E-step, sums and per-sequence results of
one partition) and :class:`~.workers.LocalBackend` (workers in this process);
:mod:`.dask_backend`: the same workers as Dask actors (optional extra ``ldhmm[dask]``);
:mod:`.context_partition`: one partition of a contextual model (emission rows chosen by (state,
context)): its context batches and their variational state, the same round protocol;
:mod:`.arithmetic`: what decides the bits a process computes (library versions, CPU kernels),
compared across a Dask cluster's workers, and the portable environment that makes them equal.
"""
