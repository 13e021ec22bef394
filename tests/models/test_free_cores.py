"""On a busy machine the embedder runs each call on no more threads than there are
cores other processes leave free (with one of two cores busy, two threads ran slower than one)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from contextsieve import Embedder
from contextsieve.errors import InputError
from contextsieve.models.cpu import FreeCores


def _stat(path: Path, ticks: dict[int, tuple[int, int]]) -> None:
    """A /proc/stat of CPUs with (busy user ticks, idle ticks) each."""
    total_busy = sum(b for b, _ in ticks.values())
    total_idle = sum(i for _, i in ticks.values())
    lines = [f"cpu  {total_busy} 0 0 {total_idle} 0 0 0 0 0 0"]
    lines += [f"cpu{c} {b} 0 0 {i} 0 0 0 0 0 0" for c, (b, i) in sorted(ticks.items())]
    lines += ["intr 1 2 3", "ctxt 5", "procs_running 1"]
    path.write_text("\n".join(lines) + "\n")


def test_free_cores_subtracts_the_work_of_other_processes(tmp_path: Path) -> None:
    """The count is the cores minus others' busy time over the window, rounded half up, from 1 to all."""
    stat = tmp_path / "stat"
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    _stat(stat, {0: (1000, 5000), 1: (1000, 5000), 2: (99999, 0)})
    free = FreeCores({0, 1}, window=0.0, stat_path=str(stat))
    assert free() == 2  # the first look has nothing to compare with: every core free
    t0 = time.monotonic()
    time.sleep(0.3)
    # one core's worth of others' work over the window (cpu2 is not ours and never counts)
    wall = time.monotonic() - t0
    busy = round(wall / tick)
    _stat(stat, {0: (1000 + busy, 5000), 1: (1000, 5000 + busy), 2: (0, 0)})
    assert free() == 1
    time.sleep(0.3)
    _stat(stat, {0: (1000 + busy, 5000 + 30), 1: (1000, 5000 + busy + 30), 2: (0, 0)})
    assert free() == 2  # idle again
    time.sleep(0.3)
    w = 0.3 / tick
    _stat(stat, {0: (1000 + busy + int(w * 2), 5000 + 30), 1: (1000 + int(w * 2), 5000 + busy + 30), 2: (0, 0)})
    assert free() == 1  # never fewer than one


def test_free_cores_reuses_its_answer_within_the_window_and_trusts_every_core_without_the_file(
    tmp_path: Path,
) -> None:
    stat = tmp_path / "stat"
    _stat(stat, {0: (0, 0), 1: (0, 0)})
    free = FreeCores({0, 1}, window=60.0, stat_path=str(stat))
    assert free() == 2
    _stat(stat, {0: (10**9, 0), 1: (10**9, 0)})
    assert free() == 2  # within the window: no new look
    assert FreeCores({0, 1}, stat_path=str(tmp_path / "absent"))() == 2
    stat.write_text("cpu0 not numbers\n")
    assert FreeCores({0, 1}, window=0.0, stat_path=str(stat))() == 2
    _stat(stat, {0: (0, 0)})  # a CPU of ours missing from the file: no answer from it
    assert FreeCores({0, 1}, window=0.0, stat_path=str(stat))() == 2


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="Linux, 2 cores")
def test_a_real_competing_process_takes_a_core_off_the_count() -> None:
    """A process spinning on one of our cores is seen through the real /proc/stat."""
    cpus = sorted(os.sched_getaffinity(0))[:2]
    spinner = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpus[0]}}})\nwhile True: pass"]
    )
    try:
        free = FreeCores(set(cpus), window=0.0)
        free()
        time.sleep(1.0)
        assert free() == 1
    finally:
        spinner.kill()
        spinner.wait()


def test_a_busy_machine_gets_a_session_of_fewer_threads_and_the_same_vectors(
    model_cache: Path, golden: tuple, tmp_path: Path
) -> None:  # noqa: ANN001
    """When others hold a core, calls run on a session of the free cores' threads (made once, kept),
    with the vectors of the full session; ``adapt_threads=False`` keeps every call on ``threads``."""
    texts = list(golden[0][:12])
    emb = Embedder(variant="int8", cache_dir=model_cache, threads=2)
    if emb._free_cores is None:
        pytest.skip("this machine has fewer than 2 cores for this process, or no sched_getaffinity")
    full = emb.embed(texts)
    stat = tmp_path / "stat"
    cpus = sorted(emb._free_cores.cpus)
    _stat(stat, {c: (0, 0) for c in cpus})
    emb._free_cores = FreeCores(cpus, window=0.0, stat_path=str(stat))  # a machine whose other work the test sets
    emb.embed(["first look"])
    time.sleep(0.3)
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    _stat(stat, {c: (round(10 / tick) if i == 0 else 0, 0) for i, c in enumerate(cpus)})  # others: far over a core
    busy = emb.embed(texts)
    assert sorted(emb._by_threads) == [1, 2]
    np.testing.assert_allclose(busy, full, atol=2e-5)
    fixed = Embedder(variant="int8", cache_dir=model_cache, threads=2, adapt_threads=False)
    assert fixed._free_cores is None and sorted(fixed._by_threads) == [2]
    with pytest.raises(InputError, match="adapt_threads"):
        Embedder(variant="int8", cache_dir=model_cache, adapt_threads="yes")  # type: ignore[arg-type]
