"""The ``ldhmm`` command line: one module per sub-command, the parser tree in :mod:`.main`.

``data`` (:mod:`.data`: ``fetch``, ``info``), ``compare``, ``classify``, ``timing``,
``hinton`` (each a parser over the experiment function of the same name in
:mod:`ldhmm.experiments`). Shared argument types and options are in :mod:`.common`. The
console script ``ldhmm`` and ``python -m ldhmm.cli`` both run :func:`main`.
"""

from .main import build_parser, main

__all__ = ["main", "build_parser"]
