"""``ldhmm fit DATA --states K --emission-context previous|N``: LDHMM whose emissions see the
events before (:class:`ldhmm.models.contextual.ContextualLDHMM`), one K, in this process or over
partitions (``--partitions``, ``--backend dask``; a partitioned directory's files read where the
partitions live: :mod:`ldhmm.models.contextual_fit`). Several K: :mod:`ldhmm.cli.fit_path`, the
same path as LDHMM's, in this process."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..data import is_partitioned, read_manifest
from ..data.terminal_text import shown
from ..inference.contexts import check_emission_context
from ..models.contextual import ContextualLDHMM
from .cluster import dask_client
from .data_options import given_data_options
from .fit_path import fit_data, model_options
from .options import options_given
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


def refuse_contextual_settings(args: argparse.Namespace, one_k: bool = False) -> None:
    """One line naming the settings given that a contextual fit lacks (a path of several K, or
    ``one_k``: a single fit, which takes the backend and the partitions). LDHMM's search settings
    count where they differ from their defaults (:func:`ldhmm.cli.options.options_given`):
    :class:`ldhmm.models.contextual.ContextualLDHMM` has no effort preset, no symbol-seeded start,
    no paper M-step and no path, and dropping them would fit something else than was asked."""
    flags = [("--init", args.init), ("--checkpoint", args.checkpoint)]
    flags += [
        (flag, True)
        for flag in options_given(args, "--effort", "--seeded-start", "--m-step", "--path-restarts")
    ]
    if not one_k:
        flags += [("--backend dask", args.backend != "local"), ("--partitions", args.partitions is not None)]
    unsupported = [flag for flag, given in flags if given]
    if unsupported:
        where = "an --emission-context fit" if one_k else "--emission-context along K fits in this process:"
        raise ValueError(f"{where} takes no {', '.join(unsupported)}")


def run_fit_contextual(args: argparse.Namespace, n_states: int, out) -> int:
    """Fit and save the contextual model of ``ldhmm fit`` (settings the variant lacks refused): on
    a partitioned directory (no data options given) each partition's worker reads its files."""
    refuse_contextual_settings(args, one_k=True)
    context = parse_emission_context(args.emission_context)
    if is_partitioned(args.data) and not given_data_options(args):
        manifest = read_manifest(args.data)
        data, n_symbols = str(args.data), int(manifest["n_symbols"])
        vocabulary = manifest.get("vocabulary") or [str(k) for k in range(n_symbols)]
        n_sequences, n_tokens = int(manifest["n_sequences"]), int(manifest["n_tokens"])
    else:
        data, _ = fit_data(args)
        n_symbols, vocabulary, n_sequences, n_tokens = (
            data.n_symbols,
            data.vocabulary,
            len(data),
            data.n_tokens,
        )
    model = ContextualLDHMM(n_states, **model_options(args, args.guide or "pf", n_symbols))
    t0 = time.perf_counter()
    with dask_client(args) as client:
        model.fit(data, backend=args.backend, client=client, n_partitions=args.partitions)
    seconds = time.perf_counter() - t0
    model.save(out, vocabulary=vocabulary)
    if not args.quiet:
        elbo = float(model.elbo_)
        where = f" in {model.n_partitions_} partitions ({args.backend})" if model.n_partitions_ > 1 else ""
        print(
            f"fitted LDHMM-{model.guide.upper()} with emission context {context!r} "
            f"({model.context_table_.n_contexts} context rows) K={n_states} on {n_sequences} sequences "
            f"({n_tokens} tokens, {n_symbols} symbols){where} in "
            f"{seconds:.1f} s, {model.n_iter_} EM iterations: training ELBO {elbo:.2f} nats "
            f"({elbo / n_tokens:.4f} per token)"
        )
        print(stopping_report(model))
        if model.recoveries_:
            print(f"recovered {len(model.recoveries_)} partitions of lost workers: {model.recoveries_}")
        print(f"model written to {shown(Path(out))}")
    return 0
