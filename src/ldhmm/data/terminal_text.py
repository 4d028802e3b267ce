"""A user's string as a message shows it: control characters escaped, a URL's credentials masked.

A file name, an ``--out`` name, an event name or a command line may hold control characters
(``ESC[31m``, ``ESC]0;...BEL``, ``ESC[2J``): printed raw, they recolour, retitle or clear the
user's terminal. Every message that echoes such a string passes it through :func:`shown`, which
writes each control character (C0, DEL, C1) as Python writes it in a string literal (``\\x1b``,
``\\x07``, ``\\n``) and leaves every other character, non-ASCII letters included, as it is.
A URL may carry credentials (``s3://KEY:SECRET@bucket/...``, ``tcp://user:password@host``):
:func:`without_credentials` masks them (``s3://***@bucket/...``) wherever a message echoes one.
"""

from __future__ import annotations

import re

__all__ = ["CONTROL_CHARACTER", "shown", "without_credentials"]

#: A control character: C0 (tab and newline included), DEL and C1.
CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def shown(text) -> str:
    """``str(text)`` with every control character escaped (``"\\x1b[31m"`` for ``ESC[31m``)."""
    return CONTROL_CHARACTER.sub(lambda m: repr(m.group())[1:-1], str(text))


#: The user-information part of a URL (``scheme://USER[:PASSWORD]@``).
_CREDENTIALS = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^\s'\"]*@")  # to the last @: a secret may hold "/"


def without_credentials(text, url: str | None = None) -> str:
    """``str(text)`` with the credentials of every URL in it masked (``s3://***@bucket``), and
    those of ``url`` (its ``USER:PASSWORD``) wherever they appear: a library may echo them
    without their URL (as a bucket's name, an invalid host)."""
    text = str(text)
    userinfo = _CREDENTIALS.match(url or "")
    if userinfo:
        secret = userinfo.group(0)[len(userinfo.group(1)) : -1]
        if secret:
            text = text.replace(secret, "***")
    return _CREDENTIALS.sub(r"\1***@", text)
