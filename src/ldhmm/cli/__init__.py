"""The ``ldhmm`` command line: one module per sub-command, the parser tree in :mod:`.main`.

:mod:`.commands` lists the sub-commands and their modules: ``data`` (:mod:`.data`: ``fetch``,
``info``, ``export``), ``compare``, ``classify``, ``timing``, ``hinton``, ``next-event`` (each a
parser over the experiment function of the same name in :mod:`ldhmm.experiments`), and ``fit``
(:mod:`.fit`, :mod:`.fit_path`), ``score``, ``posterior``, ``predict``, ``decode`` for a user's
logs (:mod:`.outputs`: what they share); :mod:`.main` imports only the module of the command
that runs, and :mod:`.running` runs it. Argument types and the options several commands share
are in :mod:`.options`, the data options of every command that reads a log in
:mod:`.data_options`, the experiment commands' in :mod:`.common`; :mod:`.interrupts` ends a run
stuck in compiled code on Ctrl-C. The console script ``ldhmm`` and ``python -m ldhmm.cli`` both
run :func:`main`.
"""

from .main import build_parser, main

__all__ = ["main", "build_parser"]
