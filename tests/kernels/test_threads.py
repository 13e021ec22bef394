"""The kernels' thread pool (``contextsieve.kernels.threads``): its idle threads sleep, a user's own
OpenMP setting is kept, and a threading layer that is not thread-safe takes parallel calls in turn.

Each test runs a fresh Python, since Numba starts its threading layer once per process."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

_SETUP = """
import json, os, threading, time
import numpy as np
from contextsieve.kernels import scoring as K
from contextsieve.kernels.threads import thread_report
K.NUMBA_MIN_WORK = 0  # the Numba path at any size
rng = np.random.default_rng(0)
corpus = rng.standard_normal((20000, 384)).astype(np.float32)
c = K.Int8Corpus.from_vectors(corpus)
q = rng.standard_normal((2, 384)).astype(np.float32)
errors = []

def in_threads(calls, before=lambda: None):  # three threads, each: before(), then calls kernel calls
    out = []
    def work():
        try:
            before()
            for _ in range(calls):
                out.append(c.score_pool(q))
        except BaseException as e:
            errors.append(repr(e))
    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out
"""

_IDLE = (
    _SETUP
    + """
c.score_pool(q)
idle = 0.0
for _ in range(5):  # the process's CPU time while it sleeps right after a parallel kernel
    c.score_pool(q)
    t = time.process_time()
    time.sleep(0.1)
    idle += time.process_time() - t
r = thread_report()
print(json.dumps({"idle": idle, "layer": r.layer, "policy": r.wait_policy, "env": os.environ.get("OMP_WAIT_POLICY")}))
"""
)

_CONCURRENT = (
    _SETUP
    + """
want = c.score_pool(q)
got = in_threads(60)
oracle = (c.q8.astype(np.float32) @ q.T).max(axis=1) * c.scale
same = all(np.array_equal(b, want[0]) and np.array_equal(w, want[1]) for b, w in got)
close = bool(np.allclose(want[0], oracle, atol=1e-4))
r = thread_report()
print(json.dumps({"calls": len(got), "same": same, "close": close, "errors": errors, "layer": r.layer,
                  "serialized": r.serialized}))
"""
)


def _run(code: str, **env: str) -> Any:
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
    out = subprocess.run(
        [sys.executable, "-c", code], env={**base, **env}, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_pools_idle_threads_sleep_and_the_setting_is_not_left_in_the_environment() -> None:
    """libgomp's workers spun about 10 ms of a core after each parallel kernel by default (0.05 s of CPU
    over these five sleeps, on the 2-core machine the issue measured): started with the PASSIVE policy,
    a sleeping process uses next to no CPU."""
    got = _run(_IDLE)
    assert got["env"] is None  # set only while the layer loaded
    if got["layer"] == "omp":
        assert got["policy"] == "PASSIVE"
    assert got["idle"] < 0.005, got


def test_a_blank_setting_is_no_choice_and_is_put_back_as_it_was() -> None:
    got = _run(_IDLE, OMP_WAIT_POLICY=" ")
    assert got["env"] == " "
    if got["layer"] == "omp":
        assert got["policy"] == "PASSIVE"


def test_a_users_own_openmp_setting_is_kept() -> None:
    got = _run(_IDLE, OMP_WAIT_POLICY="ACTIVE", NUMBA_NUM_THREADS="2")
    assert got["env"] == "ACTIVE"
    assert got["policy"] is None  # not ours: the user's


def test_a_layer_that_is_not_thread_safe_takes_concurrent_calls_in_turn() -> None:
    """Without libgomp or TBB (a slim image) Numba runs its workqueue layer, which aborted the process
    ("Concurrent access has been detected") when two threads ran a parallel kernel at once."""
    got = _run(_CONCURRENT, NUMBA_THREADING_LAYER="workqueue")
    assert got["layer"] == "workqueue" and got["serialized"] is True
    assert got["errors"] == [] and got["calls"] == 180
    assert got["same"] and got["close"]


def test_the_default_layer_takes_concurrent_calls_at_once() -> None:
    got = _run(_CONCURRENT)
    assert got["errors"] == [] and got["calls"] == 180 and got["same"] and got["close"]
    assert got["serialized"] is (got["layer"] not in ("omp", "tbb"))


_FORKED = (
    _SETUP
    + """
