"""What the CPU offers, read once at run time (the machines this runs on change from month to month).

Only what changes a decision is detected: whether int8 dot products run in VNNI (``vpdpbusd``: exact
u8 x s8 sums in 32-bit lanes). Without it, ONNX Runtime's u8 x s8 kernel saturates 16-bit lanes, so
int8 graphs are built with unsigned weights there (see :class:`contextsieve.models.graph.QuantPlan`).
"""

from __future__ import annotations

import functools
import os
import platform
import threading
import time
from collections.abc import Collection
from pathlib import Path

__all__ = [
    "cpu_flags",
    "cpu_model",
    "cpu_summary",
    "has_int8_dot",
    "int8_weight_type",
    "WEIGHTS_ENV",
    "FreeCores",
    "FREE_CORES_WINDOW",
]

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


#: Seconds :class:`FreeCores` reuses its last answer for (a fresh look needs at least this much time
#: to count in ``/proc/stat``'s ticks of 10 ms).
FREE_CORES_WINDOW = 0.2


class FreeCores:
    """How many of ``cpus`` other processes left free lately: called before each embedding call, it
    tells how many threads the call can use without fighting another process for a core.

    Linux only (``/proc/stat``'s per-CPU ticks); elsewhere, or when the file cannot be read, every
    core counts as free. Over the time since the previous look (at least :data:`FREE_CORES_WINDOW`
    seconds; within it the last answer is reused, so a call costs a clock read), the busy time of
    ``cpus`` (user, nice, system, irq, softirq and steal ticks) minus this process's own CPU time is
    the work of others, in cores; rounded half up, it is taken off the count. The first call sees
    every core free (there is nothing to compare with yet). Thread-safe.

    Args:
        cpus: the CPU numbers this process may run on (``os.sched_getaffinity(0)``).
        window: seconds an answer is reused (default :data:`FREE_CORES_WINDOW`).
        stat_path: the file read (``/proc/stat``; tests give another).
    """

    def __init__(
        self, cpus: Collection[int], *, window: float = FREE_CORES_WINDOW, stat_path: str = "/proc/stat"
    ) -> None:
        self.cpus = frozenset(int(c) for c in cpus)
        self.window = float(window)
        self._path = stat_path
        self._names = {f"cpu{c}".encode() for c in self.cpus}
        self._lock = threading.Lock()
        self._last: tuple[float, float, float] | None = None  # (wall, busy seconds of cpus, own CPU seconds)
        self._free = len(self.cpus)
        try:
            self._tick = 1.0 / os.sysconf("SC_CLK_TCK")
        except (AttributeError, ValueError, OSError):
            self._tick = 0.01

    def _busy_seconds(self) -> float | None:
        """Busy seconds of ``cpus`` since boot, or ``None`` when ``/proc/stat`` cannot tell."""
        try:
            with open(self._path, "rb") as f:
                data = f.read(1 << 20)
        except OSError:
            return None
        busy, seen = 0, 0
        for line in data.split(b"\n"):
            if not line.startswith(b"cpu"):
                if seen:
                    break  # the cpu lines come first
                continue
            parts = line.split()
            if parts[0] not in self._names:
                continue
            try:
                v = [int(x) for x in parts[1:9]]
            except ValueError:
                return None
            if len(v) < 8:
                return None
            busy += v[0] + v[1] + v[2] + v[5] + v[6] + v[7]  # user nice system (idle iowait) irq softirq steal
            seen += 1
        return busy * self._tick if seen == len(self.cpus) else None

    def __call__(self) -> int:
        """The cores of ``cpus`` free of other processes' work lately, from 1 to ``len(cpus)``."""
        now = time.monotonic()
        with self._lock:
            last = self._last
            if last is not None and now - last[0] < self.window:
                return self._free
            busy = self._busy_seconds()
            own = time.process_time()
            if busy is None:
                self._last = None
                self._free = len(self.cpus)
                return self._free
            self._last = (now, busy, own)
            if last is not None:
                others = max(0.0, (busy - last[1]) - (own - last[2])) / max(now - last[0], 1e-9)
                self._free = max(1, min(len(self.cpus), len(self.cpus) - int(others + 0.5)))
            return self._free
