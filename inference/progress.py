"""How a progress bar shows itself: live on a terminal, a few lines elsewhere.

A bar redrawn many times a second is right on a terminal and wrong in a log file or a pipe,
where every redraw becomes text (hundreds of lines for one fit). :func:`progress_options` gives
the tqdm options for the stream a bar writes to: none on a terminal; otherwise at most one
redraw a minute, so a bar leaves a few lines.
"""

from __future__ import annotations

import sys

__all__ = ["progress_options", "QUIET_INTERVAL"]

#: Seconds between two redraws of a bar that does not write to a terminal.
QUIET_INTERVAL = 60.0


def progress_options(file=None) -> dict:
    """tqdm keyword arguments for a bar writing to ``file`` (default ``sys.stderr``).

    Returns
    -------
    dict
        ``{"file": file}`` on a terminal; with ``mininterval`` and ``maxinterval`` of
        :data:`QUIET_INTERVAL` otherwise (a redirected or piped stream).
    """
    file = sys.stderr if file is None else file
    try:
        terminal = bool(file.isatty())
    except (AttributeError, ValueError):  # closed, or not a real stream
        terminal = False
    if terminal:
        return {"file": file}
    return {"file": file, "mininterval": QUIET_INTERVAL, "maxinterval": QUIET_INTERVAL}
