"""What the experiment commands' parsers share: argument types, common options, the handler glue."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable

from ..experiments.lineup import model_names

__all__ = ["int_at_least", "positive_int", "nonneg_int", "add_common_arguments", "call_with_args"]

#: argparse bookkeeping in a parsed namespace, never an argument of an experiment function
_BOOKKEEPING = ("command", "func", "data_command")


def int_at_least(minimum: int):
    """argparse type: an integer >= ``minimum``, with a one-line error otherwise."""

    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {v}")
        return v

    return parse


positive_int = int_at_least(1)
nonneg_int = int_at_least(0)


def add_common_arguments(p: argparse.ArgumentParser, states_default, folds_default: int = 10) -> None:
    """The options ``compare`` and ``classify`` share (data, K grid, folds, models, EM, output)."""
    p.add_argument("--data-dir", default=None, help="data directory (default: $LDHMM_DATA)")
    p.add_argument(
        "--n-sequences",
        type=positive_int,
        default=None,
        help="use a seeded random sample of this many sequences",
    )
    p.add_argument(
        "--states",
        nargs="+",
        default=states_default,
        metavar="K",
        help=f"numbers of hidden states, integers or ranges like 2..6 (default {' '.join(states_default)})",
    )
    p.add_argument(
        "--folds",
        type=positive_int,
        default=folds_default,
        help=f"cross-validation folds (default {folds_default})",
    )
    p.add_argument(
        "--models",
        nargs="+",
        default=["all"],
        metavar="NAME",
        help=f"'all' or some of {', '.join(model_names())}",
    )
    p.add_argument("--out", default=None, help="output directory (default: results/<command>-<data>)")
    p.add_argument("--jobs", type=positive_int, default=1, help="worker processes (default 1)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--seed", type=nonneg_int, default=0, help="seed of folds, models and sampling (default 0)"
    )
    p.add_argument(
        "--max-iter",
        type=positive_int,
        default=None,
        help="EM iterations at most (default: each model's own, 100)",
    )
    p.add_argument(
        "--tol", type=float, default=None, help="EM relative tolerance (default: each model's own)"
    )
    p.add_argument(
        "--m-step",
        choices=["collapsed", "paper"],
        default="collapsed",
        help="M-step of the LDHMM models: 'collapsed' (default; Newton on the "
        "Dirichlet-multinomial likelihood of the expected counts) or 'paper' (q(theta) "
        "held fixed, as in the paper; needs many more EM iterations)",
    )
    p.add_argument(
        "--restarts",
        type=positive_int,
        default=3,
        help="restart budget (n_init) of every model that takes restarts: the same for all (default 3)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="reuse an --out directory that holds results of another configuration",
    )


def call_with_args(fn: Callable[..., int]) -> Callable[[argparse.Namespace], int]:
    """A sub-command handler that calls the experiment function ``fn`` with the parsed options.

    Each option is passed as the keyword argument of its ``dest`` (``--is-samples`` ->
    ``is_samples``), so a command's options and its experiment function's parameters are one
    list of names; an option without a parameter of that name is a ``TypeError`` (a bug in
    the parser), not silently dropped.
    """
    params = inspect.signature(fn).parameters

    def handler(args: argparse.Namespace) -> int:
        options = {k: v for k, v in vars(args).items() if k not in _BOOKKEEPING}
        unknown = sorted(set(options) - set(params))
        if unknown:
            raise TypeError(f"{fn.__name__} takes no option {', '.join(unknown)}")
        return fn(**options)

    return handler
