"""The table of ``ldhmm``'s sub-commands: each one's module and its line in ``ldhmm --help``.

The parser tree (:mod:`ldhmm.cli.main`) imports a command's module only when that command runs
(why: start-up time; a command module imports what its command needs, torch, pandas, the
experiments, so listing every command must not import them). A new command is one line here
and one module with ``DESCRIPTION`` (what its ``--help`` says) and ``add_arguments(p)`` (its
options and its handler, ``p.set_defaults(func=...)``); :func:`ldhmm.cli.main.add_command`
builds its parser from them.
"""

from __future__ import annotations

__all__ = ["COMMANDS", "command_help"]

#: ``{command: (module of ldhmm.cli, one-line help)}``, in the order of ``ldhmm --help``.
COMMANDS = {
    "data": ("data", "fetch, inspect and export data sets"),
    "compare": ("compare", "cross-validated held-out log-likelihood of the models against K"),
    "classify": ("classify", "generative sequence classification AUCs (the paper's Table 3)"),
    "timing": ("timing", "training time of LDHMM-FF vs LDHMM-PF against K (Figure 6)"),
    "hinton": ("hinton", "Hinton diagrams of LDHMM-PF's hyper-parameters and one sequence (Figure 7)"),
    "next-event": ("next_event", "cross-validated next-event prediction (log loss, hit@1, hit@3)"),
    "fit": ("fit", "fit an LDHMM on a data file and save the model (JSON, with the vocabulary)"),
    "score": ("score", "per-sequence held-out ELBO (and IS estimate) of a log under a saved model"),
    "posterior": ("posterior", "per-sequence posterior means of pi, A, B and state marginals (Parquet)"),
    "predict": ("predict", "the most probable next events of each sequence"),
    "decode": ("decode", "the most probable hidden-state path of each sequence (Viterbi)"),
    "report": ("report", "an HTML page that explains a saved model: its states, transitions, users"),
}


def command_help(name: str) -> str:
    """The one-line help of the command ``name``."""
    return COMMANDS[name][1]
