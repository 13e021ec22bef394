"""What the kernels' thread pool costs between calls: libgomp's default spin against the sleeping pool.

    python -m benchmarks.speed.kernel_threads [--rounds 2] [--requests 300] [--records 25000]

Numba runs the parallel kernels on OpenMP (libgomp) where the system has it. By default libgomp's idle
workers spin after each parallel region (``GOMP_SPINCOUNT`` 300,000 rounds); contextsieve starts the
pool with OpenMP's ``PASSIVE`` wait policy instead (``contextsieve.kernels.threads``). Each
configuration runs in fresh processes, alternating, ``--rounds`` times:

- ``libgomp default``: ``GOMP_SPINCOUNT=300000`` set (libgomp's own default; a user's setting, which
  contextsieve keeps), the pool as it was before;
- ``sleeping pool``: no OpenMP setting, contextsieve's default.

Columns, for the int8 scan of 20,000 recorded requests x 384 (the scan a request of a year of history
runs, ``contextsieve.selection.recorded_requests``): the call's wall time back to back and after 50 ms
idle (medians of 200), and the process's CPU time per call with the 50 ms idle after it (what the
process takes from the machine while it waits). Then the request p50 (ms, ``--requests`` requests,
each embedding its message) of the 507-tool mcp_live agent with ``--records`` examples and as many
misses recorded (uniform over the tools: every tool at the per-tool cap), and without history, as
``python -m benchmarks.speed.history_memory`` measures them, and their ratio. The request p50 moves
between fresh processes by more than the pools differ, so each pool is also measured within one
process: the history's requests alternate in pairs between one Numba thread and two (where one thread
is faster, the second thread's wait between calls costs more than it saves).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import DATA, cpu_line

CONFIGS = {"libgomp default": {"GOMP_SPINCOUNT": "300000"}, "sleeping pool": {}}


def scan() -> dict[str, float | str | None]:
    """In this process: the int8 scan's wall time back to back and after idle, and CPU per call."""
    import numpy as np

    from contextsieve.kernels.scoring import Int8Corpus
    from contextsieve.kernels.threads import thread_report

    rng = np.random.default_rng(0)
    rows = rng.standard_normal((20_000, 384)).astype(np.float32)
    corpus = Int8Corpus.from_vectors(rows / np.linalg.norm(rows, axis=1, keepdims=True))
    q = rng.standard_normal((2, 384)).astype(np.float32)
    for _ in range(20):
        corpus.score_pool(q)
    back = []
    for _ in range(200):
        t = time.perf_counter()
        corpus.score_pool(q)
        back.append(time.perf_counter() - t)
    idle, cpu = [], []
    for _ in range(200):
        time.sleep(0.05)
        c, t = time.process_time(), time.perf_counter()
        corpus.score_pool(q)
        idle.append(time.perf_counter() - t)
        time.sleep(0.05)
        cpu.append(time.process_time() - c)
    r = thread_report()
    assert r is not None
    return {
        "back": 1e3 * statistics.median(back),
        "idle": 1e3 * statistics.median(idle),
        "cpu": 1e3 * statistics.fmean(cpu),
        "layer": r.layer,
        "policy": r.wait_policy,
    }


def paired(data: Path, history: Path, requests: int) -> dict[str, float]:
    """In this process: the request p50 of the agent with ``history``, its requests alternating in
    pairs between one Numba thread and two (``numba.set_num_threads``; the second of each pair timed,
    so each timed request follows one of its own kind)."""
    import numba

    from benchmarks.speed.history_memory import _agent
    from contextsieve import Embedder
    from contextsieve.engine import Engine
    from contextsieve.kernels.compiled import compile_kernels

    compile_kernels()
    agent, messages = _agent(data)
    engine = Engine(agent, embedder=Embedder(), cache_dir=False, history=history)
    engine.index()
    session = engine.session()
    lat: dict[int, list[float]] = {1: [], 2: []}
    for i in range(40 + 4 * requests):
        threads = 1 + (i // 2) % 2
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        session.new_task()
        engine.store.clear_query_cache()
        t = time.perf_counter()
        session.build_request(messages[i % len(messages)])
        if i % 2 and i >= 40:
            lat[threads].append(time.perf_counter() - t)
    return {"one thread": 1e3 * statistics.median(lat[1]), "two threads": 1e3 * statistics.median(lat[2])}


def _child(args: list[str], extra: dict[str, str]) -> dict[str, float | str | None]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
    out = subprocess.run(
        [sys.executable, "-m", *args], check=True, capture_output=True, text=True, env={**env, **extra}
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--records", type=int, default=25_000)
    ap.add_argument("--data", type=Path, default=DATA / "mcp_live")
    ap.add_argument("--scan", action="store_true", help=argparse.SUPPRESS)  # the child processes
    ap.add_argument("--paired", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.scan:
        print(json.dumps(scan()))
        return
    if args.paired is not None:
        print(json.dumps(paired(args.data, args.paired, args.requests)))
        return
    from benchmarks.speed.history_memory import fill

    print(f"# kernel_threads; {cpu_line()}")
    got: dict[str, list[dict[str, float | str | None]]] = {k: [] for k in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        history = Path(tmp) / "history.sqlite"
        fill(args.data, history, args.records, "uniform")
        for _ in range(args.rounds):
            for label, extra in CONFIGS.items():
                row = _child(["benchmarks.speed.kernel_threads", "--scan"], extra)
                for where, key in (("none", "p50 none"), (str(history), "p50 history")):
                    m = _child(
                        [
                            "benchmarks.speed.history_memory",
                            "--data",
                            str(args.data),
                            "--requests",
                            str(args.requests),
                            "--measure",
                            where,
                        ],
                        extra,
                    )
                    row[key] = m["p50"]
                pair = _child(
                    [
                        "benchmarks.speed.kernel_threads",
                        "--data",
                        str(args.data),
                        "--requests",
                        str(args.requests),
                        "--paired",
                        str(history),
                    ],
                    extra,
                )
                row.update(pair)
                got[label].append(row)
    print(
        "\n| pool | layer, policy | scan back to back ms | scan after 50 ms idle ms | CPU per call and idle ms "
        "| request p50, no history ms | request p50, a year of history ms | ratio "
        "| in one process: one thread ms | two threads ms |"
    )
    print("| --- " * 10 + "|")
    for label, rows in got.items():
        for r in rows:
            ratio = float(r["p50 history"]) / float(r["p50 none"])  # type: ignore[arg-type]
            print(
                f"| {label} | {r['layer']}, {r['policy'] or 'not set'} | {r['back']:.2f} | {r['idle']:.2f} "
                f"| {r['cpu']:.2f} | {r['p50 none']:.2f} | {r['p50 history']:.2f} | {ratio:.2f}x "
                f"| {r['one thread']:.2f} | {r['two threads']:.2f} |"
            )
    for label, rows in got.items():
        med = {k: statistics.median(float(r[k]) for r in rows) for k in ("cpu", "p50 none", "p50 history")}  # type: ignore[arg-type]
        print(
            f"\n{label} (medians of {len(rows)} rounds): {med['cpu']:.2f} ms CPU per call with its idle; request p50 "
            f"{med['p50 none']:.2f} ms without history, {med['p50 history']:.2f} ms with a year of it "
            f"({med['p50 history'] / med['p50 none']:.2f}x)"
        )


if __name__ == "__main__":
    main()
