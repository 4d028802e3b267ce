"""The options of the ``ldhmm`` commands that are not about data: argument types, the options
several commands share (one definition each), a sub-command's handler glue.

Light on purpose (argparse and the memory-size parser only): the commands that read a saved
model import it without the experiments (:mod:`ldhmm.cli.common` adds their options).
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable

from ..data.seeds import MAX_SEED
from ..models.memory import parse_size

__all__ = [
    "int_at_least",
    "positive_int",
    "nonneg_int",
    "seed_int",
    "finite_nonneg_float",
    "memory_size",
    "SHARED_OPTIONS",
    "add_options",
    "options_given",
    "check_more_draws",
    "add_run_options",
    "call_with_args",
]

#: argparse bookkeeping in a parsed namespace, never an argument of an experiment function
_BOOKKEEPING = ("command", "func", "data_command", "max_memory", "default_of")


def int_at_least(minimum: int, maximum: int | None = None):
    """argparse type: an integer >= ``minimum`` (and <= ``maximum``), with a one-line error
    otherwise."""

    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {v}")
        if maximum is not None and v > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {text}")
        return v

    return parse


def finite_nonneg_float(text: str) -> float:
    """argparse type: a finite number >= 0 (``--tol``)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (v >= 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return v


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (``--scheduler-timeout``)."""
    v = finite_nonneg_float(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return v


positive_int = int_at_least(1)
nonneg_int = int_at_least(0)
seed_int = int_at_least(0, MAX_SEED)


def memory_size(text: str) -> int:
    """argparse type of ``--max-memory``."""
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


#: The options several commands take, by flag: their argparse keywords (type, default, help).
#: One definition each, so that e.g. every ``--seed`` parses the same way; a command that says
#: more in its help text, or has another default, passes its own keywords to :func:`add_options`.
SHARED_OPTIONS = {
    "--data-dir": {"default": None, "help": "data directory (default: $LDHMM_DATA)"},
    "--n-sequences": {
        "type": positive_int,
        "default": None,
        "help": "use a seeded random sample of this many sequences",
    },
    # the grid of the experiments: each command passes its own default and help
    "--states": {"nargs": "+", "default": ["2..6"], "metavar": "K", "help": "K values (default 2..6)"},
    "--folds": {"type": positive_int, "default": 10, "help": "cross-validation folds (default 10)"},
    "--models": {"nargs": "+", "default": ["all"], "metavar": "NAME", "help": "models (default: all)"},
    "--out": {"default": None, "help": "output directory"},
    "--jobs": {"type": positive_int, "default": 1, "help": "worker processes (default 1)"},
    "--quiet": {"action": "store_true", "help": "no progress bar"},
    "--seed": {"type": seed_int, "default": 0, "help": f"seed, 0..{MAX_SEED} (default 0)"},
    "--max-iter": {"type": positive_int, "default": None, "help": "EM iterations at most"},
    "--tol": {"type": finite_nonneg_float, "default": None, "help": "EM relative tolerance"},
    "--m-step": {
        "choices": ["collapsed", "paper"],
        "default": "collapsed",
        "help": "M-step (default collapsed)",
    },
    "--restarts": {
        "type": positive_int,
        "default": 3,
        "help": "restart budget of every model (default 3)",
    },
    "--path-restarts": {
        "type": positive_int,
        "default": None,
        "help": "with several K: random restarts at each K after the first, beside the starts grown "
        "from the K - 1 fit (path_n_init, at most --restarts; default: --restarts; 1 costs about 0.6x, "
        "docs/performance.md)",
    },
    "--seeded-start": {
        # models.fit_settings.SEEDED_STARTS, written out: that module loads torch, --help must not
        "choices": ["symbols", "none"],
        "default": "symbols",
        "help": "'symbols' (default): one more start beside the restarts, each state's emissions "
        "seeded on one of the K most frequent symbols; 'none': the restarts alone (before v4)",
    },
    "--effort": {
        # models.fit_settings.EFFORTS, written out: that module loads torch, --help must not
        "choices": ["quick", "standard", "thorough"],
        "default": None,
        "help": "how hard each LDHMM-family fit searches: quick, standard (default for LDHMM), thorough "
        "(the v4 defaults bit for bit; docs/performance.md, 'Effort presets')",
    },
    "--force": {"action": "store_true", "help": "reuse an --out of another configuration"},
    # importance sampling's documented rule for more draws (ldhmm.models.base.importance_estimate)
    "--is-samples": {
        "type": nonneg_int,
        "default": 0,
        "help": "importance samples per sequence (0: no estimate; default)",
    },
    "--is-min-ess": {
        "type": finite_nonneg_float,
        "default": 0.0,
        "metavar": "ESS",
        "help": "draw again (as many as it has, seeded) for a sequence with fewer effective importance "
        "samples than ESS, up to --is-max-samples (default 0: off)",
    },
    "--is-max-samples": {
        "type": positive_int,
        "default": None,
        "metavar": "N",
        "help": "importance samples per sequence at most with --is-min-ess (default 8 x --is-samples)",
    },
    "--max-memory": {
        "type": memory_size,
        "default": None,
        "metavar": "SIZE",
        "help": "refuse work whose memory estimate exceeds SIZE (e.g. 64G; default: the machine's memory)",
    },
}


def options_given(args: argparse.Namespace, *flags: str) -> list[str]:
    """Those of ``flags`` (``"--restarts"``) whose value differs from their command's default
    (the command's parser, :func:`ldhmm.cli.main.add_command`): the options a user gave, as far as
    a handler can tell (a default given explicitly counts as not given, which changes nothing).
    Not for the options of a nested sub-command (``ldhmm data export``): ``default_of`` is the
    top command's parser's, which does not hold them."""
    dests = {flag: flag[2:].replace("-", "_") for flag in flags}
    return [flag for flag, dest in dests.items() if getattr(args, dest) != args.default_of(dest)]


def check_more_draws(args: argparse.Namespace) -> None:
    """The importance sampler's rule for more draws, as given on the command line: ``--is-min-ess``
    needs draws to add to (``--is-samples`` N > 0) and ``--is-max-samples`` the rule it caps
    (``--is-min-ess``). Either alone would change nothing: refused in one line, not dropped."""
    if args.is_min_ess and not args.is_samples:
        raise ValueError("--is-min-ess needs --is-samples N > 0 (it adds draws to those N)")
    if args.is_max_samples is not None and not args.is_min_ess:
        raise ValueError("--is-max-samples needs --is-min-ess ESS (it caps the draws that rule adds)")


def add_options(p: argparse.ArgumentParser, *flags: str, **own: dict) -> None:
    """Add the :data:`SHARED_OPTIONS` ``flags`` to ``p``, in this order (the order of ``--help``).

    ``own[dest]`` (``dest`` of ``--max-iter`` is ``max_iter``) holds keywords of this command
    that replace the table's, e.g. ``out={"default": "results/timing", "help": ...}``.
    """
    unknown = set(own) - {flag[2:].replace("-", "_") for flag in flags}
    if unknown:
        raise TypeError(f"add_options: keywords of options not added: {', '.join(sorted(unknown))}")
    for flag in flags:
        p.add_argument(flag, **{**SHARED_OPTIONS[flag], **own.get(flag[2:].replace("-", "_"), {})})


def add_run_options(
    p: argparse.ArgumentParser, *em_options: str, with_jobs: bool = True, **own: dict
) -> None:
    """An experiment's output and run options, in this order: ``--out``, ``--jobs`` (unless
    ``with_jobs`` is False), ``--quiet``, ``--seed``, ``--max-iter``, ``--tol``, the ``em_options``
    (e.g. ``--m-step``, ``--effort``), ``--force``, ``--max-memory``; ``own`` as in :func:`add_options`."""
    flags = ("--out", "--jobs") if with_jobs else ("--out",)
    add_options(
        p, *flags, "--quiet", "--seed", "--max-iter", "--tol", *em_options, "--force", "--max-memory", **own
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
