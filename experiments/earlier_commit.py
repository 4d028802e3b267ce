"""What the before/after benchmarks share: their data sets, an earlier commit's package laid
out for ``PYTHONPATH``, and a benchmark's worker run in its own process.

``bench_mstep`` and ``bench_sweeps`` time this checkout against an earlier commit: each
measurement runs in a new process (:func:`run_benchmark_process`) whose ``PYTHONPATH`` starts with the
earlier commit's files (:func:`earlier_tree`) or not, with the benchmark's own file copied in
so that both sides run the same driver.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..data import load_dataset, load_paper_subset
from .datasets import synthetic_database

__all__ = [
    "REPO",
    "SUBPACKAGES",
    "BENCH_DATASETS",
    "bench_sequences",
    "earlier_tree",
    "run_benchmark_process",
]

REPO = Path(__file__).resolve().parents[1]
#: The repository's top-level packages that are installed as ``ldhmm.<name>``.
SUBPACKAGES = ("models", "inference", "baselines", "experiments")

#: name -> what :func:`bench_sequences` loads (``n``: the first n sequences of the MSNBC ones).
BENCH_DATASETS = {
    "synthetic": "1,000 sequences of the built-in synthetic LDHMM (seed 0)",
    "entree": "the Entree paper subset (422 sessions)",
    "msnbc": "the first n sequences of the MSNBC paper subset (20..100 page views)",
    "msnbc-short": "the first n MSNBC sequences of length >= 2",
}


def bench_sequences(name: str, data_dir, n: int | None) -> tuple[list, int]:
    """(sequences, vocabulary size) of a data set of :data:`BENCH_DATASETS`: its first ``n``
    sequences (all of them for None)."""
    if name == "synthetic":
        db = synthetic_database(1000, seed=0)
        return db.sequences, len(db.vocabulary)
    if name in ("entree", "msnbc"):
        db = load_paper_subset(name, data_dir)
    elif name == "msnbc-short":
        db = load_dataset("msnbc", data_dir, min_length=2)
    else:
        raise ValueError(f"unknown data set {name!r}; known: {', '.join(BENCH_DATASETS)}")
    return db.sequences[:n], len(db.vocabulary)


def earlier_tree(ref: str, cache: Path, bench_file: Path) -> Path:
    """``ref``'s files laid out as the installed package under ``cache/<commit>/src`` (made
    once), with ``bench_file`` and this file copied in; returns the directory to put on
    ``PYTHONPATH``."""
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", ref], check=True, capture_output=True, text=True
    ).stdout.strip()
    root = cache / commit
    src = root / "src"
    if not (src / "ldhmm").is_dir():
        tmp = Path(tempfile.mkdtemp(dir=cache))
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
        for sub in SUBPACKAGES:
            (tmp / sub).rename(tmp / "src" / "ldhmm" / sub)
        tmp.rename(root)
    for path in (Path(bench_file), Path(__file__)):
        shutil.copy(path, src / "ldhmm" / "experiments" / path.name)
    return src


def run_benchmark_process(module: str, config: dict, pythonpath: Path | None) -> dict:
    """``python -m <module> --worker <config as JSON>`` in a new process (``pythonpath`` first
    on its path: an earlier commit's package); returns the JSON of its last output line."""
    env = dict(os.environ)
    cwd = REPO
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath)] + env.get("PYTHONPATH", "").split(os.pathsep))
        cwd = pythonpath
    out = subprocess.run(
        [sys.executable, "-m", module, "--worker", json.dumps(config)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