import multiprocessing, queue as queues, warnings
want = c.score_pool(q)  # the parent starts GNU OpenMP's threads

def child(out):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        best, which = c.score_pool(q)
        again = c.score_pool(q)
    out.put({"close": bool(np.allclose(best, want[0], atol=1e-4)), "which": bool(np.array_equal(which, want[1])),
             "stable": bool(np.array_equal(again[0], best)), "warned": [w.category.__name__ for w in caught]})

ctx = multiprocessing.get_context("fork")
out = ctx.Queue()
p = ctx.Process(target=child, args=(out,))
p.start()
try:
    got = out.get(timeout=120)
except queues.Empty:  # the child died before it answered
    got = {}
p.join(timeout=120)
print(json.dumps({"exitcode": p.exitcode, **got, "layer": thread_report().layer}))
"""
)


def test_a_child_forked_after_the_kernels_ran_scores_on_numpy_instead_of_being_killed() -> None:
    """A harness that forks workers after its engine searched (multiprocessing's default on Linux before
    Python 3.14): Numba terminated each child at its first parallel kernel ("fork() called from a
    process already using GNU OpenMP, this is unsafe"). Now the child scores on numpy, warning once."""
    got = _run(_FORKED)
    assert got["exitcode"] == 0, got
    assert got["close"] and got["which"] and got["stable"], got
    if got["layer"] == "omp":
        assert got["warned"] == ["KernelThreadsWarning"]  # once, for two calls
    else:
        assert got["warned"] == []


def test_a_threading_layer_that_cannot_load_is_a_typed_error_naming_the_setting() -> None:
    code = (
        _SETUP
        + """
from contextsieve.errors import InputError
try:
    c.score_pool(q)
    print(json.dumps({"raised": None}))
except InputError as e:
    print(json.dumps({"raised": str(e), "cause": type(e.__cause__).__name__}))
"""
    )
    if importlib.util.find_spec("tbb") is not None:
        pytest.skip("tbb is installed here: the layer loads")
    got = _run(code, NUMBA_THREADING_LAYER="tbb")
    assert got["cause"] == "ValueError"
    assert "NUMBA_THREADING_LAYER" in got["raised"] and "'tbb'" in got["raised"] and "pip install tbb" in got["raised"]


_FIRST_CALLS = (
    _SETUP
    + """
in_threads(20, threading.Barrier(3).wait)  # the first calls, made together
print(json.dumps({"errors": errors, "serialized": thread_report().serialized}))
"""
)


def test_threads_that_make_the_first_call_together_take_turns_too() -> None:
    """The kernels were loaded without a lock: two threads' first calls each built a wrapper with its own
    lock, and the workqueue layer aborted the process (6 of 6 runs in the probe)."""
    got = _run(_FIRST_CALLS, NUMBA_THREADING_LAYER="workqueue")
    assert got == {"errors": [], "serialized": True}


_FORK_DURING_A_CALL = (
    _SETUP
    + """
import signal
big = K.Int8Corpus.from_vectors(rng.standard_normal((200000, 384)).astype(np.float32))
big.score_pool(q)
stop = False
def busy():
    while not stop:
        big.score_pool(q)
worker = threading.Thread(target=busy, daemon=True)
worker.start()
time.sleep(0.2)
status = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        signal.alarm(30)  # a child that hangs dies by SIGALRM
        big.score_pool(q)
        os._exit(0)
    status.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
stop = True
print(json.dumps({"status": status}))
"""
)


def test_a_child_forked_while_another_thread_is_in_a_kernel_does_not_hang() -> None:
    """The turn lock, held by the parent's other thread at the fork, was held forever in the child."""
    got = _run(_FORK_DURING_A_CALL, NUMBA_THREADING_LAYER="workqueue")
    assert got["status"] == [0, 0, 0]


_USERS_POOL_FIRST = """
import json, os, warnings
import numba
import numpy as np
import contextsieve  # as an application imports it, before any search

@numba.njit(parallel=True)
def total(n):
    s = 0.0
    for i in numba.prange(n):
        s += i
    return s

total(1000)  # the user's own parallel code starts GNU OpenMP
pid = os.fork()
if pid == 0:
    warnings.simplefilter("ignore")
    from contextsieve.kernels import scoring as K
    K.NUMBA_MIN_WORK = 0
    rng = np.random.default_rng(0)
    c = K.Int8Corpus.from_vectors(rng.standard_normal((20000, 384)).astype(np.float32))
    c.score_pool(rng.standard_normal((2, 384)).astype(np.float32))
    os._exit(0)
print(json.dumps({"status": os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), "layer": numba.threading_layer()}))
"""


def test_a_child_forked_before_the_kernels_were_imported_knows_its_parents_pool() -> None:
    """The at-fork hook was registered only when the kernels were imported: a child forked after the
    user's own parallel code, before contextsieve's first search, was terminated by Numba."""
    got = _run(_USERS_POOL_FIRST)
    assert got["status"] == 0


_NO_JIT = """
import json
import numpy as np
from contextsieve.kernels import scoring as K
from contextsieve.kernels.compiled import compile_kernels
K.NUMBA_MIN_WORK = 0  # the Numba path at any size, were the JIT on
K.GROUP_NUMBA_ROWS = K.BM25_TOPK_NUMBA_POSTINGS = 1
rng = np.random.default_rng(1)
corpus = rng.standard_normal((300, 32)).astype(np.float32)
q = rng.standard_normal((2, 32)).astype(np.float32)
c = K.Int8Corpus.from_vectors(corpus)
best, which = c.score_pool(q)
oracle = (c.q8.astype(np.float32) @ q.T).max(axis=1) * c.scale
top = K.score_pool_topk(q, corpus, 5)
want = np.argsort(-(corpus @ q.T).max(axis=1), kind="stable")[:5]
g_best, g_row = K.group_max(np.arange(6, dtype=np.float32), np.array([0, 0, 1, 1, 2, 2]), 3)
rows, _, _ = K.bm25_top_k([0, 2, 2], [1, 1, 2], [0, 1, 3], [1.0, 2.0], [3, 3, 3], 3.0, np.ones(3, bool), 2)
print(json.dumps({"loaded": K._jit is not None, "compiled": len(compile_kernels()),
                  "close": bool(np.allclose(best, oracle, atol=1e-4)), "top": top.idx.tolist() == want.tolist(),
                  "groups": g_row.tolist(), "bm25": rows.tolist()}))
"""


def test_with_numbas_jit_off_the_numpy_paths_score_and_build_compiles_nothing() -> None:
    """``NUMBA_DISABLE_JIT=1`` (a user debugging their own Numba code) made Numba run the kernels as plain
    Python loops, and ``contextsieve build`` failed (``'function' object has no attribute 'stats'``)."""
    got = _run(_NO_JIT, NUMBA_DISABLE_JIT="1")
    assert got == {"loaded": False, "compiled": 0, "close": True, "top": True, "groups": [1, 3, 5], "bm25": [2, 0]}


def test_numbas_jit_switched_off_by_its_config_file_is_seen_before_numba_is_imported(tmp_path: Path) -> None:
    """Numba also reads ``.numba_config.yaml`` in the working folder: with ``disable_jit: 1`` there and no
    variable set, the first large search ran the kernels as Python loops (4 s against 0.05) and ``build``
    failed as with the variable."""
    pytest.importorskip("yaml")  # Numba reads the file only with PyYAML
    (tmp_path / ".numba_config.yaml").write_text("disable_jit: 1\n")
    code = (
        "import json, sys\n"
        "from contextsieve.kernels.threads import jit_disabled\n"
        "from contextsieve.kernels.compiled import compile_kernels\n"
        "print(json.dumps({'off': jit_disabled(), 'loads': len(compile_kernels())}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_JIT"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"off": True, "loads": 0}
