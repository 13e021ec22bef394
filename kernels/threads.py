"""How the parallel Numba kernels use the machine's threads: started once, idle threads asleep, and
calls kept apart where Numba's threading layer cannot take two at once.

**Idle threads sleep.** Numba runs ``parallel=True`` kernels on a thread pool of its threading layer,
OpenMP (GNU ``libgomp``) where the system has it. By default libgomp's idle workers spin after each
parallel region, for 300,000 rounds: about 11 ms of a core per kernel call on the 2-core machines
this library is measured on (``python -m benchmarks.speed.kernel_threads``). An agent that scored its
history and then embedded the next message shared one of its two cores with a spinning thread (the
request p50 with a year of history 11.2 ms against 9.0), a kernel called after a pause took 7 ms
instead of 1, and an idle process held a core after every search. The
pool is therefore started with OpenMP's ``PASSIVE`` wait policy (its workers sleep when they have no
work), set in the process environment only while Numba loads its OpenMP layer (once, about 0.2 s)
and put back at once: libraries loaded later read the user's environment, though a child process
another thread starts in that moment inherits the setting. A policy the user chose (``OMP_WAIT_POLICY``,
``GOMP_SPINCOUNT`` or ``KMP_BLOCKTIME`` set) is kept, and an OpenMP runtime another library loaded
earlier keeps the policy it started with (:func:`thread_report` says which applies).

**One call at a time where the layer needs it.** A system without libgomp (a slim container image)
and without TBB leaves Numba its ``workqueue`` layer, which aborts the whole process when two threads
run parallel kernels at once ("Concurrent access has been detected"). There, :func:`serialized` makes
the kernels' callers take turns.

**A forked child scores on numpy.** GNU OpenMP cannot run in a child forked after its parent started
it: Numba terminates such a child at its first parallel kernel. :func:`parallel_usable` is False there
(the kernels' numpy paths run, whose scores may differ from the parent's in the last bits, and so
may the query a near-tie names; :class:`~contextsieve.errors.KernelThreadsWarning` once). The hook that
notes the fork is registered when ``contextsieve`` is imported.

**No JIT, no kernels.** With ``NUMBA_DISABLE_JIT`` set (a user debugging their own Numba code), Numba
would run the kernels as plain Python loops, thousands of times slower; :func:`jit_disabled` is True
there and the kernels' numpy paths run instead.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from contextsieve.errors import InputError, KernelThreadsWarning

__all__ = [
    "WAIT_POLICY",
    "USER_SETTINGS",
    "ThreadReport",
    "start_threads",
    "thread_report",
    "serialized",
    "count",
    "parallel_usable",
    "jit_disabled",
    "load_lock",
]

#: The OpenMP wait policy the kernels' thread pool starts with (idle workers sleep rather than spin).
WAIT_POLICY = "PASSIVE"
#: Settings by which a user chooses OpenMP's idle behaviour; when one is set, it is kept as it is.
USER_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
#: Numba's threading layers that take parallel calls from several threads at once.
_THREADSAFE = ("omp", "tbb")

#: The locks: starting the pool, loading the kernels (``contextsieve.kernels.scoring``), and the turns of
#: a layer that is not thread-safe. Made anew in a forked child, where another thread of the parent may
#: have held one at the fork.
_locks = {"start": threading.Lock(), "load": threading.Lock(), "turn": threading.Lock()}
_report: ThreadReport | None = None
_forked_from_openmp = False  # this process was forked after its parent started GNU OpenMP's pool
_warned = False


@dataclass(frozen=True)
class ThreadReport:
    """How the kernels' thread pool was started (:func:`thread_report`).

    Attributes:
        layer: Numba's threading layer (``"omp"``, ``"tbb"`` or ``"workqueue"``).
        threads: its threads (Numba's ``get_num_threads`` when it started).
        wait_policy: the OpenMP wait policy set for it (:data:`WAIT_POLICY`), or ``None``: not set by
            this library (the user's own setting, an OpenMP runtime loaded earlier, or not OpenMP).
        serialized: whether parallel calls take turns (a layer that is not thread-safe).
    """

    layer: str
    threads: int
    wait_policy: str | None
    serialized: bool


def _openmp_loaded() -> bool:
    """Whether an OpenMP runtime is already in this process (its policy was read when it loaded)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            maps = f.read()
    except OSError:  # not Linux: no way to tell; the setting is made and may apply
        return False
    names = {line.rsplit("/", 1)[-1] for line in maps.splitlines() if "/" in line}
    # the runtimes Numba's layer links by their system names; a wheel's own copy (libgomp-<hash>.so.1,
    # as PyTorch ships it) is another instance, which Numba does not use
    return any(n.startswith(("libgomp.so", "libomp.so", "libiomp5.so")) for n in names)


def start_threads() -> ThreadReport:
    """Start Numba's thread pool once (later calls return the same report), its OpenMP workers
    sleeping when idle (:data:`WAIT_POLICY`) unless the user set one of :data:`USER_SETTINGS`."""
    global _report
    if _report is not None:
        return _report
    with _locks["start"]:
        if _report is None:
            import numba
            from numba.np.ufunc import parallel

            # a blank setting is no choice (OpenMP ignores it); it is put back as it was
            choose = not any(os.environ.get(k, "").strip() for k in USER_SETTINGS) and not _openmp_loaded()
            before = os.environ.get("OMP_WAIT_POLICY")
            if choose:
                os.environ["OMP_WAIT_POLICY"] = WAIT_POLICY
            try:
                parallel._launch_threads()  # loads the layer's library, which reads its settings now
            except ValueError as e:  # a layer the user named (NUMBA_THREADING_LAYER) that cannot load here
                chosen = os.environ.get("NUMBA_THREADING_LAYER") or os.environ.get("NUMBA_THREADING_LAYER_PRIORITY")
                raise InputError(
                    f"Numba cannot start a threading layer for the scoring kernels ({str(e).splitlines()[0]}); "
                    f"$NUMBA_THREADING_LAYER(_PRIORITY) is {chosen!r}: unset it, or install what the layer needs "
                    "(tbb: `pip install tbb`; omp: the system's libgomp)"
                ) from e
            finally:
                if choose and before is None:
                    os.environ.pop("OMP_WAIT_POLICY", None)
                elif choose and before is not None:
                    os.environ["OMP_WAIT_POLICY"] = before
            layer = str(numba.threading_layer())
            applies = choose and layer == "omp"
            _report = ThreadReport(
                layer, int(numba.get_num_threads()), WAIT_POLICY if applies else None, layer not in _THREADSAFE
            )
    return _report


def load_lock() -> threading.Lock:
    """The lock under which the kernels are loaded once (``contextsieve.kernels.scoring``)."""
    return _locks["load"]


def thread_report() -> ThreadReport | None:
    """How the pool was started; ``None`` before the first parallel kernel (or :func:`start_threads`)."""
    return _report


def count() -> int:
    """The threads a parallel kernel runs on (the pool started first)."""
    import numba

    start_threads()
    return int(numba.get_num_threads())


class _Serialized:
    """A kernels module whose functions run one call at a time (a layer that is not thread-safe)."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._module, name)
        if not callable(value):
            return value

        @functools.wraps(value)
        def call(*args: Any, **kwargs: Any) -> Any:
            with _locks["turn"]:
                return value(*args, **kwargs)

        return call


def serialized(module: ModuleType) -> ModuleType | Any:
    """``module`` (the kernels) as callers use it: itself where the pool takes concurrent calls, else a
    view whose functions take turns (:data:`_THREADSAFE`). Starts the pool."""
    return _Serialized(module) if start_threads().serialized else module


def _after_fork_in_child() -> None:
    """In a forked child: note whether the parent had started Numba's GNU OpenMP pool (ours or the
    user's own), which the child cannot use."""
    global _forked_from_openmp, _warned
    for name in _locks:
        _locks[name] = threading.Lock()
    layer = sys.modules.get("numba.np.ufunc.parallel")
    if (
        layer is not None
        and getattr(layer, "_is_initialized", False)
        and getattr(layer, "_threading_layer", "") == "omp"
    ):
        _forked_from_openmp, _warned = True, False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def jit_disabled() -> bool:
    """Whether Numba's JIT is switched off: Numba's own setting once Numba is imported, else
    ``$NUMBA_DISABLE_JIT`` read as Numba reads it (an integer, 0 when unset or not a number). Does not
    import Numba, except where the working folder has a ``.numba_config.yaml`` (which Numba reads at
    import, and which may switch the JIT off): then Numba is imported to read it."""
    config = sys.modules.get("numba.core.config")
    if config is None and os.path.isfile(".numba_config.yaml"):
        import numba.core.config as config
    if config is not None and hasattr(config, "DISABLE_JIT"):
        return bool(config.DISABLE_JIT)
    try:
        return int(os.environ.get("NUMBA_DISABLE_JIT", "0")) != 0
    except ValueError:  # Numba warns and keeps its default
        return False


def parallel_usable() -> bool:
    """Whether this process may run the parallel kernels: not in a child forked after its parent
    started GNU OpenMP's pool (Numba terminates such a child when it runs one; "fork() called from a
    process already using GNU OpenMP"). There the kernels run on numpy, and the first call warns
    (:class:`~contextsieve.errors.KernelThreadsWarning`)."""
    global _warned
    if not _forked_from_openmp:
        return True
    if not _warned:
        _warned = True
        warnings.warn(
            "this process was forked from one whose scoring kernels had started GNU OpenMP threads, which a "
            "forked child cannot use: its kernels run on numpy (slower on large stores). Start worker "
            "processes with multiprocessing's 'spawn' or 'forkserver' method, or fork them before the first "
            "search, to keep the Numba kernels",
            KernelThreadsWarning,
            stacklevel=4,
        )
    return False
