"""A worked comparison script: a user-defined LDHMM variant against LDHMM-PF and HMM.

The variant shares one emission matrix B across all sequences (a point estimate) while every
sequence keeps its own initial and transition distributions: "users differ in how they move,
not in what the pages are". It is declared as a ``ParameterSharing`` and compared through
the Python API, with the built-in models named by their strings.

Run it on Entree (the paper's 422 sessions; needs ``LDHMM_DATA`` or ``--data-dir``)::

    python examples/compare_variant.py --data entree --states 2 3 4 --folds 10 --jobs 2

or on any log (one sequence of tokens per line)::

    python examples/compare_variant.py --data my_log.txt --out results/my-variant

The test suite runs it on the built-in synthetic database with tiny settings.
"""

from __future__ import annotations

import argparse

import ldhmm
from ldhmm import ParameterSharing, VariantHMM

#: pi and A per sequence (drawn from learned Dirichlet priors), B one point estimate.
SHARED_EMISSIONS = ParameterSharing(pi="sequence", A="sequence", B="point")


def shared_emissions(
    n_states: int, n_symbols: int, seed: int, n_init: int = 3, max_iter: int = 100
) -> VariantHMM:
    """The factory the harness calls: a fresh, unfitted model. It is at module level so that
    ``jobs > 1`` can send it to worker processes; it names ``n_init`` and ``max_iter``, so the
    run's restart budget and EM setting reach it as they reach the built-in models."""
    return VariantHMM(
        n_states, n_symbols=n_symbols, sharing=SHARED_EMISSIONS, seed=seed, n_init=n_init, max_iter=max_iter
    )


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--data", default="synthetic", help="a data file or entree/msnbc/synthetic (default synthetic)"
    )
    p.add_argument("--states", nargs="+", type=int, default=[2, 3])
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--restarts", type=int, default=3)
    p.add_argument("--max-iter", type=int, default=None)
    p.add_argument("--n-sequences", type=int, default=None)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", default="results/compare-variant")
    return p.parse_args(argv)


def main(argv=None) -> ldhmm.ComparisonResult:
    args = parse_args(argv)
    # each option of the parser is the keyword of ldhmm.compare of its name (--n-sequences: n_sequences)
    models = {"shared-B": shared_emissions, "LDHMM-PF": None, "HMM": None}
    results = ldhmm.compare(models, is_samples=50, quiet=True, **vars(args))
    # Per-token held-out score of each model and K; the score column says what each row is.
    print(results.table("heldout_elbo_per_token").round(4).to_string())
    # The two bounds are of different families (a point-estimated B changes q(theta)), so the
    # variant and LDHMM-PF are compared by log p(x), paired over folds: how often does it win?
    wide = results.folds.pivot_table(index=["K", "fold"], columns="model", values="heldout_is")
    wins = (wide["shared-B"] > wide["LDHMM-PF"]).groupby(level="K").mean()
    print("fraction of folds where shared-B beats LDHMM-PF by log p(x):", wins.round(2).to_dict())
    print("\n".join(results.best))
    print(f"files: {results.out}/summary.md, folds.csv, ttests.csv, loglik_vs_K.png")
    return results


if __name__ == "__main__":
    main()
