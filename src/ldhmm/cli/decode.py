"""``ldhmm decode``: the most probable hidden-state path of each sequence."""

from __future__ import annotations

import argparse

import pandas as pd

from .outputs import add_model_data_arguments, check_out, read_model_and_data, sequence_ids, write_table

__all__ = ["register", "run_decode"]


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``decode`` command to the ``ldhmm`` parser's sub-commands."""
    p = subparsers.add_parser(
        "decode",
        help="the most probable hidden-state path of each sequence (Viterbi)",
        description="For each sequence of DATA, the Viterbi path under the sequence's posterior "
        "mean parameters E_q[pi], E_q[A], E_q[B] (docs/math.md): column 'states', the state of "
        "each event separated by spaces.",
    )
    add_model_data_arguments(p, out_default="paths.csv")
    p.set_defaults(func=run_decode)
    return p


def run_decode(args: argparse.Namespace) -> int:
    """The ``decode`` command."""
    out = check_out(args.out)
    model, db = read_model_and_data(args)
    paths = model.decode(db.sequences)
    table = pd.DataFrame(
        {
            "sequence_id": sequence_ids(db),
            "length": db.lengths,
            "states": [" ".join(str(int(s)) for s in p) for p in paths],
        }
    )
    write_table(table, out)
    if not args.quiet:
        print(f"state paths of {len(db)} sequences written to {out}")
    return 0
