"""The compiled kernels' cache: one per user, found by every checkout of the same code, and
invalidated by a change to any kernel file (numba's own stamp sees only the kernel's own file)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numba

from ldhmm.inference.cavi.kernels import cache, fused_sweeps, special

DISPATCHERS = [
    value
    for module in (fused_sweeps, special)
    for value in vars(module).values()
    if isinstance(value, numba.core.registry.CPUDispatcher) and value._cache is not None
]


def test_every_kernel_is_cached_under_the_package_version():
    assert len(DISPATCHERS) >= 10
    expected = str(cache.cache_root() / cache.package_stamp()[:16])
    for dispatcher in DISPATCHERS:
        assert isinstance(dispatcher._cache._impl.locator, cache.KernelCacheLocator), dispatcher
        assert dispatcher._cache._cache_path == expected


def test_the_stamp_follows_every_kernel_file(tmp_path, monkeypatch):
    """A copy of the package has the same stamp wherever it lies; an edit of any one of its
    files (here the special functions, which the fused sweeps inline) changes it."""
    copy = tmp_path / "checkout" / "kernels"
    shutil.copytree(cache.KERNELS_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    stamps = []
    for edit in (None, "special.py"):
        if edit:
            (copy / edit).write_text((copy / edit).read_text() + "\n# an edit\n")
        monkeypatch.setattr(cache, "KERNELS_DIR", copy)
        cache.package_stamp.cache_clear()
        stamps.append(cache.package_stamp())
    cache.package_stamp.cache_clear()
    monkeypatch.undo()
    assert stamps[0] == cache.package_stamp() != stamps[1]


def test_other_functions_and_a_cache_turned_off_keep_numbas_locators(tmp_path, monkeypatch):
    kernel = special.digamma.py_func
    assert cache.KernelCacheLocator.from_function(kernel, special.__file__) is not None

    def elsewhere(x):
        return x

    assert cache.KernelCacheLocator.from_function(elsewhere, __file__) is None
    monkeypatch.setenv("LDHMM_KERNEL_CACHE", "")
    assert cache.cache_root() is None
    assert cache.KernelCacheLocator.from_function(kernel, special.__file__) is None
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("LDHMM_KERNEL_CACHE", str(blocked / "kernels"))
    assert cache.KernelCacheLocator.from_function(kernel, special.__file__) is None
    monkeypatch.setenv("LDHMM_KERNEL_CACHE", str(tmp_path / "mine"))
    locator = cache.KernelCacheLocator.from_function(kernel, special.__file__)
    assert Path(locator.get_cache_path()).parent == tmp_path / "mine"
    cache.install()  # twice is once
    impl = getattr(numba.core.caching, "CacheImpl", None) or numba.core.caching._CacheImpl
    assert impl._locator_classes.count(cache.KernelCacheLocator) == 1


def test_a_second_process_loads_the_kernel_it_did_not_compile(tmp_path):
    """What a fresh clone finds: the machine code another process left, the same numbers."""
    script = (
        "import numpy as np\n"
        "from ldhmm.inference.cavi.kernels import special\n"
        "values = [special.gamma_functions_scalar(x) for x in (0.3, 1.5, 40.0)]\n"
        "stats = special.gamma_functions_scalar.stats\n"
        "print(np.asarray(values).tobytes().hex(), sum(stats.cache_hits.values()))\n"
    )
    env = {"LDHMM_KERNEL_CACHE": str(tmp_path / "kernels"), "PATH": "/usr/bin:/bin", "NUMBA_NUM_THREADS": "1"}
    runs = [
        subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True) for _ in "ab"
    ]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr[-2000:] + runs[1].stderr[-2000:]
    (first_values, first_hits), (second_values, second_hits) = (r.stdout.split() for r in runs)
    assert first_values == second_values
    assert (first_hits, second_hits) == ("0", "1")  # compiled, then loaded
    assert any((tmp_path / "kernels").glob("*/special.gamma_functions_scalar-*.nbc"))
