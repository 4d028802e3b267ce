"""What the benchmark scripts share: their parser's start, the Dask and projection options, the
header of the Markdown tables they print, and their CSV files.

The scripts run as ``python benchmarks/NAME.py``, which puts this folder on ``sys.path``: they
import it as ``from _common import ...`` (as they import each other, e.g. ``from fit_cost import
sequences``).
"""

from __future__ import annotations

import argparse
import csv

__all__ = [
    "benchmark_parser",
    "add_dask_arguments",
    "add_projection_arguments",
    "print_table_header",
    "write_rows",
]


def benchmark_parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's parser: its description the first paragraph of ``doc`` (the script's
    docstring), and ``--data-dir`` (default: ``$LDHMM_DATA``)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--data-dir", default=None)
    return p


def add_dask_arguments(p: argparse.ArgumentParser, partitions_help: str | None = None) -> None:
    """``--workers`` (a LocalCluster's, default 2) and ``--partitions`` (default 4)."""
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--partitions", type=int, default=4, help=partitions_help)


def add_projection_arguments(p: argparse.ArgumentParser) -> None:
    """``--project-sequences`` and ``--project-workers``: the size a measured run is projected to."""
    p.add_argument("--project-sequences", type=float, default=1e8, help="projection: sequences (default 1e8)")
    p.add_argument("--project-workers", type=int, default=100, help="projection: workers (default 100)")


def print_table_header(header: str, flush: bool = False) -> None:
    """The header line ``header`` of a Markdown table (``"| a | b |"``) and its separator line."""
    print(header, flush=flush)
    print("|---" * (header.count("|") - 1) + "|", flush=flush)


def write_rows(path, rows: list) -> None:
    """``rows`` (dicts with the same keys, at least one) as a CSV file at ``path``, a header first."""
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
