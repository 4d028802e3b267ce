"""Where a PF sweep's time goes inside the compiled kernel: a short table.

Times (2 numba threads unless ``--threads``) of

* the special functions the kernel calls per Dirichlet entry and per potential, per call;
* one whole fused E-step sweep on synthetic data shaped like MSNBC (30,000 sequences of 30
  tokens) and on long sequences (900 x 1,000 tokens), with the per-sequence Dirichlet groups
  (LDHMM) and without them (every group database-level: forward-backward and counts only).

The difference between the two rows of one shape is the per-sequence Dirichlet work (E log theta,
collapsed ELBO terms, M-step sums), which does not depend on the sequence length.

Usage::

    python benchmarks/kernel_profile.py [--states 8] [--threads 2]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch


def _best_of(fn, repeats=4):
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--states", type=int, default=8)
    p.add_argument("--symbols", type=int, default=17)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    import numba
    from numba import njit

    from ldhmm.inference import HMM_SHARING, LDHMM_SHARING, VariantParameters
    from ldhmm.inference.cavi.expectation import prior_terms
    from ldhmm.inference.cavi.kernels.fused_sweeps import fused_e_step
    from ldhmm.inference.cavi.kernels.special import lgamma_digamma

    if args.threads:
        numba.set_num_threads(args.threads)
    K, V = args.states, args.symbols
    rng = np.random.default_rng(args.seed)

    def summed(f):
        """A compiled loop: the sum of ``f(x[i])`` over an array x (``f`` inlined into it)."""
        f = njit(inline="always")(f)

        @njit
        def loop(x):
            s = 0.0
            for i in range(x.shape[0]):
                s += f(x[i])
            return s

        return loop

    def lgamma_plus_digamma(v):
        a, b = lgamma_digamma(v)
        return a + b

    x = rng.uniform(0.1, 5.0, 1_000_000)
    print(
        f"per call (1 thread, 1e6 calls, x ~ U(0.1, 5)); numba threads for the sweeps: "
        f"{numba.get_num_threads()}"
    )
    for name, fn in (
        ("lgamma+digamma (kernel's)", summed(lgamma_plus_digamma)),
        ("exp", summed(lambda v: np.exp(v))),
        ("log", summed(lambda v: np.log(v))),
    ):
        fn(x[:10])
        print(f"  {name:<28} {_best_of(lambda fn=fn: fn(x)) * 1e3:6.1f} ns")

    ldhmm_params = VariantParameters(
        LDHMM_SHARING,
        prior={
            "pi": torch.ones(K, dtype=torch.float64),
            "A": torch.ones(K, K, dtype=torch.float64),
            "B": torch.from_numpy(rng.uniform(0.5, 2.0, (K, V))),
        },
    )
    hmm_params = VariantParameters(
        HMM_SHARING,
        log_point={
            "pi": torch.full((K,), -math.log(K), dtype=torch.float64),
            "A": torch.full((K, K), -math.log(K), dtype=torch.float64),
            "B": torch.from_numpy(np.log(rng.dirichlet(np.ones(V), K))),
        },
    )

    def sweep(M, T, params):
        tokens = rng.integers(0, V, (M, T)).astype(np.int64)
        lengths = np.full(M, T, dtype=np.int64)

        def run():
            counts = (np.zeros((M, K)), np.zeros((M, K, K)), np.zeros((M, K, V)))
            prior, terms, fixed, flags = prior_terms(params)
            fused_e_step("pf", tokens, lengths, prior, terms, fixed, flags, counts, 1, 0.0)

        run()
        return _best_of(run)

    print(f"\none PF sweep, K={K}, V={V} (cold start), best of 4")
    print(
        f"  {'shape':<12} {'per-sequence groups':<20} {'seconds':>8} {'thread-ns/token':>16} "
        f"{'thread-us/sequence':>19}"
    )
    threads = numba.get_num_threads()
    for M, T in ((30_000, 30), (900, 1_000)):
        for label, params in (("pi, A, B (LDHMM)", ldhmm_params), ("none (HMM)", hmm_params)):
            t = sweep(M, T, params)
            print(
                f"  {f'{M} x {T}':<12} {label:<20} {t:8.3f} {t * threads / (M * T) * 1e9:16.0f} "
                f"{t * threads / M * 1e6:19.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
