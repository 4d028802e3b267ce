"""``ldhmm fit DATA --states 2..8``: fit along K, one model file per K and a table, resumable.

With ``--emission-context`` the path's models are
:class:`ldhmm.models.contextual.ContextualLDHMM` (:meth:`~ldhmm.models.contextual.ContextualLDHMM.fit_path`:
every K from its own starts, no state file), with the same files, table and suggested K.

Run by :func:`ldhmm.cli.fit.run_fit` when ``--states`` names more than one K. ``--out`` is a
directory: ``K<k>.json`` per K (the model-file writer of :mod:`ldhmm.models.file_format`),
``path.csv`` (the table, also printed) and ``path.json`` (the run's settings); beside the last
saved K, ``K<k>.state.npz`` (:func:`ldhmm.models.path.save_path_state`: its per-sequence state,
a file of :mod:`ldhmm.inference.state_store`, which the next K may continue). The models come
from :meth:`ldhmm.models.variant_hmm.VariantHMM.fit_path`: each K after the first is grown from
the one before. A run that stopped resumes at the first K without a model file, grown from the
last one saved (the same models as an uninterrupted run; a directory written by an ldhmm before
the state store too); one with other settings in ``--out``, or whose state file cannot be read,
is refused in one line. A range that goes past the last K of a finished run (a path's last K
keeps no state) is fitted again from its first K, to the models of an uninterrupted run.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ..data.atomic import write_atomically
from ..data.fingerprint import training_record
from ..data.resume import RunInterrupted
from ..data.terminal_text import shown
from ..modelfiles import load_model
from ..models import LDHMM
from ..models.choice_of_k import suggest_k
from ..models.collapse import diagnose_collapse
from ..models.contextual import ContextualLDHMM
from ..models.path import GrownStarts, load_path_state, save_path_state
from ..models.variant_hmm import keeps_path_state
from .data_options import DATA_OPTIONS, read_data
from .outputs import with_unknown, write_table

__all__ = [
    "COLUMNS",
    "holdout_split",
    "load_init",
    "fit_data",
    "effort_option",
    "model_options",
    "format_table",
    "check_path_arguments",
    "run_fit_path",
]

#: The columns of ``path.csv``, in order.
COLUMNS = ("K", "train_elbo", "train_elbo_per_token", "heldout_per_token", "fit_seconds", "start")
#: Settings that a resumed run must share with the run that wrote ``--out``.
_SETTINGS = (
    "data",
    "data_options",
    "guide",
    "seed",
    "restarts",
    "path_restarts",
    "max_iter",
    "tol",
    "m_step",
    "effort",
    "seeded_start",
    "holdout",
    "unknown",
    "init",
    "data_sha256",
)
#: The settings of an ``--emission-context`` path (recorded and checked only there, so that a
#: directory of a plain path written before they existed still resumes).
_CONTEXT_SETTINGS = ("emission_context", "min_context_count", "context_smoothing")


def holdout_split(n_sequences: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded split by sequence: (training positions, held-out positions), each increasing.

    ``round(fraction * n_sequences)`` sequences are held out (at least one), drawn by
    ``numpy.random.default_rng(seed).permutation``; at least one sequence is left to train on.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"--holdout must be a fraction in (0, 1), got {fraction}")
    n_held = max(1, int(round(fraction * n_sequences)))
    if n_held >= n_sequences:
        raise ValueError(f"--holdout {fraction} of {n_sequences} sequences leaves none to train on")
    order = np.random.default_rng(seed).permutation(n_sequences)
    return np.sort(order[n_held:]), np.sort(order[:n_held])


def _settings(args, guide: str, content: str | None = None) -> dict:
    """What ``path.json`` records: the settings a resumed run must share (``content``: the
    SHA-256 of the data's coded sequences, :func:`ldhmm.data.fingerprint.training_record`)."""
    return {
        "data": str(Path(args.data).resolve()),
        "data_options": _given_data_options(args),
        "guide": guide,
        "seed": args.seed,
        "restarts": args.restarts,
        "path_restarts": args.path_restarts,
        "max_iter": args.max_iter,
        "tol": args.tol,
        "m_step": args.m_step,
        "effort": args.effort,
        "seeded_start": args.seeded_start,
        "holdout": args.holdout,
        "unknown": args.unknown,
        "init": None if args.init is None else str(Path(args.init).resolve()),
        "data_sha256": content,
        **_context_settings(args),
    }


def _context_settings(args) -> dict:
    """The emission context's settings of an ``--emission-context`` path (empty otherwise)."""
    if getattr(args, "emission_context", None) is None:
        return {}
    return {
        "emission_context": args.emission_context,  # parsed by run_fit
        "min_context_count": args.min_context_count,
        "context_smoothing": args.context_smoothing,
    }


def _check_out_dir(out: Path, settings: dict) -> None:
    """Create ``out``, or check that the run saved there had the same settings."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {str(out)!r}: with several K, --out is a directory, and this is a file")
    if not out.parent.is_dir():
        raise ValueError(f"--out {str(out)!r}: directory {str(out.parent)!r} does not exist")
    out.mkdir(exist_ok=True)
    saved = out / "path.json"
    if saved.is_file():
        try:
            before = json.loads(saved.read_text())
        except (OSError, ValueError) as err:
            raise ValueError(f"{saved}: not a path settings file ({err})") from None
        keys = list(_SETTINGS) + [k for k in _CONTEXT_SETTINGS if k in settings or k in before]
        differ = [k for k in keys if before.get(k) != settings.get(k)]
        if differ:
            k = differ[0]
            raise ValueError(
                f"--out {str(out)!r} holds a path fitted with other settings ({k} {before.get(k)!r} there, "
                f"{settings[k]!r} here): choose another --out or remove it"
            )
    write_atomically(saved, lambda f: f.write(json.dumps(settings, indent=1) + "\n"))


def _check_saved_data(out: Path, saved: dict, content: str) -> None:
    """Refuse a saved K's model file fitted on other sequences than this run's training set (a
    file copied in, or the data changed between runs): its recorded SHA-256 differs."""
    for K, model in saved.items():
        theirs = (getattr(model, "training_data_", None) or {}).get("sha256")
        if theirs is not None and theirs != content:
            raise ValueError(
                f"{out / f'K{K}.json'} was fitted on other data (SHA-256 of its training sequences "
                f"{theirs[:12]}..., this run's {content[:12]}...): remove it or choose another --out"
            )


def load_init(path) -> LDHMM:
    """The model of ``--init``, refused unless it is an LDHMM."""
    start = load_model(path)
    if not isinstance(start, LDHMM):
        raise ValueError(f"--init {path}: an {type(start).__name__} model; ldhmm fit continues LDHMM models")
    return start


def _given_data_options(args) -> dict | None:
    """The data options given (by flag), or None (also what a run before they existed saved)."""
    given = {flag: getattr(args, flag[2:].replace("-", "_")) for flag in DATA_OPTIONS}
    given = {flag: list(v) if isinstance(v, tuple) else v for flag, v in given.items() if v is not None}
    if "--event-map" in given:  # the map's file may change: record where it is
        given["--event-map"] = str(Path(given["--event-map"]).resolve())
    return given or None


def fit_data(args, start: LDHMM | None = None):
    """The database of ``ldhmm fit`` (in the --init model's codes with --init; with the
    ``<unk>`` symbol added for ``--unknown reserve``), and the --init model (``start``, read
    when not given) or None."""
    if args.init is None:
        db = read_data(args)
        return (with_unknown(db) if args.unknown == "reserve" else db), None
    start = load_init(args.init) if start is None else start
    return read_data(args, model=start, unknown="map" if args.unknown == "map" else "error"), start


def effort_option(args) -> dict:
    """``{"effort": ...}`` where ``--effort`` is given; empty otherwise, so the model's default holds."""
    return {} if args.effort is None else {"effort": args.effort}


def model_options(args, guide: str, n_symbols: int) -> dict:
    """The constructor arguments, beside K, of the model that ``ldhmm fit`` fits at each K, from
    its options: :class:`ldhmm.models.LDHMM`'s, or with ``--emission-context``
    :class:`ldhmm.models.contextual.ContextualLDHMM`'s (one K or a path)."""
    context = _context_settings(args)
    if context:
        return {
            "n_symbols": n_symbols,
            **context,
            "max_iter": args.max_iter,
            "tol": args.tol,
            "n_init": args.restarts,
            "seed": args.seed,
            "guide": guide,
        }
    return {
        "n_symbols": n_symbols,
        "guide": guide,
        "max_iter": args.max_iter,
        "tol": args.tol,
        "m_step": args.m_step,
        "n_init": args.restarts,
        "seeded_start": args.seeded_start,
        "seed": args.seed,
        **effort_option(args),
    }


def _options(args, guide: str, n_symbols: int) -> dict:
    """The constructor arguments of every model of the path: :func:`model_options`, and an
    LDHMM path's restarts from each grown start (``--path-restarts``)."""
    options = model_options(args, guide, n_symbols)
    if not _context_settings(args):
        options["path_n_init"] = args.path_restarts
    return options


def _saved(out: Path, states: list[int], options: dict, cls=LDHMM) -> dict:
    """The models of the longest run of ``states`` from the first whose files ``out`` holds,
    each checked against this run's settings (``cls``: the path's model class)."""
    found = {}
    for K in states:
        path = out / f"K{K}.json"
        if not path.is_file():
            break
        model = load_model(path)
        if not isinstance(model, cls):
            raise ValueError(
                f"{path}: an {type(model).__name__} model, not {cls.__name__}: "
                f"remove it or choose another --out"
            )
        config = model.get_config()
        if not isinstance(config.get("guide"), str):  # a guide object: recorded by its name
            config["guide"] = getattr(model.guide, "name", "custom")
        for key, value in {"n_states": K, **options}.items():
            if config.get(key) != value:
                raise ValueError(
                    f"{path}: fitted with {key} {config.get(key)!r}, this run has {value!r}: "
                    f"remove it or choose another --out"
                )
        found[K] = model
    return found


def _read_table(out: Path) -> dict:
    """The rows of an earlier run's ``path.csv`` by K (empty when there is none)."""
    path = out / "path.csv"
    if not path.is_file():
        return {}
    try:
        df = pd.read_csv(path, keep_default_na=False, na_values=[""])
    except (OSError, ValueError):
        return {}
    if list(df.columns) != list(COLUMNS):
        return {}
    return {int(r["K"]): dict(r) for r in df.to_dict("records")}


def _row(K: int, model, n_train_tokens: int, held_scores, n_held_tokens: int, seconds, start: str) -> dict:
    """One line of ``path.csv``; ``held_scores``: the held-out sequences' scores (None: no holdout)."""
    elbo = float(model.elbo_history_[-1])
    heldout = float(np.sum(held_scores)) / n_held_tokens if held_scores is not None else math.nan
    return {
        "K": K,
        "train_elbo": elbo,
        "train_elbo_per_token": elbo / n_train_tokens,
        "heldout_per_token": heldout,
        "fit_seconds": seconds,
        "start": start,
    }


def format_table(rows: list[dict]) -> str:
    """The table as printed: one line per K."""
    lines = [f"{'K':>3} {'train ELBO':>14} {'per token':>10} {'held-out/token':>14} {'seconds':>8}  start"]
    for r in rows:
        held = "" if math.isnan(r["heldout_per_token"]) else f"{r['heldout_per_token']:.4f}"
        seconds = "" if math.isnan(r["fit_seconds"]) else f"{r['fit_seconds']:.1f}"
        lines.append(
            f"{r['K']:>3} {r['train_elbo']:>14.2f} {r['train_elbo_per_token']:>10.4f} {held:>14} "
            f"{seconds:>8}  {r['start']}"
        )
    return "\n".join(lines)


def _verdict_lines(states, held_scores: dict, held, out: Path, last) -> str:
    """The closing lines: the suggested K (:mod:`ldhmm.models.choice_of_k`, from the held-out
    sequences' scores) and the collapse diagnosis (:mod:`ldhmm.models.collapse`) of the suggested
    K's model (without --holdout: of the largest K)."""
    if not held:
        lines = ["no K suggested: --holdout FRACTION scores each K on held-out sequences"]
        K, model = last
    else:
        ks = [k for k in states if held_scores.get(k) is not None]
        lengths = [len(s) for s in held]
        choice = suggest_k(ks, np.stack([held_scores[k] for k in ks]), lengths)
        lines = choice.lines()
        K, model = choice.K, (last[1] if choice.K == last[0] else load_model(out / f"K{choice.K}.json"))
    if model is not None and hasattr(model, "params_"):  # the collapse diagnosis reads LDHMM's priors
        lines.append(f"K = {K}: {diagnose_collapse(model.params_).line()}")
    return "\n".join(lines)


def _state_file(out: Path, K: int) -> Path:
    return out / f"K{K}.state.npz"


def check_path_arguments(args: argparse.Namespace) -> None:
    """One line naming what a fit along K cannot take (called before its ``--out`` directory is
    made, so that a refused command leaves nothing behind)."""
    dask_options = args.scheduler or args.workers or args.worker_threads or args.scheduler_timeout is not None
    if args.backend != "local" or args.partitions is not None or dask_options:
        raise ValueError(
            "--states with several K fits in this process: no --backend, --partitions or Dask options "
            "(--scheduler, --scheduler-timeout, --workers, --worker-threads)"
        )
    if args.out is None:
        raise ValueError("--states with several K needs --out DIRECTORY (one model file per K)")
    if getattr(args, "checkpoint", None) is not None:
        raise ValueError(
            "--checkpoint is for one K: a path along K resumes at the first K without a model file"
        )


def run_fit_path(args: argparse.Namespace, states: list[int]) -> int:
    """``ldhmm fit DATA --states K1..Kn``: see the module docstring (its arguments checked by
    :func:`check_path_arguments` first)."""
    out = Path(args.out)
    cls = ContextualLDHMM if _context_settings(args) else LDHMM
    db, start = fit_data(args)
    if start is not None and start.n_states != states[0]:
        raise ValueError(f"--init {args.init} has K = {start.n_states}; the range starts at K = {states[0]}")
    guide = args.guide or (start.guide.name if start is not None else "pf")
    _check_out_dir(out, _settings(args, guide, training_record(db.sequences, "")["sha256"]))
    train_idx, held_idx = (
        (np.arange(len(db)), np.array([], dtype=np.int64))
        if args.holdout is None
        else holdout_split(len(db), args.holdout, args.seed)
    )
    train = db.subset(train_idx)
    held = [db.sequences[i] for i in held_idx]
    n_train, n_held = train.n_tokens, int(sum(len(s) for s in held))
    options = _options(args, guide, db.n_symbols)
    saved = _saved(out, states, options, cls)
    _check_saved_data(out, saved, training_record(train.sequences, "")["sha256"])
    regrown, keeps_state = None, keeps_path_state(cls)
    if keeps_state and saved and len(saved) < len(states) and not _state_file(out, max(saved)).is_file():
        # the newest saved K keeps no per-sequence state (it ended an earlier, shorter range):
        # grown without it, the next K could end elsewhere than on an uninterrupted path (below
        # that fit, where every start falls under it), so the path is fitted again from its first K
        regrown, saved = max(saved), {}
    table = _read_table(out)
    rows, held_scores = [], {}

    def score_held(K, model):
        held_scores[K] = model.score_samples(held) if held else None
        return held_scores[K]

    for K, model in saved.items():
        scores = score_held(K, model)
        row = table.get(K) or _row(K, model, n_train, scores, n_held, math.nan, "loaded")
        rows.append(row)
    todo = [K for K in states if K not in saved]
    if not args.quiet:
        if regrown is not None:
            print(
                f"K = {regrown} in {shown(out)} keeps no per-sequence state to grow K = {regrown + 1} "
                f"from: fitting the path again from K = {states[0]}"
            )
        elif saved and todo:
            print(f"resuming at K = {todo[0]}")
        elif not todo:
            print(f"every K of {states[0]}..{states[-1]} is already fitted in {out}")
    if todo and not args.quiet:
        print(format_table([]))
    clock = [time.perf_counter()]

    def finished(K, model):
        seconds = time.perf_counter() - clock[0]
        # the next K may continue this fit: its per-sequence state, written before the model
        # file that says K is fitted (a run killed between the two refits K from K - 1, whose
        # state is still there, rather than growing the next K from a fit without its state);
        # a contextual path fits every K afresh and keeps no state
        if keeps_state:
            save_path_state(model, _state_file(out, K))
        model.save(out / f"K{K}.json", vocabulary=db.vocabulary)
        for k in states:  # only the newest K's state is needed to go on
            if k < K:
                _state_file(out, k).unlink(missing_ok=True)
        rows.append(_row(K, model, n_train, score_held(K, model), n_held, seconds, model.path_start_))
        last[:] = [K, model]
        write_table(pd.DataFrame(rows, columns=list(COLUMNS)), out / "path.csv")
        if not args.quiet:
            print(format_table(rows[-1:]).split("\n")[1], flush=True)
        clock[0] = time.perf_counter()

    previous = saved[max(saved)] if saved else None
    last = [max(saved), previous] if saved else [None, None]
    if keeps_state and previous is not None and todo and _state_file(out, max(saved)).is_file():
        # a state file of before the state store is read too; one that cannot be is one line
        load_path_state(
            previous, _state_file(out, max(saved)), f"delete {shown(out)} or choose another --out"
        )
    try:
        if todo and previous is None and start is not None:
            keep = GrownStarts((), keep_states=len(todo) > 1)
            first = LDHMM(todo[0], **options).fit(train, init_params=start.params_, grown=keep)
            first.path_start_ = "init"
            finished(todo[0], first)
            previous, todo = first, todo[1:]
        if todo:
            cls.fit_path(train, todo, previous=previous, callback=finished, **options)
    except KeyboardInterrupt:
        # each K's model file is written as it is fitted: the same command resumes at the next
        raise RunInterrupted(out, len(rows), len(states)) from None
    write_table(pd.DataFrame(rows, columns=list(COLUMNS)), out / "path.csv")
    if not args.quiet:
        if saved:  # the whole table: the loaded K's rows were not printed as they were fitted
            print(format_table(rows))
        print(f"models and path.csv written to {out}")
        print(_verdict_lines(states, held_scores, held, out, last))
    return 0
