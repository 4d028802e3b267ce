"""``ldhmm report``: one self-contained HTML page that explains a saved model (and its users)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..modelfiles import load_model
from ..report_html import write_report
from .data_options import add_data_options, given_data_options, read_data
from .options import add_options, nonneg_int, options_given, positive_int
from .outputs import add_unknown_argument, check_out, refuse_impossible

__all__ = ["DESCRIPTION", "add_arguments", "run_report", "BASELINE"]

#: The next-event baseline of the page: the first-order Markov chain (smoothing chosen by
#: leave-one-sequence-out likelihood), fitted on the users' prefixes.
BASELINE = "MARKOV1"


#: The description of ``ldhmm report --help``.
DESCRIPTION = """\
One self-contained HTML page (inline style and SVG figures, no script, no network): each state named
by its most likely events, the initial and transition structure as a diagram and tables, the fit's
history; with DATA, the users grouped by their posterior dynamics, the most typical and unusual
users, decoded state paths and next-event accuracy beside a first-order Markov chain. The same
tables in Python: model.describe(data).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``ldhmm report`` and its handler."""
    p.set_defaults(func=run_report)
    p.add_argument("model", help="a model file written by `ldhmm fit` (JSON)")
    p.add_argument(
        "data",
        nargs="?",
        default=None,
        help="optional: the users to describe, any file `ldhmm score` reads (a CSV/Parquet event log "
        "with --sequence-col and --event-col)",
    )
    add_data_options(p)
    add_unknown_argument(p)
    p.add_argument("--out", default="report.html", help="the page to write (.html; default report.html)")
    p.add_argument("--clusters", type=positive_int, default=3, help="groups of users (default 3)")
    p.add_argument(
        "--examples",
        type=nonneg_int,
        default=2,
        help="typical and unusual users whose paths are shown (default 2)",
    )
    p.add_argument("--title", default=None, help="the page's title (default: the model file's name)")
    add_options(
        p,
        "--seed",
        "--quiet",
        "--max-memory",
        seed={"help": "seed of the grouping of users (default 0)"},
        quiet={"help": "print nothing but errors"},
    )


def run_report(args: argparse.Namespace) -> int:
    """The ``report`` command."""
    if args.data is None:  # what describes users needs users: not a page without them
        about_users = given_data_options(args) + options_given(
            args, "--clusters", "--examples", "--seed", "--unknown"
        )
        if about_users:
            raise ValueError(f"{', '.join(about_users)}: about the users of DATA, which is not given")
    out = check_out(args.out, suffixes=(".html", ".htm"))
    model = load_model(args.model)
    if not callable(getattr(model, "describe", None)):
        raise ValueError(
            f"{args.model}: a {type(model).__name__} has no describe() (a model of the LDHMM family has)"
        )
    db = None
    if args.data is not None:
        db = read_data(args, model=model)
        refuse_impossible(model, db)
    description = model.describe(
        db, baseline=BASELINE, n_clusters=args.clusters, n_examples=args.examples, seed=args.seed
    )
    title = args.title if args.title is not None else f"ldhmm report: {Path(args.model).name}"
    write_report(description, out, title)
    if not args.quiet:
        users = f" and {len(db)} users of {args.data}" if db is not None else ""
        print(f"report of {Path(args.model).name} (K = {model.n_states}){users} written to {out}")
    return 0
