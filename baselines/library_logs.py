"""The log of a library that a baseline wraps (hmmlearn's degenerate-fit notes, gensim's progress
and warnings), quietened while the baseline fits: :func:`quiet_logger`."""

from __future__ import annotations

import logging
from contextlib import contextmanager

__all__ = ["quiet_logger"]


@contextmanager
def quiet_logger(name: str, verbose: bool):
    """Within the block, the logger ``name`` shows errors only, unless ``verbose``; its level is
    restored after."""
    if verbose:
        yield
        return
    logger = logging.getLogger(name)
    old = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(old)
