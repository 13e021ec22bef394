"""What the benchmark scripts share: timing, percentiles, recall@k and the CPU line, and where the data sets are.

- Timing: :func:`timed` (one call), :func:`run_times` (each of repeated calls) and :func:`median_time`
  (the median of repeated calls and what the last one returned); wall time in seconds
  (``time.perf_counter``).
- Percentiles: :func:`percentile` and :func:`p50_p99` (``numpy.percentile``, linear interpolation
  unless told otherwise).
- Recall: :func:`recall_at_k` (the share of the relevant ids among the first k ranked) and
  :func:`group_recall` (the share of groups with a member found: any member of a group satisfies it).
- Where things are: :data:`ROOT` (the repository) and :data:`DATA` (the data sets).
- The CPU line a table starts with: :func:`cpu_line` (``CPU: `` and :func:`contextsieve.models.cpu.cpu_summary`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np

from contextsieve.models.cpu import cpu_summary

__all__ = [
    "DATA",
    "ROOT",
    "cpu_line",
    "group_recall",
    "median_time",
    "p50_p99",
    "percentile",
    "recall_at_k",
    "run_times",
    "timed",
]

T = TypeVar("T")
H = TypeVar("H")

#: The repository's root folder.
ROOT = Path(__file__).resolve().parents[1]
#: The benchmarks' data sets (``benchmarks/data``), one folder each.
DATA = ROOT / "benchmarks" / "data"


# -- timing ---------------------------------------------------------------------------------------


def timed(fn: Callable[[], object]) -> float:
    """The wall time of one call of ``fn``, in seconds."""
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run_times(fn: Callable[[], object], runs: int) -> list[float]:
    """The wall time of each of ``runs`` calls of ``fn``, in seconds, in call order."""
    return [timed(fn) for _ in range(runs)]


def median_time(fn: Callable[[], T], runs: int) -> tuple[float, T]:
    """The median wall time of ``runs`` calls of ``fn`` (seconds) and what the last call returned.
    ``runs`` must be at least 1 (``statistics.StatisticsError`` otherwise)."""
    calls = [_timed_call(fn) for _ in range(runs)]
    return statistics.median(seconds for seconds, _ in calls), calls[-1][1]


def _timed_call(fn: Callable[[], T]) -> tuple[float, T]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


# -- percentiles ----------------------------------------------------------------------------------

Method = Literal["linear", "lower", "higher", "nearest", "midpoint"]


def percentile(xs: Iterable[float], q: float, *, method: Method = "linear") -> float:
    """The ``q``-th percentile (0-100) of ``xs``, as ``numpy.percentile`` computes it with ``method``
    (default ``"linear"``: interpolated between the two nearest ranks; ``"lower"``: the value at rank
    ``floor(q / 100 * (n - 1))`` of the sorted values)."""
    return float(np.percentile(_array(xs), q, method=method))


def p50_p99(xs: Iterable[float], scale: float = 1.0) -> tuple[float, float]:
    """The 50th and 99th percentiles of ``xs`` times ``scale`` (1000 turns seconds into ms)."""
    a = _array(xs) * scale
    return percentile(a, 50), percentile(a, 99)


def _array(xs: Iterable[float]) -> np.ndarray:
    """``xs`` as an array (its own dtype: a float32 array stays float32)."""
    return np.asarray(xs if isinstance(xs, (np.ndarray, Sequence)) else list(xs))


# -- recall ---------------------------------------------------------------------------------------


def recall_at_k(ranked: Sequence[H], relevant: AbstractSet[H], k: int | None = None) -> float:
    """The share of ``relevant`` among the first ``k`` of ``ranked`` (all of it when ``k`` is None):
    ``|relevant & top k| / |relevant|``. ``relevant`` must not be empty."""
    return len(relevant & set(ranked[:k])) / len(relevant)


def group_recall(found: Iterable[H], groups: Sequence[AbstractSet[H]]) -> float:
    """The share of ``groups`` with a member in ``found`` (a group is satisfied by any one of its
    members; a query's needed tools, each group one need). ``groups`` must not be empty."""
    got = found if isinstance(found, (set, frozenset)) else set(found)
    return sum(1 for g in groups if g & got) / len(groups)


# -- the CPU line ---------------------------------------------------------------------------------


def cpu_line() -> str:
    """``CPU: `` and this machine's one-line summary (model, cores, SIMD flags, int8 weight type), the
    first line of most tables."""
    return f"CPU: {cpu_summary()}"
