"""Where a model command's partitions live: the options ``--backend``, ``--scheduler``,
``--scheduler-timeout``, ``--workers``, ``--worker-threads`` and ``--partitions`` that ``fit``,
``score``, ``posterior``, ``predict`` and ``decode`` share, and the Dask client they open
(docs/distributed.md): a scheduler reached within seconds, a LocalCluster the machine holds,
distributed's own log lines silent under ``--quiet``."""

from __future__ import annotations

import argparse
import contextlib

from ..models.placement import dask_backend_module
from .options import positive_float, positive_int

__all__ = ["add_backend_arguments", "add_cluster_arguments", "dask_client", "placement_options"]


def add_backend_arguments(p: argparse.ArgumentParser, partitions_help: str | None = None) -> None:
    """The options that say where the partitions live (``partitions_help``: the command's own
    help text of ``--partitions``)."""
    add_cluster_arguments(
        p, "where the partitions live: this process (default) or a Dask cluster (docs/distributed.md)"
    )
    p.add_argument(
        "--partitions",
        type=positive_int,
        default=None,
        help=partitions_help
        or "partitions balanced by tokens (default: 1 locally, 2 per Dask worker); the same partitions "
        "give the same numbers on any backend (other partitions: the same up to the E-step's tolerance; "
        "importance-sampled draws are seeded per partition)",
    )


def add_cluster_arguments(p: argparse.ArgumentParser, backend_help: str) -> None:
    """``--backend`` (its help: ``backend_help``) and the options of the Dask client it opens:
    ``--scheduler``, ``--scheduler-timeout``, ``--workers``, ``--worker-threads``."""
    p.add_argument("--backend", choices=["local", "dask"], default="local", help=backend_help)
    p.add_argument("--scheduler", default=None, help="--backend dask: the Dask scheduler's address")
    p.add_argument(
        "--scheduler-timeout",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help="--scheduler: how long the scheduler may take to answer (default 10); longer is one line "
        "naming the address",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="--backend dask without --scheduler: a LocalCluster of this many processes (default 2, "
        "or 1 on one core)",
    )
    p.add_argument(
        "--worker-threads",
        type=positive_int,
        default=None,
        help="--backend dask without --scheduler: numba threads per worker process (default: the "
        "cores shared out among the workers, so that workers x threads <= cores)",
    )


@contextlib.contextmanager
def dask_client(args: argparse.Namespace):
    """The Dask client of ``--backend dask`` (closed afterwards, with its LocalCluster), or None
    for ``--backend local``; the cluster options without ``--backend dask`` are refused."""
    if args.backend != "dask":
        if args.scheduler or args.workers or args.worker_threads or args.scheduler_timeout:
            raise ValueError("--scheduler, --workers and --worker-threads need --backend dask")
        yield None
        return
    if getattr(args, "jobs", 1) != 1:  # the harness's worker processes: Dask runs the tasks instead
        raise ValueError(
            "--jobs is for --backend local; with --backend dask the workers run the tasks (--workers)"
        )
    if args.scheduler and (args.workers or args.worker_threads):
        raise ValueError("--workers and --worker-threads shape a LocalCluster: not with --scheduler")
    if args.scheduler_timeout is not None and not args.scheduler:
        raise ValueError("--scheduler-timeout bounds the wait for --scheduler ADDRESS: it needs one")
    dask = dask_backend_module()
    client, cluster = dask.connect(
        args.scheduler,
        args.workers,
        numba_threads=args.worker_threads,
        timeout=args.scheduler_timeout or dask.CONNECT_SECONDS,
        quiet=bool(getattr(args, "quiet", False)),
    )
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def placement_options(args: argparse.Namespace, client) -> dict:
    """The keyword arguments ``backend``, ``client``, ``n_partitions`` of a model's per-sequence
    methods (``score_samples``, ``posterior``, ...), from the options and the open client; none
    for the default, one partition in this process (which every model's methods run)."""
    if args.backend == "local" and args.partitions is None:
        return {}
    return {"backend": args.backend, "client": client, "n_partitions": args.partitions}
