"""``ldhmm fit DATA --states K --emission-context previous|N``: LDHMM whose emissions see the
events before (:class:`ldhmm.models.contextual.ContextualLDHMM`), one K, fitted in this process
(several K: :mod:`ldhmm.cli.fit_path`, the same path as LDHMM's)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..data.terminal_text import shown
from ..inference.contexts import check_emission_context
from ..models.contextual import ContextualLDHMM
from .fit_path import fit_data
from .outputs import stopping_report

__all__ = [
    "parse_emission_context",
    "parse_context_smoothing",
    "refuse_contextual_settings",
    "run_fit_contextual",
]


def parse_emission_context(text: str):
    """``--emission-context``: ``previous`` or an order 1..8 (a one-line ValueError otherwise);
    a value parsed already is returned as it is."""
    if not isinstance(text, str):
        return check_emission_context(text)
    value = text if text == "previous" else (int(text) if text.isdigit() else text)
    try:
        return check_emission_context(value)
    except ValueError:
        raise ValueError(
            f"--emission-context: expected 'previous' or an order 1..8 (the last n events), got {text!r}"
        ) from None


def parse_context_smoothing(text: str):
    """``--context-smoothing``: ``chain`` or a number (checked by the model)."""
    if text == "chain":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'chain' or a number, got {text!r}") from None


def refuse_contextual_settings(args: argparse.Namespace) -> None:
    """One line naming the settings given that a contextual fit lacks."""
    unsupported = [
        flag
        for flag, given in (
            ("--init", args.init),
            ("--checkpoint", args.checkpoint),
            ("--backend dask", args.backend != "local"),
            ("--partitions", args.partitions is not None),
        )
        if given
    ]
    if unsupported:
        raise ValueError(f"--emission-context fits in this process: no {', '.join(unsupported)}")


def run_fit_contextual(args: argparse.Namespace, n_states: int, out) -> int:
    """Fit and save the contextual model of ``ldhmm fit`` (settings the variant lacks refused)."""
    refuse_contextual_settings(args)
    context = parse_emission_context(args.emission_context)
    db, _ = fit_data(args)
    model = ContextualLDHMM(
        n_states,
        n_symbols=db.n_symbols,
        emission_context=context,
        min_context_count=args.min_context_count,
        context_smoothing=args.context_smoothing,
        max_iter=args.max_iter,
        tol=args.tol,
        n_init=args.restarts,
        seed=args.seed,
        guide=args.guide or "pf",
    )
    t0 = time.perf_counter()
    model.fit(db)
    seconds = time.perf_counter() - t0
    model.save(out, vocabulary=db.vocabulary)
    if not args.quiet:
        elbo = float(model.elbo_)
        print(
            f"fitted LDHMM-{model.guide.upper()} with emission context {context!r} "
            f"({model.context_table_.n_contexts} context rows) K={n_states} on {len(db)} sequences "
            f"({db.n_tokens} tokens, {db.n_symbols} symbols) in "
            f"{seconds:.1f} s, {model.n_iter_} EM iterations: training ELBO {elbo:.2f} nats "
            f"({elbo / db.n_tokens:.4f} per token)"
        )
        print(stopping_report(model))
        print(f"model written to {shown(Path(out))}")
    return 0
