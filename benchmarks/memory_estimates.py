"""Benchmark: the memory estimates of :mod:`ldhmm.models.memory` against measured peaks.

Run ``python benchmarks/memory_estimates.py --help``; ``docs/performance.md`` ("Memory
estimates") records a table. ``tests/test_memory_bound.py`` loads this file and measures the
same commands at small sizes (the contract: measured <= estimate).

Each command (``ldhmm fit``, ``score``, ``score --is-samples``, ``posterior``, the partitioned
fit, ``compare --jobs J``) runs through :func:`ldhmm.cli.main` in a child interpreter, after a
warm-up run of the same command on a few sequences (numba's cached kernels loaded, torch's lazy
state built). Before the measured run the child hands freed heap back to the OS, resets the
kernel's high-water mark and records ``VmRSS`` (:class:`ldhmm.experiments.peak_rss.PeakRSS`);
``measured`` is ``VmHWM after - VmRSS before``: the memory the command needed beyond the
interpreter and its libraries, which the estimates exclude (``baseline`` reports them). The
worker processes a command starts (``compare --jobs J``) count whole, each at its own peak
(:class:`ldhmm.experiments.peak_rss.ChildrenPeak`), since their estimate includes their
interpreters. glibc's dynamic mmap threshold is pinned (``MALLOC_MMAP_THRESHOLD_``) so that
large arrays freed by the warm-up go back to the OS and are not reused silently by the measured
run. ``estimate`` is the largest estimate the command checked (logged by
:func:`ldhmm.models.memory.check_memory`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["write_sequences", "command_steps", "measure_steps", "main"]

#: The child's environment: glibc's mmap threshold pinned at its default (128 KiB), so that every
#: large array is its own mapping, returned to the OS when freed.
_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


def write_sequences(path, n_sequences: int, n_symbols: int, mean_length: float, seed: int = 0) -> dict:
    """A text log of ``n_sequences`` random sequences (one per line, symbols ``s0 .. s{V-1}``,
    lengths 1 + Poisson(mean_length - 1), every symbol used at least once where there are
    tokens enough). Returns its sizes (M, T, longest)."""
    rng = np.random.default_rng(seed)
    lengths = 1 + rng.poisson(max(0.0, mean_length - 1), size=n_sequences)
    tokens = rng.integers(0, n_symbols, size=int(lengths.sum()))
    tokens[: min(n_symbols, tokens.size)] = np.arange(min(n_symbols, tokens.size))
    names = np.array([f"s{v}" for v in range(n_symbols)])
    with open(path, "w") as f:
        start = 0
        for n in lengths:
            f.write(" ".join(names[tokens[start : start + n]]) + "\n")
            start += n
    return {"M": int(n_sequences), "T": int(lengths.sum()), "L": int(lengths.max())}


def _child(plan_path: str) -> None:
    """Run the plan's steps in this process, measuring each one's peak; write the results."""
    from ldhmm.cli import main as cli_main
    from ldhmm.experiments.peak_rss import ChildrenPeak, PeakRSS
    from ldhmm.models.memory import LOGGER

    estimates = []

    class _Record(logging.Handler):
        def emit(self, record):
            estimates.append(int(record.args[1]))

    LOGGER.addHandler(_Record())
    LOGGER.setLevel(logging.DEBUG)
    plan = json.loads(Path(plan_path).read_text())
    meter, children, results = PeakRSS(), ChildrenPeak(), []
    for step in plan["steps"]:
        if step.get("warmup"):
            cli_main(step["warmup"])
        estimates.clear()
        meter.start()
        children.start()
        rc = cli_main(step["argv"])
        measured = meter.stop_mib() * 2**20
        workers = children.stop_mib() * 2**20
        results.append(
            {
                "label": step["label"],
                "rc": rc,
                "estimate": max(estimates, default=0),
                "measured": int(measured + workers),
                "children": int(workers),
                "children_each": sorted((int(k * 1024) for k in children.peaks.values()), reverse=True),
                "baseline": meter.baseline_kib * 1024,
            }
        )
        # after every step: a run stopped part of the way keeps the steps it measured
        Path(plan["results"]).write_text(json.dumps(results))


def measure_steps(steps: list, workdir, timeout: float = 3600) -> list:
    """Run ``steps`` (dicts: ``label``, ``argv`` of the ``ldhmm`` command, optional ``warmup``
    argv run first, unmeasured) in one child interpreter, one after another.

    Returns
    -------
    list of dicts: ``label``, ``rc`` (the command's exit status), ``estimate`` (bytes, the
    largest estimate it checked), ``measured`` (bytes, peak RSS growth, and the peaks of the
    processes it started), ``children`` (bytes, those processes' peaks together),
    ``children_each`` (bytes, each one's), ``baseline`` (bytes, RSS before the step).
    """
    workdir = Path(workdir)
    plan = {"steps": steps, "results": str(workdir / "memory_results.json")}
    plan_path = workdir / "memory_plan.json"
    plan_path.write_text(json.dumps(plan))
    env = {**os.environ, **_MALLOC_ENV}
    try:
        subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--child", str(plan_path)],
            check=True,
            env=env,
            timeout=timeout,
            cwd=workdir,
        )
    except subprocess.TimeoutExpired:
        print(
            f"memory_estimates: stopped after {timeout} s; the steps measured so far follow", file=sys.stderr
        )
    results = Path(plan["results"])
    return json.loads(results.read_text()) if results.exists() else []


def command_steps(
    data: Path,
    warm: Path,
    K: int,
    is_samples: int,
    partitions: int,
    out: Path,
    max_iter: int = 1,
    jobs: int | None = None,
) -> list:
    """The commands measured on one data file (for :func:`measure_steps`): fit (one restart,
    ``max_iter`` iterations; ``warm``: the warm-up runs' data), the partitioned fit, score,
    the contextual fit (``--emission-context 2``), score with importance sampling, posterior, and
    (``jobs``: the number of worker processes)
    ``compare`` of LDHMM-PF on two folds; their files written under ``out``."""
    model = str(out / "model.json")
    fit = ["fit", "--states", str(K), "--restarts", "1", "--max-iter", str(max_iter), "--quiet"]
    fit += ["--out", model]
    steps = [
        {"label": "fit", "argv": fit + [str(data)], "warmup": fit + [str(warm)]},
        {
            "label": f"fit --partitions {partitions}",
            "argv": fit[:-1] + [str(out / "parts.json"), "--partitions", str(partitions), str(data)],
        },
    ]
    context = fit[:-1] + [str(out / "ctx.json"), "--emission-context", "2", "--min-context-count", "2"]
    steps.append(
        {"label": "fit --emission-context 2", "argv": context + [str(data)], "warmup": context + [str(warm)]}
    )
    for label, extra, name in (
        ("score", [], "scores.csv"),
        (f"score --is-samples {is_samples}", ["--is-samples", str(is_samples)], "is.csv"),
        ("posterior", [], "posterior.parquet"),
    ):
        command = label.split()[0]
        argv = [command, model, "--quiet", *extra, "--out", str(out / name)]
        steps.append({"label": label, "argv": argv + [str(data)], "warmup": argv + [str(warm)]})
    if jobs is None:
        return steps
    compare = ["compare", "--states", str(K), "--folds", "2", "--jobs", str(jobs), "--models", "LDHMM-PF"]
    compare += ["--max-iter", str(max_iter), "--restarts", "1", "--quiet", "--file"]
    steps.append(
        {
            "label": f"compare --jobs {jobs}",
            "argv": compare + [str(data), "--out", str(out / "compare")],
            "warmup": compare + [str(warm), "--out", str(out / "compare-warm")],
        }
    )
    return steps


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument(
        "--sizes",
        nargs="+",
        default=["8,17,10000,6", "200,17,2000,6", "16,100000,2000,20", "50,17,100000,6"],
        help="configurations K,V,M,mean-length (default: %(default)s)",
    )
    parser.add_argument("--is-samples", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=2, help="compare's worker processes")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per configuration")
    parser.add_argument("--commands", nargs="+", help="only these steps (labels' first word)")
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child)
        return
    print("| K | V | M | tokens | command | estimate MB | measured MB | measured / estimate | baseline MB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for size in args.sizes:
        K, V, M, length = (float(x) for x in size.split(","))
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            sizes = write_sequences(tmp / "log.txt", int(M), int(V), length)
            (tmp / "warm.txt").write_text("".join((tmp / "log.txt").read_text().splitlines(True)[:20]))
            steps = command_steps(
                tmp / "log.txt",
                tmp / "warm.txt",
                int(K),
                args.is_samples,
                args.partitions,
                tmp,
                jobs=args.jobs,
            )
            if args.commands:
                # the scoring commands read the fitted model: its fit runs with them
                model = bool({"score", "posterior"} & set(args.commands))
                steps = [
                    s
                    for s in steps
                    if s["label"].split()[0] in args.commands or (model and s["label"] == "fit")
                ]
            for r in measure_steps(steps, tmp, args.timeout):
                ratio = r["measured"] / r["estimate"] if r["estimate"] else float("nan")
                each = ", ".join(f"{b / 1e6:.0f}" for b in r["children_each"])
                workers = f", processes {each} MB" if each else ""
                print(
                    f"| {int(K)} | {int(V)} | {sizes['M']} | {sizes['T']} | `{r['label']}` "
                    f"(rc {r['rc']}{workers}) | "
                    f"{r['estimate'] / 1e6:.1f} | {r['measured'] / 1e6:.1f} | {ratio:.2f} | "
                    f"{r['baseline'] / 1e6:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
