"""``ldhmm decode``: the most probable hidden-state path of each sequence."""

from __future__ import annotations

import argparse

import pandas as pd

from .outputs import add_model_data_arguments, sequence_ids, write_model_table

__all__ = ["DESCRIPTION", "add_arguments", "run_decode"]


#: The description of ``ldhmm decode --help``.
DESCRIPTION = """\
For each sequence of DATA, the Viterbi path under the sequence's posterior mean parameters E_q[pi],
E_q[A], E_q[B] (docs/math.md): column 'states', the state of each event separated by spaces.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``ldhmm decode`` and its handler."""
    p.set_defaults(func=run_decode)
    add_model_data_arguments(p, out_default="paths.csv")


def run_decode(args: argparse.Namespace) -> int:
    """The ``decode`` command."""
    return write_model_table(args, _paths_table, needs="decode")


def _paths_table(model, db, args, where: dict) -> tuple[pd.DataFrame, str]:
    paths = model.decode(db.sequences, **where)
    table = pd.DataFrame(
        {
            "sequence_id": sequence_ids(db),
            "length": db.lengths,
            "states": [" ".join(str(int(s)) for s in p) for p in paths],
        }
    )
    return table, f"state paths of {len(db)} sequences"
