"""Pyro variants beside LDHMM-PF and HMM: sticky LDHMM and a mixture of LDHMM priors, fitted by SVI.

The two worked examples of the Pyro route (:mod:`ldhmm.models.sticky`,
:mod:`ldhmm.models.mixture`) join the comparison harness as factories, like any plug-in::

    ldhmm.compare({"sticky": ..., "mixture": ..., "LDHMM-PF": None, "HMM": None}, "entree", ...)

The settings of the runs in experiments/README.md (hours on a laptop; the SVI fits dominate)::

    python -m ldhmm.experiments.pyro_variants --data entree --states 2 3 4 5 6 --folds 10
    python -m ldhmm.experiments.pyro_variants --data msnbc --states 4 --folds 5

A small run to see it work (minutes)::

    python -m ldhmm.experiments.pyro_variants --data entree --states 2 3 --folds 3 --epochs 60

``--measure`` instead times one Entree split (10 folds, fold 0: 90% train, 10% held out) at
``K = 3``: the closed-form fit, the SVI route on the LDHMM model
(:func:`ldhmm.models.pyro_model.ldhmm_sequence_model`) and the two variants (seconds per
epoch, epochs and seconds to the convergence rule), and cross-checks the route against the
closed form: the held-out bound of the route's own fit, the closed-form PF bound of the route's
hyper-parameters, and the route's bound of the closed form's hyper-parameters.

On a machine whose cores are shared with other jobs, set ``OMP_WAIT_POLICY=passive`` (before
Python starts): OpenMP threads that spin-wait after numba's parallel kernels otherwise starve
torch's small operations, and both the closed-form fit and SVI run several times slower.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.distributions import constraints

from .. import data as ldata
from ..inference.svi.dirichlet_guide import DirichletMeanField
from ..models import LDHMM
from ..models.mixture import mixture_ldhmm
from ..models.pyro_model import (
    ldhmm_init,
    ldhmm_pf_offsets,
    ldhmm_priors,
    ldhmm_sequence_model,
    observe_hmm,
    sequence_parameters,
)
from ..models.pyro_sequence import PyroSequenceModel
from ..models.sticky import sticky_ldhmm
from .compare import ComparisonResult, compare

__all__ = ["VariantFactory", "lineup", "compare_variants", "ldhmm_model_any_concentration", "measure", "main"]


@dataclass(frozen=True)
class VariantFactory:
    """A picklable harness factory: ``build(n_states, n_symbols, seed, **options)``.

    Its ``__qualname__`` names the builder and the options, so the run's ``config.json``
    records them.
    """

    build: object
    options: tuple = field(default_factory=tuple)

    def __post_init__(self):
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options)
        object.__setattr__(self, "__qualname__", f"{self.build.__name__}({opts})")

    def __call__(self, n_states: int, n_symbols: int, seed: int):
        return self.build(n_states, n_symbols, seed, **dict(self.options))


def lineup(epochs: int | None = None, batch_size: int | str = "auto") -> dict:
    """The models of the comparison: the two variants (SVI), LDHMM-PF and HMM (built in)."""
    options = ((("batch_size", batch_size),) if batch_size != "auto" else ()) + (
        (("max_epochs", int(epochs)),) if epochs else ()
    )
    return {
        "sticky": VariantFactory(sticky_ldhmm, options),
        "mixture": VariantFactory(mixture_ldhmm, options),
        "LDHMM-PF": None,
        "HMM": None,
    }


def compare_variants(
    data="entree", states=(2, 3, 4, 5, 6), epochs: int | None = None, batch_size="auto", out=None, **settings
) -> ComparisonResult:
    """``ldhmm.compare`` of :func:`lineup` (see the module docstring) into ``out`` (default
    ``results/pyro-variants-<data>``); ``settings``: the other keywords of :func:`ldhmm.compare`
    (``folds``, ``jobs``, ``seed``, ``data_dir``, ``restarts``, ``is_samples``). Prints two tables."""
    result = compare(
        lineup(epochs, batch_size),
        data,
        states=list(states),
        out=out or f"results/pyro-variants-{data}",
        quiet=True,
        **settings,
    )
    for column, label in (
        ("heldout_elbo_per_token", "held-out score per token (each row's kind and bound family)"),
        ("log_px_per_token", "log p(x) per token (exact where there is one, importance-sampled otherwise)"),
        ("fit_seconds", "fit seconds (mean over folds)"),
    ):
        print(f"\n{label}")
        print(result.table(column).round(4).to_string())
    print("", *result.best, sep="\n")
    if result.errors:
        print("\nfailed tasks:", *result.errors, sep="\n  ")
    print(f"\nfiles: {result.out}/summary.md, folds.csv, ttests.csv")
    return result


def ldhmm_model_any_concentration(batch):
    """:func:`ldhmm.models.pyro_model.ldhmm_sequence_model` with concentrations only positive,
    to score given hyper-parameters below the route's floor of 0.02 (the closed form learns
    1e-6); never fitted (see :data:`ldhmm.inference.svi.dirichlet_guide.SVI_MIN_CONCENTRATION`)."""
    priors = ldhmm_priors(batch, constraint=constraints.positive)
    with batch.plate():
        observe_hmm(batch, *sequence_parameters(*priors))


def _per_token(scores, seqs) -> float:
    return float(np.sum(scores) / _n_tokens(seqs))


def _svi_row(model, fit_seconds, train, test) -> dict:
    start = time.perf_counter()
    bound = _per_token(model.score_samples(test), test)
    return {
        "fit_seconds": fit_seconds,
        "epochs": int(model.n_iter_),
        "converged": bool(model.converged_),
        "seconds_per_epoch": float(np.mean(model.epoch_seconds_)),
        "train_elbo_per_token_last_epoch": float(model.elbo_history_[-1] / _n_tokens(train)),
        "heldout_bound_per_token": bound,
        "score_seconds": time.perf_counter() - start,
    }


def _stage(name: str, started: float) -> None:
    """One progress line on stderr: a stage of :func:`measure` done, its seconds, the peak memory."""
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"measure: {name} done, {time.perf_counter() - started:.1f} s, peak {peak_mb:.0f} MB",
        file=sys.stderr,
        flush=True,
    )


def _n_tokens(seqs) -> int:
    return int(sum(len(s) for s in seqs))


def measure(
    data_dir=None,
    n_states: int = 3,
    folds: int = 10,
    fold: int = 0,
    seed: int = 0,
    data: str = "entree",
    batch_size: int | str = "auto",
    guides: bool = False,
) -> dict:
    """Timings and the cross-check of the route against the closed form on one split.

    Parameters
    ----------
    data : {"entree", "msnbc"}
        The paper's subset (MSNBC: 31,071 sequences of length 20..100).
    batch_size : int or "auto"
        Minibatch size of the SVI fits (:func:`ldhmm.inference.svi.minibatch.auto_batch_size`).
    guides : bool
        Also fit the route's LDHMM model with the guide's other choices: no closed-form local
        step (one Adam step per row and visit), offsets started at 0.5 instead of the PF
        E-step, free concentrations started at the prior.

    Returns
    -------
    dict of dicts: ``closed_form``, ``route``, ``sticky``, ``mixture`` (fit seconds, epochs,
    seconds per epoch, held-out bound per token), ``cross_check`` (the bounds of each fit's
    hyper-parameters under the other scorer) and, with ``guides``, one entry per guide choice.
    """
    db = ldata.load_paper_subset(data, ldata.resolve_data_dir(data_dir))
    train_idx, test_idx = ldata.kfold_indices(len(db), folds, seed=seed)[fold]
    sequences = db.sequences  # a property that builds the list: read it once
    train = [sequences[i] for i in train_idx]
    test = [sequences[i] for i in test_idx]
    K, V = n_states, db.n_symbols
    out = {}
    begun = time.perf_counter()

    start = time.perf_counter()
    closed = LDHMM(K, n_symbols=V, seed=seed).fit(train)
    closed_s = time.perf_counter() - start
    start = time.perf_counter()
    one_start = LDHMM(K, n_symbols=V, seed=seed, n_init=1).fit(train)
    out["closed_form"] = {
        "fit_seconds": closed_s,
        "fit_seconds_one_start": time.perf_counter() - start,
        "em_iterations_one_start": int(one_start.n_iter_),
        "seconds_per_em_iteration": (time.perf_counter() - start) / max(int(one_start.n_iter_), 1),
        "heldout_bound_per_token": _per_token(closed.score_samples(test), test),
        "heldout_is_per_token": _per_token(closed.log_marginal_is(test, 200, seed=seed), test),
    }
    _stage("closed form", begun)

    guide = DirichletMeanField(ldhmm_sequence_model, init_offsets=ldhmm_pf_offsets)
    start = time.perf_counter()
    route = PyroSequenceModel(
        ldhmm_sequence_model, guide, K, n_symbols=V, init=ldhmm_init, seed=seed, batch_size=batch_size
    )
    route.fit(train)
    _stage("route fit", begun)
    out["route"] = _svi_row(route, time.perf_counter() - start, train, test)
    _stage("route held-out bound", begun)
    out["route"]["heldout_is_per_token"] = _per_token(route.log_marginal_is(test, 200, seed=seed), test)
    _stage("route importance sampling", begun)

    p = route.params_
    route_hyper = LDHMM.from_hyperparameters(p["alpha_pi"], p["alpha_A"], p["beta"])
    closed_hyper = {"alpha_pi": closed.alpha_pi_, "alpha_A": closed.alpha_A_, "beta": closed.beta_}
    at_closed = PyroSequenceModel.from_parameters(
        ldhmm_model_any_concentration,
        DirichletMeanField(ldhmm_model_any_concentration, init_offsets=ldhmm_pf_offsets),
        K,
        V,
        closed_hyper,
        score_epochs=0,
        score_draws=200,
        seed=seed,
    )
    out["cross_check"] = {
        "closed_form_pf_bound": out["closed_form"]["heldout_bound_per_token"],
        "route_bound_route_fit": out["route"]["heldout_bound_per_token"],
        "pf_bound_route_fit": _per_token(route_hyper.score_samples(test), test),
        "route_bound_closed_form_fit": _per_token(at_closed.score_samples(test), test),
    }
    _stage("cross-check", begun)

    for name, build in (("sticky", sticky_ldhmm), ("mixture", mixture_ldhmm)):
        start = time.perf_counter()
        model = build(K, V, seed, batch_size=batch_size).fit(train)
        out[name] = _svi_row(model, time.perf_counter() - start, train, test)
        _stage(name, begun)
    if guides:
        choices = {
            "guide_no_local_step": (
                DirichletMeanField(ldhmm_sequence_model, init_offsets=ldhmm_pf_offsets),
                False,
            ),
            "guide_offsets_from_0.5": (DirichletMeanField(ldhmm_sequence_model), True),
            "guide_free_from_prior": (DirichletMeanField(ldhmm_sequence_model, relative=False), True),
        }
        for name, (guide, refresh) in choices.items():
            start = time.perf_counter()
            model = PyroSequenceModel(
                ldhmm_sequence_model,
                guide,
                K,
                n_symbols=V,
                init=ldhmm_init,
                seed=seed,
                batch_size=batch_size,
                refresh_locals=refresh,
            )
            out[name] = _svi_row(model.fit(train), time.perf_counter() - start, train, test)
            out[name]["alpha_A_diagonal"] = " ".join(f"{v:.3g}" for v in np.diag(model.params_["alpha_A"]))
            _stage(name, begun)
    return out


def _batch_size(text: str):
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--batch-size must be an integer or auto, got {text!r}") from None


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="entree", help="entree, msnbc, synthetic or a data file")
    p.add_argument(
        "--states", nargs="+", type=int, default=None, help="default: 2 3 4 5 6 (with --measure: 3)"
    )
    p.add_argument("--folds", type=int, default=10)
    p.add_argument("--epochs", type=int, default=None, help="SVI epochs at most (default: the models' own)")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--restarts", type=int, default=3)
    p.add_argument("--is-samples", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default=None)
    p.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads (small tensors: 1)")
    p.add_argument(
        "--batch-size", type=_batch_size, default="auto", help="sequences per SVI minibatch, or auto"
    )
    p.add_argument(
        "--measure",
        action="store_true",
        help="time one split instead (fold 0; K = the first of --states, default 3 for entree)",
    )
    p.add_argument("--guides", action="store_true", help="with --measure: also the guide's other choices")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    if args.measure:
        result = measure(
            args.data_dir,
            n_states=(args.states or [3])[0],
            folds=args.folds,
            seed=args.seed,
            data=args.data,
            batch_size=args.batch_size,
            guides=args.guides,
        )
        for part, values in result.items():
            print(part)
            for key, value in values.items():
                print(f"  {key:32s} {value:.4f}" if isinstance(value, float) else f"  {key:32s} {value}")
        return result
    settings = {k: v for k, v in vars(args).items() if k not in ("torch_threads", "measure", "guides")}
    return compare_variants(**{**settings, "states": args.states or [2, 3, 4, 5, 6]})


if __name__ == "__main__":
    main()
