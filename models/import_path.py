"""``"package.module:attribute"`` strings: the callable one names, and the string of a callable.

What a comparison's plug-in factories (:mod:`ldhmm.experiments.plugins`) and a saved model of
the SVI route (its ``factory``, :mod:`ldhmm.models.file_format`) are recorded by.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

__all__ = ["load_import_path", "import_path_of"]


def load_import_path(spec: str, what: str = "factory", error: type[Exception] = ValueError) -> Callable:
    """Import ``"package.module:attribute"`` (attribute may be dotted) and return the callable.

    Raises
    ------
    error
        A malformed string, a module that does not import, a missing attribute, or an object
        that is not callable; the one-line message names ``what`` and the string.
    """
    text = str(spec).strip()
    module_name, sep, attr = text.partition(":")
    if not sep or not module_name or not attr:
        raise error(f"{what} {text!r}: expected 'package.module:factory'")
    try:
        obj = importlib.import_module(module_name)
    except Exception as err:  # any import-time error of a user's module is its own problem
        raise error(f"{what} {text!r}: cannot import {module_name!r} ({type(err).__name__}: {err})") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise error(f"{what} {text!r}: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise error(f"{what} {text!r}: {attr!r} is not callable")
    return obj


def import_path_of(obj, what: str = "factory") -> str:
    """The ``"package.module:attribute"`` of a module-level callable (a string passes through).

    Raises
    ------
    ValueError
        A callable that an import cannot find again: a lambda, a closure, a partial, one
        defined in ``__main__`` or inside a function.
    """
    if isinstance(obj, str):
        return obj.strip()
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        raise ValueError(
            f"{what} {obj!r} has no import path: give a module-level function, or its "
            f"'package.module:factory' string"
        )
    return f"{module}:{qualname}"
