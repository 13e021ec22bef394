"""Compile targets for the Numba kernels: run, on any x86 machine, the code an AVX2-only CPU runs.

Numba compiles for the CPU it runs on. ``NUMBA_CPU_NAME`` alone keeps the host's feature list (on an
AVX-512 host, ``NUMBA_CPU_NAME=haswell`` still emits 512-bit code), so a target is a CPU name *and* the
host's features with the wider ones turned off, plus a fresh ``NUMBA_CACHE_DIR`` so that no kernel
compiled for the host is loaded from the cache. Used by the tests (the kernel and index suites run once
as compiled for AVX2) and by anyone who wants to check a change on the code path of an older CPU::

    env = avx2_only_env(cache_dir)
    subprocess.run([sys.executable, "-m", "pytest", "tests/kernels/test_kernels.py"], env={**os.environ, **env})
"""

from __future__ import annotations

import platform
from pathlib import Path

__all__ = ["WIDE_FEATURE_PREFIXES", "AVX2_CPU_NAME", "host_features", "avx2_only_env", "can_target_avx2"]

#: Features an AVX2-only CPU lacks (LLVM spellings): AVX-512 of any kind, AVX10, AMX and the VEX
#: encodings of VNNI / IFMA that came with those CPUs.
WIDE_FEATURE_PREFIXES = ("avx512", "avx10", "amx", "avxvnni", "avxifma", "avxneconvert")
#: The CPU model the AVX2 target names: AMD Zen 1 (AVX2 + FMA, no AVX-512, no VNNI).
AVX2_CPU_NAME = "znver1"


def host_features() -> dict[str, bool]:
    """The host CPU's features as LLVM names them (imports llvmlite, which Numba brings)."""
    import llvmlite.binding as llvm

    return dict(llvm.get_host_cpu_features())


def can_target_avx2() -> bool:
    """Whether this machine can run AVX2 code (x86-64 with AVX2 and FMA)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    f = host_features()
    return bool(f.get("avx2") and f.get("fma"))


def avx2_only_env(cache_dir: str | Path) -> dict[str, str]:
    """Environment variables that make Numba compile for an AVX2-only CPU, caching in ``cache_dir``
    (give an empty folder: a cache written for another target would be loaded as is)."""
    feats = []
    for name, on in sorted(host_features().items()):
        if name.startswith(WIDE_FEATURE_PREFIXES):
            on = False
        feats.append(("+" if on else "-") + name)
    return {"NUMBA_CPU_NAME": AVX2_CPU_NAME, "NUMBA_CPU_FEATURES": ",".join(feats), "NUMBA_CACHE_DIR": str(cache_dir)}
