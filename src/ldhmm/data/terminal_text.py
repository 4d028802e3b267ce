"""A user's string as a message shows it: control characters escaped, nothing else changed.

A file name, an ``--out`` name, an event name or a command line may hold control characters
(``ESC[31m``, ``ESC]0;...BEL``, ``ESC[2J``): printed raw, they recolour, retitle or clear the
user's terminal. Every message that echoes such a string passes it through :func:`shown`, which
writes each control character (C0, DEL, C1) as Python writes it in a string literal (``\\x1b``,
``\\x07``, ``\\n``) and leaves every other character, non-ASCII letters included, as it is.
"""

from __future__ import annotations

import re

__all__ = ["CONTROL_CHARACTER", "shown"]

#: A control character: C0 (tab and newline included), DEL and C1.
CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def shown(text) -> str:
    """``str(text)`` with every control character escaped (``"\\x1b[31m"`` for ``ESC[31m``)."""
    return CONTROL_CHARACTER.sub(lambda m: repr(m.group())[1:-1], str(text))
