"""What the model commands (``fit``, ``score``, ``posterior``, ``predict``, ``decode``) share:
the options that read a user's data for a saved model, output files written whole or not at
all, and the one-line report of how a fit stopped."""

from __future__ import annotations

import argparse
import inspect
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from ..data import UNKNOWN, SequenceDatabase
from ..data.atomic import atomic_write_csv, atomic_write_parquet, remove_stale_temporaries
from ..inference.cavi.support import impossible_reason, supports
from ..modelfiles import load_model
from ..output_files import read_table
from .cluster import add_backend_arguments, dask_client, placement_options
from .data_options import add_data_options, read_data
from .options import add_options

__all__ = [
    "add_model_data_arguments",
    "add_unknown_argument",
    "read_model",
    "read_model_and_data",
    "write_model_table",
    "write_table",
    "read_table",
    "sequence_ids",
    "refuse_impossible",
    "check_out",
    "stopping_report",
    "with_unknown",
]

_TABLE_SUFFIXES = (".csv", ".parquet", ".pq")


def add_unknown_argument(p: argparse.ArgumentParser) -> None:
    """``--unknown {error,map}`` of the commands that read a log into a saved model's codes."""
    p.add_argument(
        "--unknown",
        choices=["error", "map"],
        default="error",
        help="a symbol the model has not seen: an error naming it (default) or the model's <unk>",
    )


def add_model_data_arguments(p: argparse.ArgumentParser, out_default: str) -> None:
    """``MODEL DATA --out FILE`` and the data options of the model commands."""
    p.add_argument("model", help="a model file written by `ldhmm fit` (JSON)")
    p.add_argument(
        "data",
        help="the sequences: one sequence of tokens per line, the ldhmm-sequences text format, "
        "or a CSV/TSV/Parquet event log (with --sequence-col and --event-col)",
    )
    add_data_options(p)
    add_unknown_argument(p)
    p.add_argument(
        "--out", default=out_default, help=f"output file (.csv or .parquet; default {out_default})"
    )
    p.add_argument(
        "--factory",
        default=None,
        metavar="MODULE:FACTORY",
        help="for a model of the SVI route (PyroSequenceModel, e.g. a sticky LDHMM): the "
        "'package.module:factory' that rebuilds its Pyro model and guide, which its file names; a "
        "model file never runs code unless you name it here",
    )
    add_options(p, "--quiet", "--max-memory", quiet={"help": "print nothing but errors"})
    add_backend_arguments(p)


def check_out(path, suffixes=_TABLE_SUFFIXES) -> Path:
    """The output path, refused before any work when its suffix or directory is wrong."""
    path = Path(path)
    if path.suffix.lower() not in suffixes:
        raise ValueError(f"--out {str(path)!r}: expected a file ending in {' or '.join(suffixes)}")
    if path.exists() and path.is_dir():
        raise ValueError(f"--out {str(path)!r} is a directory")
    if not path.parent.is_dir() and str(path.parent) not in ("", "."):
        raise ValueError(f"--out {str(path)!r}: directory {str(path.parent)!r} does not exist")
    return path


def read_model_and_data(args: argparse.Namespace, needs: str | None = None):
    """``(model, database)``: the saved model and the data file in the model's codes; a model
    without the method ``needs`` (the command's) is refused in one line."""
    model = read_model(args, needs)
    db = read_data(args, model=model)
    return model, db


def read_model(args: argparse.Namespace, needs: str | None = None):
    """The saved model MODEL; one without the method ``needs`` (the command's), or whose method
    runs only in this process when ``--backend dask`` or ``--partitions`` asks otherwise, is
    refused in one line."""
    model = load_model(args.model, factory=getattr(args, "factory", None))
    if needs is None:
        return model
    method = getattr(model, needs, None)
    if not callable(method):
        raise ValueError(f"{args.model}: a {type(model).__name__} has no {needs}()")
    partitioned = args.backend != "local" or args.partitions is not None
    if partitioned and "backend" not in inspect.signature(method).parameters:
        raise ValueError(
            f"{args.model}: a {type(model).__name__} runs in this process only: no --backend dask or "
            f"--partitions (the LDHMM family's models run anywhere)"
        )
    return model


def write_model_table(args: argparse.Namespace, make_table: Callable, needs: str | None = None) -> int:
    """The run of a model command that writes one table (``score``, ``posterior``, ``predict``,
    ``decode``): check ``--out``, read MODEL and DATA (a model without the method ``needs`` is
    refused), ``make_table(model, db, args, where) -> (table, what)`` with ``where`` the
    keyword arguments that place the partitions (:func:`ldhmm.cli.cluster.placement_options`:
    this process or the Dask cluster of ``--backend dask``, open while the table is made),
    write the table, and unless ``--quiet`` print ``"{what} written to {out}"``."""
    out = check_out(args.out)
    model, db = read_model_and_data(args, needs)
    refuse_impossible(model, db)
    with dask_client(args) as client:
        table, what = make_table(model, db, args, placement_options(args, client))
    note = None
    if args.unknown == "map":
        table, note = _with_unknown_counts(table, model, db)
    write_table(table, out)
    if not args.quiet:
        print(f"{what} written to {out}")
        if note:
            print(note)
    return 0


