"""What the benchmark scripts share: their parser's start, the check grid's cells and the
candidate settings fitted beside the effort presets, the Dask and projection options (and the
projection's sentence), the header of the Markdown tables they print, and their CSV files.

The scripts run as ``python benchmarks/NAME.py``, which puts this folder on ``sys.path``: they
import it as ``from _common import ...`` (as they import each other, e.g. ``from fit_cost import
sequences``).
"""

from __future__ import annotations

import argparse
import csv
import json

from ldhmm.models.fit_settings import EFFORTS

__all__ = [
    "benchmark_parser",
    "add_grid_arguments",
    "parse_candidate",
    "add_candidate_arguments",
    "labelled_fits",
    "add_dask_arguments",
    "add_projection_arguments",
    "projection_line",
    "print_table_header",
    "write_rows",
]


def benchmark_parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's parser: its description the first paragraph of ``doc`` (the script's
    docstring), and ``--data-dir`` (default: ``$LDHMM_DATA``)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--data-dir", default=None)
    return p


def add_grid_arguments(
    p: argparse.ArgumentParser, states=(4, 8), guides=("pf",), seeds: tuple | None = (0,)
) -> None:
    """The cells of a check-grid benchmark: ``--datasets`` (``NAME`` or ``NAME:N``, its first N
    sequences; default Entree and the first 3,000 of MSNBC's subset), ``--states``, ``--guides``
    and ``--seeds`` (left out where ``seeds`` is None), with these defaults."""
    p.add_argument("--datasets", nargs="+", default=["entree", "msnbc:3000"], help="NAME or NAME:N (first N)")
    p.add_argument("--states", type=int, nargs="+", default=list(states))
    p.add_argument("--guides", nargs="+", default=list(guides), choices=["pf", "ff"])
    if seeds is not None:
        p.add_argument("--seeds", type=int, nargs="+", default=list(seeds))


def parse_candidate(text: str) -> tuple[str, dict]:
    """``'label={"tol": 1e-5}'`` -> ("label", {"tol": 1e-5}): a benchmark's candidate setting
    (``--candidates LABEL=JSON``)."""
    label, sep, options = text.partition("=")
    if not sep or not label:
        raise argparse.ArgumentTypeError(f"a candidate is LABEL=JSON, got {text!r}")
    return label, json.loads(options or "{}")


def add_candidate_arguments(p: argparse.ArgumentParser, default_effort: str = "standard") -> None:
    """``--candidates LABEL=JSON ...`` (a further row each: the fit at ``--candidate-effort``
    with those settings besides) and ``--candidate-effort``."""
    p.add_argument(
        "--candidates",
        nargs="+",
        type=parse_candidate,
        default=[],
        help="LABEL=JSON: a further row, the fit at --candidate-effort with these settings",
    )
    p.add_argument("--candidate-effort", default=default_effort, choices=EFFORTS)


def labelled_fits(
    p: argparse.ArgumentParser, args, efforts: list[tuple[str, str, dict]], reference_required: bool = True
) -> list:
    """``efforts`` (row label, effort, settings) and then one per candidate of ``args``
    (:func:`add_candidate_arguments`): the fits of a benchmark's cell, as (label, effort,
    settings). A ``--reference`` that names none of their labels is the parser's one-line error
    where ``reference_required`` (else those rows print no difference)."""
    fits = list(efforts) + [(c, args.candidate_effort, o) for c, o in args.candidates]
    if reference_required and args.reference not in [label for label, _, _ in fits]:
        p.error(f"--reference {args.reference!r} is neither an effort of --efforts nor a candidate's label")
    return fits


def add_dask_arguments(p: argparse.ArgumentParser, partitions_help: str | None = None) -> None:
    """``--workers`` (a LocalCluster's, default 2) and ``--partitions`` (default 4)."""
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--partitions", type=int, default=4, help=partitions_help)


def add_projection_arguments(p: argparse.ArgumentParser) -> None:
    """``--project-sequences`` and ``--project-workers``: the size a measured run is projected to."""
    p.add_argument("--project-sequences", type=float, default=1e8, help="projection: sequences (default 1e8)")
    p.add_argument("--project-workers", type=int, default=100, help="projection: workers (default 100)")


def projection_line(
    args: argparse.Namespace, basis: str, e_round: float, m_rounds: float, m_round: float
) -> str:
    """The projection to ``args.project_sequences`` on ``args.project_workers`` workers, in words:
    one EM iteration is one E-step round of ``e_round`` seconds and ``m_rounds`` M-step rounds of
    ``m_round`` seconds each (every round waits for the slowest worker); ``basis`` says where the
    E-step round's seconds come from."""
    return (
        f"projection to {args.project_sequences:.0e} sequences on {args.project_workers} workers x 1 core "
        f"({basis}): E-step round {e_round:.1f} s + {m_rounds:g} M-step rounds x {m_round:.4f} s = about "
        f"{e_round + m_rounds * m_round:.1f} s per EM iteration (the first iteration, which tries every "
        f"start, several times that); a straggler (one worker s times slower) makes every round wait: "
        f"+ (s - 1) x {e_round:.1f} s per E-step round"
    )


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
