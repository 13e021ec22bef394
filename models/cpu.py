"""What the CPU offers, read once at run time (the machines this runs on change from month to month).

Only what changes a decision is detected: whether int8 dot products run in VNNI (``vpdpbusd``: exact
u8 x s8 sums in 32-bit lanes). Without it, ONNX Runtime's u8 x s8 kernel saturates 16-bit lanes, so
int8 graphs are built with unsigned weights there (see :class:`contextsieve.models.graph.QuantPlan`).
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

__all__ = ["cpu_flags", "cpu_model", "cpu_summary", "has_int8_dot", "int8_weight_type", "WEIGHTS_ENV"]

#: Environment variable that forces the int8 weight type: ``"s8"`` or ``"u8"`` (default: by CPU).
WEIGHTS_ENV = "CONTEXTSIEVE_INT8_WEIGHTS"

_INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as the kernel lists them (``/proc/cpuinfo``; empty where unreadable)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else :func:`platform.processor`, else ``"unknown"``."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


#: The flags worth printing beside a timing table (they change which kernels run).
_SHOWN_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")


def cpu_summary() -> str:
    """One line for benchmark tables: model, cores, the SIMD flags that matter, the int8 weight type."""
    flags = " ".join(f for f in _SHOWN_FLAGS if f in cpu_flags()) or "none of " + "/".join(_SHOWN_FLAGS)
    return f"{cpu_model()}, {os.cpu_count()} cores, {flags}; int8 weights {int8_weight_type()}"


def has_int8_dot() -> bool:
    """Whether int8 dot products are exact in hardware: VNNI or AMX on x86, any other architecture
    (ONNX Runtime's ARM kernels widen or use ``sdot``/``udot``)."""
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64", "i386", "i686"):
        return True
    return bool(cpu_flags() & _INT8_DOT_FLAGS)


def int8_weight_type() -> str:
    """``"s8"`` where int8 dot products are exact in hardware, else ``"u8"``; ``$CONTEXTSIEVE_INT8_WEIGHTS``
    (``s8`` or ``u8``) overrides, for tests of both paths on one machine."""
    forced = os.environ.get(WEIGHTS_ENV, "").strip().lower()
    if forced in ("s8", "u8"):
        return forced
    if forced:
        from contextsieve.errors import InputError

        raise InputError(f"${WEIGHTS_ENV} must be 's8' or 'u8', got {forced!r}")
    return "s8" if has_int8_dot() else "u8"
