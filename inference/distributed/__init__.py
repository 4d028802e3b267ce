"""Partitions of a database and where they run.

:mod:`.workers`: :class:`~.workers.PartitionWorker` (the E-step, sums and per-sequence results of
one partition) and :class:`~.workers.LocalBackend` (workers in this process);
:mod:`.dask_backend`: the same workers as Dask actors (optional extra ``ldhmm[dask]``).
"""
