"""``ldhmm fit``: fit an LDHMM on a user's log and save it with its vocabulary; with a range of K,
fit along K (:mod:`ldhmm.cli.fit_path`)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

from ..data import UNKNOWN, is_partitioned, read_manifest
from ..data.directory_lock import DirectoryLockedError, locked_directory
from ..data.terminal_text import shown
from ..inference.checkpoint import CheckpointError, describe_checkpoint, discard_checkpoint
from ..inference.contexts import context_order
from ..models import LDHMM
from ..models.collapse import diagnose_collapse
from ..models.path import parse_states
from .cluster import add_backend_arguments, dask_client
from .data_options import add_data_options, given_data_options
from .fit_contextual import (
    parse_context_smoothing,
    parse_emission_context,
    refuse_contextual_settings,
    run_fit_contextual,
)
from .fit_path import check_path_arguments, fit_data, load_init, model_options, run_fit_path
from .options import add_options, options_given
from .outputs import check_out, stopping_report

__all__ = ["DESCRIPTION", "add_arguments", "run_fit"]


#: The description of ``ldhmm fit --help``.
DESCRIPTION = """\
Fit an LDHMM (variational EM) on the sequences of DATA and write the model file: the learned
Dirichlet priors, the training ELBO history and the training vocabulary, so that `ldhmm
score/posterior/predict/decode` map a new log's symbols by name. --init continues from a saved model
on new logs. With a range of K (--states 2..8), fits along K: each K after the first grown from the
one before; --out is then a directory with one model file per K and path.csv (training ELBO,
held-out score, fit time per K); an interrupted run resumes at the next K.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``ldhmm fit`` and its handler."""
    p.set_defaults(func=run_fit)
    p.add_argument(
        "data",
        help="one sequence of tokens per line, the ldhmm-sequences text format, an MSNBC .seq "
        "file, or a CSV/TSV/Parquet event log (with --sequence-col and --event-col)",
    )
    add_data_options(p)
    p.add_argument(
        "--states",
        default=None,
        help="K, the number of hidden states; or several: a range 2..8 (also written 2-8 or 2:8) or a "
        "list 2,3,5 (fit along K)",
    )
    p.add_argument(
        "--guide", choices=["pf", "ff"], default=None, help="variational family of q(Z) (default pf)"
    )
    p.add_argument(
        "--emission-context",
        default=None,
        metavar="CONTEXT",
        help="emissions that see the events before: 'previous' (the previous event) or an order N "
        "(the last N events, backed off to shorter histories seen fewer than --min-context-count "
        "times); PF or FF family (--guide), one K or a range (default: none, plain LDHMM)",
    )
    p.add_argument(
        "--min-context-count",
        type=int,
        default=20,
        metavar="N",
        help="with --emission-context N > 1: training occurrences a longer history needs to get "
        "emission rows of its own (default 20)",
    )
    p.add_argument(
        "--context-smoothing",
        type=parse_context_smoothing,
        default="chain",
        metavar="S",
        help="with --emission-context: pseudo-events tying each emission row to its shorter context "
        "(MacKay-Peto backoff, docs/math.md): 'chain' (the interpolated Markov chain's strengths) "
        "(the default) or a number of pseudo-events per row (0: none)",
    )
    p.add_argument(
        "--out",
        default=None,
        help="model file to write (default model.json); with several K a directory (required)",
    )
    p.add_argument(
        "--init",
        default=None,
        help="a saved model to continue from (its K, guide and vocabulary); with several K, the first "
        "K's fit starts from it (its K must be the range's first)",
    )
    p.add_argument(
        "--holdout",
        type=float,
        default=None,
        metavar="FRACTION",
        help="with several K: hold out this fraction of the sequences (seeded by --seed) and report "
        "each K's held-out score per token",
    )
    add_options(
        p,
        "--restarts",
        "--path-restarts",
        "--max-iter",
        "--tol",
        "--m-step",
        "--effort",
        "--seeded-start",
        restarts={
            "help": "random restarts n_init (default 3): of the database-level HMM the fit starts from "
            "(--effort standard, quick), of LDHMM itself (--effort thorough)"
        },
        max_iter={"default": 100, "help": "EM iterations at most (default 100)"},
        tol={"default": 1e-4, "help": "EM relative tolerance (default 1e-4)"},
    )
    p.add_argument(
        "--unknown",
        choices=["error", "map", "reserve"],
        default="error",
        help=f"'reserve': add a {UNKNOWN} symbol to the vocabulary, so that logs scored later may hold "
        f"unseen symbols; with --init, 'map' maps symbols the saved model lacks to its {UNKNOWN}",
    )
    add_options(p, "--seed")
    add_backend_arguments(
        p,
        partitions_help="partitions balanced by tokens (default: 1 locally, 2 per Dask worker); DATA may "
        "be a directory written by `ldhmm data export`, whose files the workers read themselves",
    )
    p.add_argument(
        "--checkpoint",
        default=None,
        metavar="DIR",
        help="write the fit's state to DIR after every EM iteration (atomically); the same command "
        "again resumes there, to the numbers of an uninterrupted fit",
    )
    add_options(
        p,
        "--force",
        force={"help": "with --checkpoint: discard the checkpoint in DIR (another fit's) and start over"},
    )
    add_options(p, "--quiet", "--max-memory", quiet={"help": "no progress bar, no summary"})


@contextlib.contextmanager
def _path_directory(args):
    """Hold the lock of a fit along K's ``--out DIR`` (created where its parent exists) for the
    whole command: a second fit along K into DIR is refused in one line before it reads anything."""
    out = Path(args.out) if args.out is not None else None
    if out is None or (out.exists() and not out.is_dir()) or not out.parent.is_dir():
        yield  # run_fit_path names what is wrong
        return
    out.mkdir(exist_ok=True)
    with locked_directory(out, "use another --out"):
        yield


@contextlib.contextmanager
def _checkpoint_directory(args):
    """Hold ``--checkpoint DIR``'s lock for the whole command (created; emptied of its checkpoint
    with ``--force``): a second fit on DIR is refused in one line before it reads anything."""
    if args.checkpoint is None:  # --force without it is refused before (_refuse_dropped_settings)
        yield
        return
    directory = Path(args.checkpoint)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"--checkpoint {shown(directory)}: not a directory; use another one")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--checkpoint {shown(directory)}: cannot create it ({err.strerror})") from None
    with locked_directory(directory, "use another --checkpoint directory"):
        if args.force:
            discard_checkpoint(directory)
        yield


@contextlib.contextmanager
def _resumable(args):
    """A fit stopped by an error or Ctrl-C says what its checkpoint holds and how to resume."""
    try:
        yield
    except KeyboardInterrupt:
        if args.checkpoint is not None:
            print(f"ldhmm fit: {_resume_hint(args.checkpoint)}", file=sys.stderr, flush=True)
        raise
    except (CheckpointError, DirectoryLockedError):
        raise  # a checkpoint that cannot be resumed: the line says how to start over
    except Exception as err:
        if args.checkpoint is None:
            if args.backend == "dask":
                raise RuntimeError(f"{err} (--checkpoint DIR makes the fit resumable)") from err
            raise
        raise RuntimeError(f"{err}; {_resume_hint(args.checkpoint)}") from err


def _resume_hint(directory) -> str:
    where = describe_checkpoint(directory)
    return f"the checkpoint {shown(directory)} holds {where}: the same command resumes there"


def _refuse_dropped_settings(args: argparse.Namespace, several_k: bool) -> None:
    """One line naming a setting that the asked fit would have no use for (a fit without it is
    not what was asked): the emission context's settings without one (or, for the minimum count,
    with an order-1 context, which backs off to nothing), a path's settings with one K, ``--force``
    without a checkpoint, and with ``--init`` (which gives the vocabulary and, for one K, the only
    start) ``--unknown reserve``, ``--restarts`` and ``--seeded-start``. Options with a default
    count where they differ from it (:func:`ldhmm.cli.options.options_given`)."""
    context_only = options_given(args, "--min-context-count", "--context-smoothing")
    if args.emission_context is None and context_only:
        verb = "needs" if len(context_only) == 1 else "need"
        raise ValueError(f"{' and '.join(context_only)} {verb} --emission-context")
    if (
        args.emission_context is not None
        and context_order(args.emission_context) == 1
        and "--min-context-count" in context_only
    ):
        raise ValueError(
            "--min-context-count needs --emission-context N with N > 1 (the previous event alone "
            "backs off to no shorter history)"
        )
    if not several_k:
        for flag, given in [("--holdout", args.holdout), ("--path-restarts", args.path_restarts)]:
            if given is not None:
                raise ValueError(f"{flag} needs several K (--states 2..8)")
    if args.force and args.checkpoint is None:
        raise ValueError("--force starts a checkpointed fit over: it needs --checkpoint DIR")
    if args.init and args.unknown == "reserve":
        raise ValueError(
            f"--unknown reserve adds {UNKNOWN} to a new vocabulary: --init keeps the saved model's"
        )
    chosen = options_given(args, "--restarts", "--seeded-start")
    if args.init and not several_k and chosen:
        raise ValueError(f"--init gives a fit of one K its only start: it takes no {', '.join(chosen)}")


def run_fit(args: argparse.Namespace) -> int:
    """The ``fit`` command."""
    if args.unknown == "map" and not args.init:
        raise ValueError(
            f"--unknown map maps symbols a saved model lacks to its {UNKNOWN}: it needs --init MODEL "
            f"(to fit a model that can score unseen symbols later: --unknown reserve)"
        )
    states = parse_states(args.states) if args.states is not None else None
    if args.emission_context is not None:
        args.emission_context = parse_emission_context(args.emission_context)
    _refuse_dropped_settings(args, several_k=states is not None and len(states) > 1)
    if args.emission_context is not None:
        if states is None:
            raise ValueError("--emission-context needs --states K (or a range of K)")
        if len(states) == 1:
            out = check_out(args.out if args.out is not None else "model.json", suffixes=(".json",))
            return run_fit_contextual(args, states[0], out)
        refuse_contextual_settings(args)
    if states is not None and len(states) > 1:
        check_path_arguments(args)
        with _path_directory(args):
            return run_fit_path(args, states)
    n_states_arg = states[0] if states is not None else None
    out = check_out(args.out if args.out is not None else "model.json", suffixes=(".json",))
    init_params, start = None, None
    if args.init:
        start = load_init(args.init)
        if n_states_arg is not None and n_states_arg != start.n_states:
            raise ValueError(
                f"--states {n_states_arg} differs from K = {start.n_states} of --init {args.init}"
            )
        n_states, guide, init_params = start.n_states, args.guide or start.guide.name, start.params_
    else:
        if n_states_arg is None:
            raise ValueError("--states K is required (or --init MODEL)")
        n_states, guide = n_states_arg, args.guide or "pf"
        # the workers read a partitioned data set themselves, unless events or sequences are
        # selected: then it is read here, like any file
        if is_partitioned(args.data) and args.unknown != "reserve" and not given_data_options(args):
            return _fit_directory(args, n_states, guide, out)
    db, _ = fit_data(args, start)
    model = _model(args, n_states, guide, db.n_symbols)
    t0 = time.perf_counter()
    with _checkpoint_directory(args), dask_client(args) as client, _resumable(args):
        model.fit(
            db,  # the database, not its sequences: the model records the file it was fitted on
            init_params=init_params,
            backend=args.backend,
            client=client,
            n_partitions=args.partitions,
            checkpoint=args.checkpoint,
        )
    seconds = time.perf_counter() - t0
    model.save(out, vocabulary=db.vocabulary)
    if not args.quiet:
        elbo = float(model.elbo_history_[-1])
        print(
            f"fitted LDHMM-{guide.upper()} K={n_states} on {len(db)} sequences ({db.n_tokens} tokens, "
            f"{db.n_symbols} symbols) in {seconds:.1f} s, {model.n_iter_} EM iterations: training ELBO "
            f"{elbo:.2f} nats ({elbo / db.n_tokens:.4f} per token)"
        )
        print(stopping_report(model))
        print(diagnose_collapse(model.params_).line())
        print(f"model written to {shown(Path(out))}")
    return 0


def _model(args, n_states: int, guide: str, n_symbols: int) -> LDHMM:
    """The LDHMM that ``ldhmm fit`` fits, from its options."""
    return LDHMM(n_states, verbose=not args.quiet, **model_options(args, guide, n_symbols))


def _fit_directory(args, n_states: int, guide: str, out) -> int:
    """``ldhmm fit DIR``: a directory of partitioned Parquet files, read by each partition's
    worker (the tokens never pass through this process)."""
    manifest = read_manifest(args.data)
    vocabulary = manifest.get("vocabulary") or [str(k) for k in range(int(manifest["n_symbols"]))]
    model = _model(args, n_states, guide, int(manifest["n_symbols"]))
    t0 = time.perf_counter()
    with _checkpoint_directory(args), dask_client(args) as client, _resumable(args):
        model.fit(
            str(args.data),
            backend=args.backend,
            client=client,
            n_partitions=args.partitions,
            checkpoint=args.checkpoint,
        )
    seconds = time.perf_counter() - t0
    model.save(out, vocabulary=vocabulary)
    if not args.quiet:
        elbo = float(model.elbo_history_[-1])
        n_tokens = int(manifest["n_tokens"])
        print(
            f"fitted LDHMM-{guide.upper()} K={n_states} on {manifest['n_sequences']} sequences ({n_tokens} "
            f"tokens, {len(vocabulary)} symbols) in {model.n_partitions_} partitions ({args.backend}) in "
            f"{seconds:.1f} s, {model.n_iter_} EM iterations: training ELBO {elbo:.2f} nats "
            f"({elbo / n_tokens:.4f} per token)"
        )
        print(stopping_report(model))
        print(diagnose_collapse(model.params_).line())
        if model.recoveries_:
            print(f"recovered {len(model.recoveries_)} partitions of lost workers: {model.recoveries_}")
        print(f"model written to {shown(Path(out))}")
    return 0