def unknown_counts(db, unknown_index: int | None) -> np.ndarray:
    """Events of each sequence scored as the model's ``<unk>`` symbol, shape (M,) int64 (zeros
    when the model has none)."""
    if unknown_index is None:
        return np.zeros(len(db), dtype=np.int64)
    owner = np.repeat(np.arange(len(db)), np.diff(db.offsets))
    return np.bincount(owner[db.tokens == unknown_index], minlength=len(db)).astype(np.int64)


def _with_unknown_counts(table: pd.DataFrame, model, db):
    """With ``--unknown map``: the column ``n_unk`` (events of the sequence scored as ``<unk>``:
    unseen in training) after ``sequence_id``, and a line with the totals, so that a score
    pulled down by new events is visible."""
    vocabulary = getattr(model, "vocabulary_", None) or []
    index = vocabulary.index(UNKNOWN) if UNKNOWN in vocabulary else None
    counts = unknown_counts(db, index)
    if "sequence_id" in table.columns and len(table) == len(db):
        table = table.copy()
        table.insert(table.columns.get_loc("sequence_id") + 1, "n_unk", counts)
    n_seq = int((counts > 0).sum())
    return (
        table,
        f"{int(counts.sum())} events in {n_seq} sequences scored as {UNKNOWN} (unseen in training; "
        "column n_unk)",
    )


def refuse_impossible(model, db) -> None:
    """One line naming the first sequence of ``db`` that ``model`` gives probability 0, its
    event and symbol (by name), before any output is computed: no command writes -inf or NaN
    (the rule: :meth:`ldhmm.models.variant_hmm.VariantHMM.impossible_events`)."""
    find = getattr(model, "impossible_events", None)
    if find is None or len(db) == 0:
        return
    events = find(db.sequences)
    bad = np.flatnonzero(events[:, 0] >= 0)
    if bad.size == 0:
        return
    row = int(bad[0])
    event, symbol = (int(v) for v in events[row])
    names = db.vocabulary if db.vocabulary else [str(v) for v in range(model.n_symbols_)]
    reason = impossible_reason(supports(model.params_), symbol)
    more = f" ({bad.size} sequences of {len(db)} are impossible)" if bad.size > 1 else ""
    raise ValueError(
        f"{sequence_ids(db)[row]}: the model gives this sequence probability 0: symbol "
        f"{names[symbol]!r} (event {event + 1}), {reason}{more}"
    )


def sequence_ids(db) -> list[str]:
    """The sequence ids of the log (``FILE:LINE`` for text files), or their positions."""
    return list(db.ids) if db.ids is not None else [str(i) for i in range(len(db))]


def write_table(df: pd.DataFrame, path) -> Path:
    """Write ``df`` as CSV (one header line) or Parquet, via a temporary file and a rename, so
    that an interrupted command leaves the old file or none, never half of one (and the next
    write removes the temporary file of one killed before its rename)."""
    path = Path(path)
    remove_stale_temporaries(path)  # of an earlier command killed before its rename
    if path.suffix.lower() == ".csv":
        atomic_write_csv(_arrays_as_json(df), path)
    else:
        atomic_write_parquet(df, path)
    return path


def _arrays_as_json(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every array-valued cell as a JSON list: all values, floats exactly (their
    shortest round-trip repr). Written as they are, pandas would put numpy's print form in the
    CSV, which abbreviates arrays of more than 1,000 values to ``[a b c ... x y z]``."""
    out = df.copy()
    for column in df.columns:
        if df[column].map(lambda v: isinstance(v, (np.ndarray, list, tuple))).any():
            out[column] = [json.dumps(np.asarray(v).tolist()) for v in df[column]]
    return out


def stopping_report(model) -> str:
    """How ``model``'s fit stopped, one line, the same for every model fitted by an iterative
    rule (``convergence_``, see :mod:`ldhmm.inference.monitor`), e.g. ``stopped: converged: 12
    EM iterations of at most 100, last value -1234.5 (rule: relative change <= tol 0.0001)``."""
    report = getattr(model, "convergence_", None)
    if report is None:
        return f"stopped: {type(model).__name__} keeps no convergence report"
    return f"stopped: {report}"


def with_unknown(db: SequenceDatabase) -> SequenceDatabase:
    """``db`` with the ``<unk>`` symbol added to its vocabulary (``ldhmm fit --unknown reserve``)."""
    if UNKNOWN in db.vocabulary:
        return db
    return SequenceDatabase(
        db.tokens, db.offsets, db.vocabulary + [UNKNOWN], db.labels, db.label_names, db.ids, db.name, db.meta
    )
