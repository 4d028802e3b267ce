"""A module imported on the first use of one of its attributes.

What a command loads before it works is what its user waits for (docs/performance.md, "Start-up
of the ``ldhmm`` command"). A module that needs a heavy library for one of its routes only (the
PF/FF guides are also Pyro guides; ``LDHMM`` also fits by SVI) names it at its top as a
:class:`LazyModule`: the import is declared where the other imports are, and runs when that
route runs. Unlike :class:`importlib.util.LazyLoader`, nothing enters ``sys.modules`` before the
first use, so that a check of ``sys.modules`` says what a start really loaded.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class LazyModule:
    """The module ``name`` (relative to ``package`` where it starts with a dot), imported on the
    first attribute read and then read from: ``pyro = LazyModule("pyro")``; ``pyro.param(...)``.

    Parameters
    ----------
    name : str
        The module's name, absolute or relative (``".pyro_model"``).
    package : str, optional
        The package a relative ``name`` is resolved in (the caller's ``__package__``).
    """

    __slots__ = ("_name", "_package", "_module")

    def __init__(self, name: str, package: str | None = None):
        if name.startswith(".") and not package:
            raise ValueError(f"the relative module name {name!r} needs its package")
        self._name, self._package, self._module = name, package, None

    def __getattr__(self, attribute: str):
        # Only the module's own names: not the protocol lookups of copy and pickle (which would
        # import it, and recurse on an instance whose slots are not set yet).
        if attribute.startswith("__") or attribute in LazyModule.__slots__:
            raise AttributeError(attribute)
        return getattr(self.module, attribute)

    @property
    def module(self) -> ModuleType:
        """The module itself, imported now if it was not yet."""
        if self._module is None:
            self._module = importlib.import_module(self._name, self._package)
        return self._module

    def __repr__(self) -> str:
        state = "imported" if self._module is not None else "not imported yet"
        return f"<LazyModule {self._name!r} ({state})>"


def lazy_attributes(exports: dict, namespace: dict):
    """A package's PEP 562 hooks that give the names of each :class:`LazyModule`, imported on
    first use and then kept in the package's ``namespace`` (later reads skip the hook)::

        __getattr__, __dir__ = lazy_attributes({LazyModule(".svi", __name__): ("fit_svi",)}, globals())

    Parameters
    ----------
    exports : dict {LazyModule: tuple of str}
        The names each module gives the package.
    namespace : dict
        The package's ``globals()``.

    Returns
    -------
    (__getattr__, __dir__) : the two module-level functions
    """
    sources = {name: source for source, names in exports.items() for name in names}

    def __getattr__(name: str):
        if name not in sources:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = getattr(sources[name], name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(sources))

    return __getattr__, __dir__
