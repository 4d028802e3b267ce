"""Benchmark: LDHMM's batched E-step side by side with hmmlearn on the same data.

Run ``python benchmarks/estep_vs_hmmlearn.py --help`` for the options; ``docs/performance.md`` explains
the columns and records measured numbers.

What is timed (same process, same data, same K):

* ``hmmlearn/scaling``: ``CategoricalHMM(n_components=K, implementation="scaling", n_iter=1,
  init_params="ste", tol=0, random_state=0).fit(X, lengths)``: one Baum-Welch iteration
  (random init + forward-backward of every sequence + M-step). ``hmmlearn/log`` once at K = 8.
* ``ldhmm/e-step``: one full E-step sweep of LDHMM, i.e. ``e_step_bucket(bucket, params, guide,
  state=None, max_iter=1)`` for every bucket of ``make_buckets(seqs)``: q(Z) update
  (forward-backward for PF, one mean-field pass for FF), expected counts, Dirichlet updates and
  the digamma / KL terms of the per-sequence ELBO. Buckets are built once, outside the timing.
* ``ldhmm/bucketing``: ``make_buckets(seqs)`` alone.

* ``ldhmm/e-step-warm`` (``--warm``): one sweep from each bucket's state after five sweeps,
  as every EM iteration after the first runs (FF's cold sweep above includes its start, the
  exact chain's marginals sharpened; a warm sweep does not).

Each configuration runs once untimed (warm-up, peak memory), then the timed runs go in
``--repeats`` interleaved rounds (every configuration once per round, so that the machine's
drift hits all alike); a configuration leaves the rounds (after at least one run) once its
warm-up plus timed runs exceed ``--time-budget`` seconds.
``seconds`` is the median of the timed runs.
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import io
import json
import math
import os
import platform
import pstats
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

if "--omp-passive" in sys.argv[1:]:
    # Must be set before torch (and its OpenMP runtime) is loaded.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import hmmlearn  # noqa: E402
import torch  # noqa: E402
from hmmlearn.hmm import CategoricalHMM  # noqa: E402
from threadpoolctl import threadpool_info  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from ldhmm.data import load_paper_subset, resolve_data_dir  # noqa: E402
from ldhmm.experiments.peak_rss import PeakRSS  # noqa: E402
from ldhmm.inference import VariantParameters, e_step_bucket, init_parameters  # noqa: E402
from ldhmm.inference.batch import Bucket, make_buckets  # noqa: E402
from ldhmm.inference.cavi import kernels  # noqa: E402
from ldhmm.inference.cavi.guides import FFGuide, PFGuide  # noqa: E402
from ldhmm.inference.sharing import LDHMM_SHARING  # noqa: E402
from ldhmm.models import LDHMM  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PROFILE_K = 8
_THREAD_ENV = (
    "OMP_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "GOMP_SPINCOUNT",
)
LOG_REFERENCE_K = 8

__all__ = ["main", "parse_args", "load_sequences", "synthetic_sequences"]


# ----------------------------------------------------------------------------- data
MSNBC_N_SYMBOLS = 17


def _msnbc_like_lengths(n: int, rng: np.random.Generator) -> np.ndarray:
    # MSNBC 20..100 subset: min 20, median 26, mean 30.3; a shifted, truncated geometric fits.
    out = np.empty(0, dtype=np.int64)
    while out.size < n:
        draw = 20 + rng.geometric(1.0 / 11.0, size=2 * n) - 1
        out = np.concatenate([out, draw[draw <= 100]])
    return out[:n].astype(np.int64)


def synthetic_sequences(
    n: int = 31071, n_symbols: int = MSNBC_N_SYMBOLS, kind: str = "ldhmm", seed: int = 0
) -> list[np.ndarray]:
    """A database with the shape of the MSNBC subset (lengths 20..100, 17 symbols).

    ``kind="ldhmm"`` samples from an LDHMM with 8 states and sparse-ish priors
    (``models.LDHMM.from_hyperparameters(...).sample``); ``"uniform"``: uniform random symbols.
    """
    rng = np.random.default_rng(seed)
    lengths = _msnbc_like_lengths(n, rng)
    if kind == "uniform":
        return [rng.integers(0, n_symbols, size=int(L), dtype=np.int64) for L in lengths]

    K0 = 8
    alpha_pi = np.full(K0, 0.5)
    alpha_A = np.full((K0, K0), 0.3) + 2.0 * np.eye(K0)
    beta = 0.2 + rng.gamma(1.0, 1.0, size=(K0, n_symbols))
    model = LDHMM.from_hyperparameters(alpha_pi, alpha_A, beta)
    return model.sample(n, lengths=lengths, seed=seed)


def load_sequences(args) -> tuple[list[np.ndarray], int, str]:
    """The benchmark database: (sequences, n_symbols, description)."""
    if args.synthetic:
        seqs = synthetic_sequences(args.n_sequences or 31071, kind=args.synthetic_kind, seed=args.seed)
        desc = f"synthetic ({args.synthetic_kind}, MSNBC-like lengths 20..100, V=17, seed {args.seed})"
        return seqs, MSNBC_N_SYMBOLS, desc

    data_dir = resolve_data_dir(args.data_dir)
    db = load_paper_subset("msnbc", data_dir, n=args.n_sequences, seed=args.seed)
    desc = f"MSNBC paper subset (lengths 20..100) from {data_dir}"
    if args.n_sequences:
        desc += f", random sample of {args.n_sequences} (seed {args.seed})"
    return list(db.sequences), int(db.n_symbols), desc


# ----------------------------------------------------------------------------- configs
TORCH_DTYPES = {"float64": torch.float64, "float32": torch.float32}


def make_guide(name: str, reference: bool = False):
    if name == "pf":
        return PFGuide(reference=reference)
    if name == "ff":
        return FFGuide()
    raise ValueError(f"unknown guide {name!r}")


def make_params(K: int, V: int, dtype: str):
    """Starting parameters of LDHMM at K states.

    float32 parameters are the float64 ones rounded to float32 (same values up to rounding), so
    that float32 and float64 sweeps can be compared sequence by sequence.
    """
    p = init_parameters(LDHMM_SHARING, K, V, seed=0, dtype=torch.float64)
    if dtype == "float64":
        return p
    dt = TORCH_DTYPES[dtype]
    return VariantParameters(
        p.sharing,
        {k: v.to(dt) for k, v in p.prior.items()},
        {k: v.to(dt) for k, v in p.posterior.items()},
        {k: v.to(dt) for k, v in p.log_point.items()},
    )


def warm_states(buckets, params, guide, sweeps: int = 5) -> list:
    """Each bucket's state after ``sweeps`` sweeps from the cold start: where the timed warm
    sweeps (:func:`e_step_sweep_warm`) begin, as every EM iteration after the first does."""
    return [e_step_bucket(b, params, guide, None, max_iter=sweeps) for b in buckets]


def e_step_sweep_warm(buckets, params, guide, states):
    """One E-step sweep over all buckets from ``states`` (copied, so that every run starts from
    the same point): the unit an EM iteration repeats."""
    for b, st in zip(buckets, states):
        e_step_bucket(b, params, guide, st, max_iter=1)


def e_step_sweep(buckets, params, guide, n_total: int | None = None):
    """One E-step sweep over all buckets; returns the per-sequence ELBO (numpy, data order)."""
    elbo = np.full(n_total, np.nan) if n_total is not None else None
    for b in buckets:
        st = e_step_bucket(b, params, guide, None, max_iter=1)
        if elbo is not None:
            elbo[b.index.numpy()] = st.elbo.double().numpy()
    return elbo


def hmmlearn_model(K: int, V: int, implementation: str, n_iter: int = 1, tol: float = 0.0):
    return CategoricalHMM(
        n_components=K,
        n_features=V,
        implementation=implementation,
        n_iter=n_iter,
        init_params="ste",
        tol=tol,
        random_state=0,
    )


def hmmlearn_inputs(seqs):
    X = np.concatenate(seqs).astype(np.int64)[:, None]
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    return X, lengths


@dataclass
class Row:
    impl: str
    guide: str
    dtype: str
    K: int | None
    times: list = field(default_factory=list)
    warmup_s: float = math.nan
    peak_mib: float = math.nan
    note: str = ""
    threads: int | None = None

    @property
    def seconds(self) -> float:
        return statistics.median(self.times) if self.times else math.nan


def warm_up(fn, meter: PeakRSS | None) -> tuple[float, float]:
    """One untimed-for-the-median run of ``fn``: (its seconds, peak MiB or NaN)."""
    if meter is not None:
        meter.start()
    t0 = time.perf_counter()
    fn()
    warm = time.perf_counter() - t0
    return warm, (meter.stop_mib() if meter is not None else math.nan)


def time_interleaved(configs: list, repeats: int, budget: float) -> None:
    """Timed runs in rounds: every configuration once per round, ``repeats`` rounds, so that a
    drift of the machine's speed hits every configuration alike. A configuration leaves the
    rounds once its warm-up plus timed runs exceed ``budget`` seconds (at least one run).

    ``configs``: (Row, fn) pairs whose ``warmup_s`` is set; fills each ``Row.times``."""
    for _ in range(repeats):
        for row, fn in configs:
            if row.times and row.warmup_s + sum(row.times) > budget:
                continue
            t0 = time.perf_counter()
            fn()
            row.times.append(time.perf_counter() - t0)


# ----------------------------------------------------------------------------- subprocess memory
def _worker(spec_json: str) -> int:
    """Child process of ``--memory subprocess``: one run of one configuration, peak RSS out."""
    spec = json.loads(spec_json)
    kernel_info(spec.get("pf_kernel", "default"))
    if spec.get("threads"):
        set_threads(int(spec["threads"]))
    cache = np.load(spec["cache"])
    tokens, lengths = cache["tokens"], cache["lengths"]
    seqs = np.split(tokens, np.cumsum(lengths)[:-1])
    V = int(spec["V"])
    meter = PeakRSS()
    impl = spec["impl"]
    if impl.startswith("hmmlearn"):
        X, L = hmmlearn_inputs(seqs)
        model = hmmlearn_model(spec["K"], V, impl.split("/")[1])
        meter.start()
        model.fit(X, L)
    elif impl == "ldhmm/bucketing":
        meter.start()
        make_buckets(seqs)
    else:
        buckets = make_buckets(seqs)
        params = make_params(spec["K"], V, spec["dtype"])
        guide = make_guide(spec["guide"])
        meter.start()
        e_step_sweep(buckets, params, guide)
    peak = meter.stop_mib()

    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"peak_mib": peak, "maxrss_mib": maxrss}))
    return 0


def subprocess_peak(row: Row, cache: Path, V: int, threads: int | None, pf_kernel: str) -> float:
    spec = {
        "impl": row.impl,
        "guide": row.guide,
        "dtype": row.dtype,
        "K": row.K,
        "V": V,
        "cache": str(cache),
        "threads": threads,
        "pf_kernel": pf_kernel,
    }
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--_worker", json.dumps(spec)],
        cwd=str(REPO),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        print(
            f"  memory worker failed for {row.impl} {row.guide} {row.dtype} K={row.K}:\n"
            + proc.stderr[-2000:],
            file=sys.stderr,
        )
        return math.nan
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["peak_mib"])


def prime(buckets, V, args, seqs):
    """Tiny untimed runs of every code path, so that lazy imports and one-time initialization
    (thread pools, sklearn validation, kernel dispatch) are charged to no configuration."""

    small = []
    for b in buckets:
        k = min(8, b.n_sequences)
        small.append(Bucket(b.index[:k], b.tokens[:k], b.lengths[:k], b.mask[:k]))
    for dt in args.dtypes:
        for g in args.guides:
            e_step_sweep(small, make_params(2, V, dt), make_guide(g))
    if not args.no_hmmlearn:
        X, L = hmmlearn_inputs(seqs[:50])
        for impl in ("scaling", "log"):
            hmmlearn_model(2, V, impl).fit(X, L)


# ----------------------------------------------------------------------------- reporting
def _numba_threading_ready() -> bool:
    try:
        sys.modules["numba"].threading_layer()
        return True
    except Exception:  # noqa: BLE001 - raises until a parallel kernel has run
        return False


def thread_info() -> str:
    parts = [
        f"torch {torch.__version__}: intra-op threads {torch.get_num_threads()}, "
        f"inter-op threads {torch.get_num_interop_threads()}"
    ]
    pools = [f"{p.get('internal_api')}({p.get('prefix')}) {p.get('num_threads')}" for p in threadpool_info()]
    parts.append("native thread pools: " + (", ".join(pools) if pools else "none loaded"))
    nb = _numba_module()
    if nb is not None:
        parts.append(
            f"numba {nb.__version__}: threads {nb.get_num_threads()} "
            f"(layer {getattr(nb, 'threading_layer', lambda: '?')() if _numba_threading_ready() else 'not started'})"  # noqa: E501
        )
    return "; ".join(parts)


def _numba_module():
    """numba, if some module of the project has loaded it (never imported here)."""
    return sys.modules.get("numba")


def set_threads(n: int):
    """torch's intra-op threads, and numba's when numba is loaded (compiled kernels)."""
    torch.set_num_threads(n)
    nb = _numba_module()
    if nb is not None:
        try:
            nb.set_num_threads(min(n, nb.config.NUMBA_NUM_THREADS))
        except Exception:  # noqa: BLE001 - best effort
            pass


def kernel_info(choice: str) -> str:
    """Which E-step route the PF guide runs: the compiled kernels or the torch reference."""

    if choice != "default":
        kernels.ENABLED = choice == "compiled"
    if kernels.ENABLED:
        nb = _numba_module()
        nthreads = nb.get_num_threads() if nb is not None else "?"
        return f"PF kernel: compiled (ldhmm.inference.cavi.kernels, numba threads {nthreads})"
    return "PF kernel: torch reference route (ldhmm.inference.ops)"


def format_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    right = [False, False, False] + [True] * (len(header) - 4) + [False]

    def fmt(cells):
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)).rstrip()

    lines = [fmt(header), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in rows]
    return "\n".join(lines)


def _g(x, spec):
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


# ----------------------------------------------------------------------------- checks
def numerical_checks(seqs, V, K, guides, dtypes, elbos, log):
    """float32 vs float64 ELBO after one sweep; PF fast vs reference path on a small subset."""

    out = []
    if "float32" in dtypes and "float64" in dtypes:
        for g in guides:
            a, b = elbos.get((g, K, "float64")), elbos.get((g, K, "float32"))
            if a is None or b is None:
                continue
            diff = np.abs(a - b)
            rel = diff / np.maximum(np.abs(a), 1e-300)
            out.append(
                f"float32 vs float64, {g.upper()}, K={K}, one sweep, {len(a)} sequences: "
                f"per-sequence ELBO max abs diff {diff.max():.3g} nats, max rel diff "
                f"{rel.max():.3g}, total ELBO rel diff {abs(a.sum() - b.sum()) / abs(a.sum()):.3g}"
                f"; finite: {bool(np.isfinite(b).all())}"
            )
    # PF fast vs reference on a small subset: a spread of lengths plus short prefixes (1, 2, 3).
    rng = np.random.default_rng(0)
    pick = rng.choice(len(seqs), size=min(300, len(seqs)), replace=False)
    sub = [seqs[i] for i in pick] + [seqs[int(pick[0])][:L] for L in (1, 2, 3)]
    buckets = make_buckets(sub)
    params = make_params(K, V, "float64")
    worst = {"elbo": 0.0, "elbo_rel": 0.0, "counts": 0.0, "marg_norm": 0.0}
    t_fast = t_ref = 0.0
    for b in buckets:
        t0 = time.perf_counter()
        fast = e_step_bucket(b, params, make_guide("pf"), None, max_iter=1)
        t1 = time.perf_counter()
        ref = e_step_bucket(b, params, make_guide("pf", reference=True), None, max_iter=1)
        t2 = time.perf_counter()
        t_fast += t1 - t0
        t_ref += t2 - t1
        d = (fast.elbo - ref.elbo).abs()
        worst["elbo"] = max(worst["elbo"], float(d.max()))
        worst["elbo_rel"] = max(worst["elbo_rel"], float((d / ref.elbo.abs()).max()))
        for gname in ("pi", "A", "B"):
            worst["counts"] = max(
                worst["counts"], float((fast.counts[gname] - ref.counts[gname]).abs().max())
            )
        # every real position's marginal sums to 1: pi counts sum to 1, B counts to the length
        tot = fast.counts["B"].sum((1, 2))
        worst["marg_norm"] = max(worst["marg_norm"], float((tot - b.lengths.to(tot.dtype)).abs().max()))
    out.append(
        f"PF fast vs reference (log-space) path, K={K}, float64, {len(sub)} sequences "
        f"(incl. lengths 1, 2, 3): per-sequence ELBO max abs diff {worst['elbo']:.3g} "
        f"(rel {worst['elbo_rel']:.3g}), expected counts max abs diff {worst['counts']:.3g}, "
        f"|sum of marginals - length| max {worst['marg_norm']:.3g}; "
        f"time fast {t_fast:.3f} s vs reference {t_ref:.3f} s"
    )
    for line in out:
        log(line)
    return out


# ----------------------------------------------------------------------------- profile
def run_profile(buckets, V, dtype, out_dir: Path, log, top: int = 20):
    """Profile one PF sweep at K = 8: torch ops by self CPU time, and Python functions (cProfile)."""

    params = make_params(PROFILE_K, V, dtype)
    guide = make_guide("pf")
    e_step_sweep(buckets[:1], params, guide)  # warm-up (lazy init)

    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        e_step_sweep(buckets, params, guide)
    wall = time.perf_counter() - t0
    events = prof.key_averages()
    n_ops = sum(e.count for e in events)
    total_self_us = sum(e.self_cpu_time_total for e in events)
    steps = sum(b.max_length for b in buckets)
    table = events.table(sort_by="self_cpu_time_total", row_limit=top)
    header = (
        f"torch.profiler, one PF sweep, K={PROFILE_K}, {dtype}, {len(buckets)} buckets, "
        f"{steps} padded time steps in all: wall {wall:.2f} s (with profiler), "
        f"{n_ops} op calls ({n_ops / max(steps, 1):.1f} per time step), "
        f"self CPU total {total_self_us / 1e6:.2f} s"
    )
    log("\n" + header)
    log(table)

    pr = cProfile.Profile()
    t0 = time.perf_counter()
    pr.enable()
    e_step_sweep(buckets, params, guide)
    pr.disable()
    wall_c = time.perf_counter() - t0
    s = io.StringIO()
    pstats.Stats(pr, stream=s).strip_dirs().sort_stats("tottime").print_stats(top)
    ctext = s.getvalue()
    log(
        f"torch ops (aten::*) account for {total_self_us / 1e6:.2f} s of self CPU time; the rest of "
        f"the sweep's wall time is Python and kernels the torch profiler does not see (numba, "
        f"numpy): see cProfile below."
    )
    log(f"cProfile, same sweep (wall {wall_c:.2f} s), top {top} by own time:")
    log(ctext[ctext.find("ncalls") - 3 :] if "ncalls" in ctext else ctext)

    # per-bucket wall times, to see how the cost splits by bucket size
    lines = [
        "per-bucket wall time of one PF sweep (no profiler):",
        f"  {'M_b':>7} {'T_b':>5} {'cells':>9} {'seconds':>9} {'us/cell':>8}",
    ]

    for b in buckets:
        dt = math.inf
        for _ in range(2):  # min of two: the machine may be shared
            t0 = time.perf_counter()
            e_step_bucket(b, params, guide, None, max_iter=1)
            dt = min(dt, time.perf_counter() - t0)
        cells = b.n_sequences * b.max_length
        lines.append(f"  {b.n_sequences:>7} {b.max_length:>5} {cells:>9} {dt:>9.3f} {1e6 * dt / cells:>8.2f}")
    log("\n".join(lines))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "profile.txt").write_text(
        header + "\n" + table + "\n\ncProfile:\n" + ctext + "\n" + "\n".join(lines) + "\n"
    )


# ----------------------------------------------------------------------------- full fit
def run_full_fit(seqs, V, tol, max_iter, log):
    """Complete LDHMM-PF fit vs hmmlearn scaling fit to convergence at K = 8."""

    K = 8
    X, L = hmmlearn_inputs(seqs)
    first = hmmlearn_model(K, V, "scaling", n_iter=1).fit(X, L)
    ll1 = float(first.monitor_.history[0])
    abs_tol = tol * abs(ll1)
    log(
        f"full fit, K={K}: relative tol {tol:g}; hmmlearn's first-iteration log-lik {ll1:.6g} "
        f"-> absolute tol {abs_tol:.6g}"
    )
    t0 = time.perf_counter()
    hm = hmmlearn_model(K, V, "scaling", n_iter=max_iter, tol=abs_tol).fit(X, L)
    t_h = time.perf_counter() - t0
    hist = list(hm.monitor_.history)
    # monitor_.converged is also True when n_iter ran out; this is the tolerance test alone
    h_conv = len(hist) >= 2 and hist[-1] - hist[-2] < abs_tol
    log(
        f"  hmmlearn scaling: {t_h:.1f} s, {hm.monitor_.iter} iterations, converged "
        f"{h_conv}, final log-lik {hist[-1]:.6g}"
    )
    t0 = time.perf_counter()
    lm = LDHMM(K, n_symbols=V, guide="pf", tol=tol, max_iter=max_iter).fit(seqs)
    t_l = time.perf_counter() - t0
    log(
        f"  LDHMM-PF: {t_l:.1f} s, {lm.n_iter_} EM iterations, converged {lm.converged_}, "
        f"final ELBO {lm.elbo_history_[-1]:.6g}; time ratio LDHMM/hmmlearn {t_l / t_h:.2f}"
    )
    return [
        {
            "impl": "hmmlearn/scaling-fit",
            "K": K,
            "seconds": t_h,
            "iterations": hm.monitor_.iter,
            "converged": h_conv,
            "tol": abs_tol,
            "tol_kind": "absolute",
            "final": hm.monitor_.history[-1],
        },
        {
            "impl": "ldhmm/pf-fit",
            "K": K,
            "seconds": t_l,
            "iterations": lm.n_iter_,
            "converged": lm.converged_,
            "tol": tol,
            "tol_kind": "relative",
            "final": float(lm.elbo_history_[-1]),
        },
    ]


# ----------------------------------------------------------------------------- main
def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--synthetic", action="store_true", help="sample a synthetic MSNBC-shaped database")
    p.add_argument(
        "--synthetic-kind",
        choices=("ldhmm", "uniform"),
        default="ldhmm",
        help="synthetic symbols: sampled from an LDHMM (default) or uniform",
    )
    p.add_argument(
        "--data-dir",
        default=None,
        help="UCI data directory (default: $LDHMM_DATA)",
    )
    p.add_argument(
        "--n-sequences",
        type=int,
        default=None,
        help="use a seeded random sample of this many sequences (quick runs)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of --n-sequences / --synthetic")
    p.add_argument("--states", type=int, nargs="+", default=[2, 4, 8, 16])
    p.add_argument("--guides", nargs="+", choices=("pf", "ff"), default=["pf", "ff"])
    p.add_argument("--dtypes", nargs="+", choices=tuple(TORCH_DTYPES), default=["float64", "float32"])
    p.add_argument(
        "--repeats", type=int, default=5, help="interleaved rounds of timed runs (median; default 5)"
    )
    p.add_argument(
        "--time-budget",
        type=float,
        default=15.0,
        help="stop timed runs of a configuration once warm-up + runs exceed this many "
        "seconds (at least one timed run; default 15)",
    )
    p.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=None,
        help="torch.set_num_threads(N) for the LDHMM rows; several values run every "
        "E-step configuration at each (default: torch's default)",
    )
    p.add_argument(
        "--pf-kernel",
        choices=("default", "torch", "compiled"),
        default="default",
        help="PF forward-backward: the project's default, or force the torch / compiled "
        "path (sets inference.forward_backward.USE_COMPILED when it exists)",
    )
    p.add_argument(
        "--omp-passive",
        action="store_true",
        help="set OMP_WAIT_POLICY=PASSIVE before torch loads (idle OpenMP threads sleep "
        "instead of spinning; matters on a shared or oversubscribed machine)",
    )
    p.add_argument(
        "--memory",
        choices=("inproc", "subprocess", "off"),
        default="inproc",
        help="peak memory: in-process high-water mark (default), a fresh subprocess "
        "per configuration (one extra run each), or not at all",
    )
    p.add_argument(
        "--warm",
        action="store_true",
        help="also time warm sweeps (ldhmm/e-step-warm: from each bucket's state after 5 sweeps, "
        "as every EM iteration after the first; FF's cold sweep includes its start)",
    )
    p.add_argument("--no-hmmlearn", action="store_true", help="skip hmmlearn (ratios become empty)")
    p.add_argument("--no-checks", action="store_true", help="skip the numerical checks")
    p.add_argument("--out", default="results/bench", help="output directory (bench.csv, profile.txt)")
    p.add_argument(
        "--profile",
        action="store_true",
        help=f"profile one PF sweep at K={PROFILE_K} (torch.profiler + cProfile)",
    )
    p.add_argument("--profile-only", action="store_true", help="only the profile, no table")
    p.add_argument(
        "--full-fit",
        action="store_true",
        help="also fit LDHMM-PF and hmmlearn to convergence (needs --states 8; slow)",
    )
    p.add_argument("--fit-tol", type=float, default=1e-4, help="relative tolerance of --full-fit")
    p.add_argument("--fit-max-iter", type=int, default=1000, help="EM iterations at most in --full-fit")
    p.add_argument("--quiet", action="store_true", help="print only the table and checks")
    p.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.full_fit and args.states != [8]:
        p.error("--full-fit runs at K = 8 only: pass --states 8")
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args._worker is not None:
        return _worker(args._worker)
    thread_counts = args.threads or [torch.get_num_threads()]
    kernel = kernel_info(args.pf_kernel)  # imports the project's kernels (and numba, if used)
    set_threads(thread_counts[0])
    out_dir = Path(args.out)
    if not out_dir.is_absolute():
        out_dir = Path.cwd() / out_dir
    out_dir.mkdir(parents=True, exist_ok=True)

    def log(msg=""):
        print(msg, flush=True)

    def progress(msg):
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    t_start = time.perf_counter()
    seqs, V, desc = load_sequences(args)
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    n_tokens = int(lengths.sum())
    progress(f"loaded {len(seqs)} sequences in {time.perf_counter() - t_start:.1f} s")

    buckets = make_buckets(seqs)
    padded = sum(b.n_sequences * b.max_length for b in buckets)

    header = [
        f"data: {desc}",
        f"  {len(seqs)} sequences, lengths {lengths.min()}..{lengths.max()} (mean {lengths.mean():.1f}), "
        f"{n_tokens} tokens, V={V}; {len(buckets)} buckets, {padded} padded cells "
        f"({padded / n_tokens:.3f} x tokens), {sum(b.max_length for b in buckets)} time steps in all",
        f"threads: {thread_info()}",
        kernel if "ignored" in kernel else kernel_info("default"),
        "thread environment: "
        + (
            ", ".join(f"{k}={os.environ[k]}" for k in _THREAD_ENV if k in os.environ)
            or "none of " + " ".join(_THREAD_ENV) + " set"
        ),
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"numpy {np.__version__}",
    ]
    header.append(f"hmmlearn {hmmlearn.__version__}")
    try:
        load1 = os.getloadavg()[0]
        header.append(f"load average (1 min) at start: {load1:.2f}")
    except OSError:
        pass
    for line in header:
        log(line)

    if args.profile or args.profile_only:
        run_profile(buckets, V, args.dtypes[0], out_dir, log)
        if args.profile_only:
            return 0

    prime(buckets, V, args, seqs)
    meter = PeakRSS() if args.memory == "inproc" else None
    if args.memory == "inproc" and not meter.supported:
        log("peak memory: /proc/self/clear_refs not available, column left empty")
        meter = None
    rows: list[Row] = []

    X, L = hmmlearn_inputs(seqs) if not args.no_hmmlearn else (None, None)
    elbos = {}
    check_K = 8 if 8 in args.states else max(args.states)
    # Every configuration is warmed up (and its memory measured) first; then the timed runs
    # go in interleaved rounds (time_interleaved). Threads are set around each call.
    configs = []
    r = Row("ldhmm/bucketing", "", "", None, threads=torch.get_num_threads())
    bucketing = lambda: make_buckets(seqs)  # noqa: E731
    r.warmup_s, r.peak_mib = warm_up(bucketing, meter)
    rows.append(r)
    configs.append((r, bucketing))

    def with_threads(fn, threads):
        if len(thread_counts) == 1:
            return fn  # set once for the whole run

        def run():
            set_threads(threads)
            fn()

        return run

    for K in args.states:
        impls = [] if args.no_hmmlearn else ["scaling"] + (["log"] if K == LOG_REFERENCE_K else [])
        for impl in impls:
            r = Row(f"hmmlearn/{impl}", "", "float64", K, threads=1)  # _hmmc is single-threaded
            fn = lambda impl=impl, K=K: hmmlearn_model(K, V, impl).fit(X, L)  # noqa: E731
            if impl == "log":  # reference only: one run, no warm-up
                if meter is not None:
                    meter.start()
                t0 = time.perf_counter()
                fn()
                r.times = [time.perf_counter() - t0]
                r.peak_mib = meter.stop_mib() if meter is not None else math.nan
                r.note = "1 run, no warm-up"
            else:
                r.warmup_s, r.peak_mib = warm_up(fn, meter)
                configs.append((r, fn))
            rows.append(r)
            progress(f"K={K} hmmlearn {impl}: warm-up {r.warmup_s:.3f} s")
        for threads, g, dt in [(t, g, d) for t in thread_counts for g in args.guides for d in args.dtypes]:
            set_threads(threads)
            params = make_params(K, V, dt)
            guide = make_guide(g)
            result = {}

            def fn(params=params, guide=guide, result=result, K=K):
                result["elbo"] = e_step_sweep(buckets, params, guide, len(seqs) if K == check_K else None)

            r = Row("ldhmm/e-step", g, dt, K, threads=threads)
            r.warmup_s, r.peak_mib = warm_up(fn, meter)
            if K == check_K and threads == thread_counts[0]:
                elbos[(g, K, dt)] = result["elbo"]
                if not np.isfinite(result["elbo"]).all():
                    r.note = "non-finite ELBO!"
            rows.append(r)
            configs.append((r, with_threads(fn, threads)))
            progress(f"K={K} {g} {dt} threads={threads}: warm-up {r.warmup_s:.3f} s")
            if args.warm:
                states = warm_states(buckets, params, guide)
                warm_fn = lambda p=params, gd=guide, st=states: e_step_sweep_warm(buckets, p, gd, st)  # noqa: E731
                r = Row("ldhmm/e-step-warm", g, dt, K, threads=threads)
                r.warmup_s, r.peak_mib = warm_up(warm_fn, meter)
                rows.append(r)
                configs.append((r, with_threads(warm_fn, threads)))
                progress(f"K={K} {g} {dt} threads={threads} warm: warm-up {r.warmup_s:.3f} s")
        set_threads(thread_counts[0])
    progress(f"timed runs: {args.repeats} interleaved rounds over {len(configs)} configurations")
    time_interleaved(configs, args.repeats, args.time_budget)
    set_threads(thread_counts[0])

    if args.memory == "subprocess":
        cache = out_dir / "_data_cache.npz"
        np.savez(cache, tokens=np.concatenate(seqs), lengths=lengths)
        for r in rows:
            r.peak_mib = subprocess_peak(r, cache, V, r.threads, args.pf_kernel)
            progress(f"memory {r.impl} {r.guide} {r.dtype} K={r.K}: {r.peak_mib:.1f} MiB")
        cache.unlink()

    # table
    ref = {r.K: r.seconds for r in rows if r.impl == "hmmlearn/scaling"}
    table_header = [
        "implementation",
        "guide",
        "dtype",
        "K",
        "thr",
        "runs",
        "seconds",
        "min_s",
        "warmup_s",
        "tokens*K^2/s",
        "x_hmmlearn",
        "peak_MiB",
        "note",
    ]
    table_rows, csv_rows = [], []
    for r in rows:
        thr = n_tokens * r.K**2 / r.seconds if r.K else n_tokens / r.seconds
        ratio = r.seconds / ref[r.K] if r.K in ref else math.nan
        note = r.note or ("tokens/s" if r.K is None else "")
        table_rows.append(
            [
                r.impl,
                r.guide or "-",
                r.dtype or "-",
                str(r.K or "-"),
                str(r.threads or "-"),
                str(len(r.times)),
                _g(r.seconds, ".3f"),
                _g(min(r.times), ".3f"),
                _g(r.warmup_s, ".3f"),
                _g(thr, ".3e"),
                _g(ratio, ".3f"),
                _g(r.peak_mib, ".0f"),
                note,
            ]
        )
        csv_rows.append(
            {
                "implementation": r.impl,
                "guide": r.guide,
                "dtype": r.dtype,
                "K": r.K or "",
                "threads": r.threads or "",
                "runs": len(r.times),
                "seconds_median": r.seconds,
                "seconds_min": min(r.times),
                "seconds_all": " ".join(f"{t:.4f}" for t in r.times),
                "warmup_s": r.warmup_s,
                "tokens_K2_per_s": thr if r.K else "",
                "tokens_per_s": n_tokens / r.seconds,
                "ratio_to_hmmlearn_scaling": ratio,
                "peak_mib": r.peak_mib,
                "memory_mode": args.memory,
                "note": note,
                "n_sequences": len(seqs),
                "n_tokens": n_tokens,
                "padded_cells": padded,
                "n_buckets": len(buckets),
                "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
                "data": desc,
                "torch": torch.__version__,
                "cpus": os.cpu_count(),
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"),
            }
        )
    log("")
    try:
        log(f"load average (1 min) at the end of the timings: {os.getloadavg()[0]:.2f}")
    except OSError:
        pass
    log(format_table(table_header, table_rows))
    log(
        "seconds: median of the timed runs; x_hmmlearn: seconds / hmmlearn scaling seconds at the "
        "same K (lower is faster); peak_MiB: "
        + {
            "inproc": "extra peak RSS over the RSS before the configuration (in-process, VmHWM)",
            "subprocess": "extra peak RSS of one run in a fresh subprocess",
            "off": "not measured",
        }[args.memory]
    )

    checks = []
    if not args.no_checks:
        log("")
        log("numerical checks:")
        checks = numerical_checks(seqs, V, check_K, args.guides, args.dtypes, elbos, log)

    fit_rows = []
    if args.full_fit:
        log("")
        fit_rows = run_full_fit(seqs, V, args.fit_tol, args.fit_max_iter, log)

    csv_path = out_dir / "bench.csv"
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(csv_rows[0]))
        w.writeheader()
        w.writerows(csv_rows)
    (out_dir / "bench.txt").write_text(
        "\n".join(header)
        + "\n\n"
        + format_table(table_header, table_rows)
        + "\n\n"
        + "\n".join(checks)
        + "\n"
    )
    if fit_rows:
        with open(out_dir / "full_fit.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(fit_rows[0]))
            w.writeheader()
            w.writerows(fit_rows)
    log("")
    log(f"wrote {csv_path} ({time.perf_counter() - t_start:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
