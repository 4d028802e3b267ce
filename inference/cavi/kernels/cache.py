"""Where numba keeps the compiled kernels: one cache per user that every checkout finds.

numba's own locator keeps a kernel's machine code in the ``__pycache__`` beside its source
file and stamps it with that one file's content, so

* a second checkout of the same code (a fresh clone for CI, a worktree) compiles every kernel
  again, about a minute per target CPU on two cores (twice in the test suite: this CPU and the
  golden file's generic one), and
* a kernel that inlines or calls a kernel of *another* file (``fused_sweeps`` calls
  ``special`` and ``scaled_chain``) keeps its stale machine code when only that other file
  changes.

:class:`KernelCacheLocator` files every kernel of this package under one directory per
*version of the whole package*: the SHA-256 of all its source files (and numba's and Python's
versions), so an edit of any kernel file recompiles every kernel, and any checkout of the same
code finds the same machine code. numba's index still keys each entry by signature, target CPU
and the function's bytecode, so kernels for several CPUs (``NUMBA_CPU_NAME=generic``) sit side
by side. The root is ``$LDHMM_KERNEL_CACHE``, else ``$XDG_CACHE_HOME/ldhmm/kernels``, else
``~/.cache/ldhmm/kernels``; ``LDHMM_KERNEL_CACHE=""`` (empty) keeps numba's own locator. Where the
root cannot be written, numba's own locators are used as before. Each version's directory is a
few MB; deleting the root is always safe.

:func:`install` puts the locator first in numba's list before any kernel is decorated (the
package's ``__init__`` calls it). numba reads that list from a class attribute of its caching
module (``CacheImpl._locator_classes``, ``_CacheImpl`` in older releases); where it is missing,
nothing changes: numba's own locators, as before.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from pathlib import Path

import numba
from numba.core import caching

__all__ = ["KERNELS_DIR", "KernelCacheLocator", "cache_root", "install", "package_stamp"]

#: The directory of the compiled kernels' sources (this package).
KERNELS_DIR = Path(__file__).resolve().parent


def cache_root() -> Path | None:
    """The root of the per-user kernel cache, or None where the user turned it off."""
    chosen = os.environ.get("LDHMM_KERNEL_CACHE")
    if chosen is not None:
        return Path(chosen).expanduser() if chosen else None
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ldhmm" / "kernels"


@functools.lru_cache(maxsize=1)
def package_stamp() -> str:
    """SHA-256 (hex) of every source file of the kernels' package, numba's and Python's versions:
    the version of the machine code (a change to any kernel file changes it)."""
    digest = hashlib.sha256(f"numba {numba.__version__}; python {sys.version}".encode())
    for path in sorted(KERNELS_DIR.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


class KernelCacheLocator(caching._CacheLocator):
    """numba cache locator for this package's kernels: ``<cache_root()>/<package_stamp()[:16]>``."""

    def __init__(self, py_func, py_file):
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = str(cache_root() / package_stamp()[:16])

    def get_cache_path(self):
        return self._cache_path

    def get_source_stamp(self):
        return package_stamp()

    def get_disambiguator(self):
        # numba prefixes the module's file name: kernels of two files never share an entry
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        try:
            if cache_root() is None or Path(py_file).resolve().parent != KERNELS_DIR:
                return None  # another package's function, or the cache turned off: numba's own
            locator = cls(py_func, py_file)
            locator.ensure_cache_path()
        except (OSError, RuntimeError):  # not writable, or no home directory: numba's own
            return None
        return locator


def install() -> None:
    """Put :class:`KernelCacheLocator` first among numba's cache locators (once)."""
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    locators = getattr(impl, "_locator_classes", None)
    if isinstance(locators, list) and KernelCacheLocator not in locators:
        locators.insert(0, KernelCacheLocator)
