"""What decides the last bits a process computes: its numerical libraries' versions and the
CPU-specific kernels each of them chose.

Every kernel of the project is deterministic, so two processes with the same identity compute
the same bits from the same input. Two with different identities (an AVX2 and an AVX-512
machine, another numba) differ in the last bits, and EM grows that: 7e-7 relative after twelve
iterations of a small fit, another optimum on a large one (docs/performance.md, "The same bits
on another machine"). The Dask backend compares its workers' identities, because a fit's
numbers would otherwise depend on which worker holds which partition (and so on the worker
count and on which worker was lost).

The identity is read, not chosen: numba compiles for the CPU named by ``NUMBA_CPU_NAME`` (else
the host's), torch's ATen picks its kernels by ``ATEN_CPU_CAPABILITY`` (else the host's best),
numpy by ``NPY_DISABLE_CPU_FEATURES``, OpenBLAS by ``OPENBLAS_CORETYPE``, MKL by ``MKL_CBWR``;
each when the library is first imported. :func:`portable_environment` holds all of them to
their baseline x86-64 kernels (``python -m ldhmm.inference.distributed.arithmetic`` prints it
as a shell line); :func:`portable` says whether this process runs under it.
"""

from __future__ import annotations

import os
import platform
import shlex
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm
import numba
import numpy as np
import scipy
import scipy.linalg  # noqa: F401 - loads scipy's BLAS, so that every process lists the same libraries
import threadpoolctl
import torch
from numba.core import config as numba_config

try:  # numpy >= 2
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__

__all__ = ["FIELDS", "arithmetic_identity", "identity_differences", "portable", "portable_environment"]

#: LLVM features that change the instructions numba emits for arithmetic (others, e.g. sgx or
#: rtm, differ between hosts of one CPU model and change no result).
_ARITHMETIC_FEATURES = ("sse", "ssse", "avx", "fma", "f16c", "amx")

#: The fields of an identity, in the order a difference is reported, with their names in words.
FIELDS = {
    "numba_cpu": "numba's target CPU",
    "numba_features": "numba's target CPU features",
    "numba_svml": "numba's use of Intel SVML",
    "torch_kernels": "torch's CPU kernels",
    "numpy_dispatch": "numpy's SIMD kernels",
    "blas": "the BLAS kernels",
    "mkl_cbwr": "MKL_CBWR",
    "libc": "the C library",
    "versions": "the numerical libraries' versions",
}


def arithmetic_identity() -> dict[str, str]:
    """This process's identity (the keys of :data:`FIELDS`, each a string)."""
    features = numba_config.CPU_FEATURES
    if features is None:
        features = llvm.get_host_cpu_features().flatten()
    features = [f for f in features.split(",") if f[1:].startswith(_ARITHMETIC_FEATURES)]
    # Only the BLAS libraries of numpy, scipy and torch: a process may have loaded others (a
    # worker's preloads, earlier tasks) that no computation of ldhmm calls.
    ours = tuple(str(Path(m.__file__).resolve().parent) for m in (np, scipy, torch))
    blas = sorted(
        f"{lib.get('internal_api')} {lib.get('architecture') or ''}".strip()
        for lib in threadpoolctl.threadpool_info()
        if lib.get("user_api") == "blas" and _under(lib.get("filepath", ""), ours)
    )
    versions = {
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "numba": numba.__version__,
        "llvmlite": llvmlite.__version__,
        "torch": torch.__version__,
    }
    return {
        "numba_cpu": numba_config.CPU_NAME or llvm.get_host_cpu_name(),
        "numba_features": ",".join(sorted(features)),
        "numba_svml": str(bool(numba_config.USING_SVML)),
        "torch_kernels": torch.backends.cpu.get_cpu_capability(),
        "numpy_dispatch": ",".join(t for t in __cpu_dispatch__ if __cpu_features__.get(t)),
        "blas": "; ".join(sorted(set(blas))),
        "mkl_cbwr": os.environ.get("MKL_CBWR", ""),
        "libc": " ".join(platform.libc_ver()),
        "versions": " ".join(f"{k} {v}" for k, v in versions.items()),
    }


def _under(path: str, folders: tuple[str, ...]) -> bool:
    """Whether ``path`` lies in one of ``folders`` or in a ``.libs`` folder beside one (where
    wheels put their bundled libraries: numpy.libs, scipy.libs)."""
    real = str(Path(path).resolve()) if path else ""
    return any(real.startswith(f + os.sep) or real.startswith(f + ".libs" + os.sep) for f in folders)


def portable_environment() -> dict[str, str]:
    """The environment that holds numba, torch, numpy, MKL and OpenBLAS to their baseline x86-64
    kernels, so that processes on any x86-64 machine compute the same bits (with the same
    library versions and C library). numpy's part names the SIMD targets this numpy build
    dispatches to (their names changed in numpy 2.4). Set it before those libraries are first
    imported: they read it then."""
    return {
        "NUMBA_CPU_NAME": "generic",
        "ATEN_CPU_CAPABILITY": "default",
        "NPY_DISABLE_CPU_FEATURES": ",".join(__cpu_dispatch__),
        "MKL_CBWR": "COMPATIBLE",
        "OPENBLAS_CORETYPE": "Prescott",
    }


def portable() -> bool:
    """Whether this process computes with the baseline kernels of :func:`portable_environment`
    (read from the libraries, not from the environment)."""
    identity = arithmetic_identity()
    return (
        identity["numba_cpu"] == "generic"
        and identity["numba_svml"] == "False"
        and identity["torch_kernels"] == "DEFAULT"
        and identity["numpy_dispatch"] == ""
        and identity["mkl_cbwr"] == "COMPATIBLE"
    )


def identity_differences(theirs: dict, mine: dict) -> list[str]:
    """What differs between two identities, in words, e.g. ``"torch's CPU kernels (AVX512, not
    AVX2)"``; for numba's features only the features that differ."""
    out = []
    for field, words in FIELDS.items():
        a, b = theirs.get(field), mine.get(field)
        if a == b:
            continue
        if field == "numba_features":
            ours, other = set((b or "").split(",")), set((a or "").split(","))
            a, b = ",".join(sorted(other - ours)[:4]) or "-", ",".join(sorted(ours - other)[:4]) or "-"
        out.append(f"{words} ({a}, not {b})")
    return out


if __name__ == "__main__":
    print("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in portable_environment().items()))
