"""The compiled Numba kernels on disk: where they are cached, whether they are there, and compiling them ahead.

Numba compiles each kernel of :mod:`contextsieve.kernels._jit` for the machine it runs on the first
time the kernel is needed (0.3-3 s a kernel, about 10 s for all on 2 cores) and keeps the machine code
in a cache folder, from which later processes load it (about 10 ms a kernel, after a one-time set-up of
Numba's target of about 0.2 s per process). The folder is :func:`kernel_cache_dir`: the user's
``NUMBA_CACHE_DIR`` when set, else ``<contextsieve cache>/numba``
(:func:`contextsieve.fileio.default_cache_dir`), never the installed package's own folder, so an
install that is not writable (site-packages of root, a container image) loads its kernels as fast as a
writable one. When that folder cannot be written the kernels it holds are loaded from it (a read-only
image made with ``contextsieve build``) and the others compiled in memory in every process, nothing
written (:func:`kernel_cache_problem` says why, and the first use warns).

:func:`kernels_compiled` tells, without importing Numba, whether the next process will load rather
than compile (so a command line can announce a compilation before it starts); :func:`compile_kernels`
loads or compiles every kernel for the argument types contextsieve passes it, reporting each.
"""

from __future__ import annotations

import ast
import hashlib
import io
import os
import pickle
import pickletools
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from contextsieve.fileio import default_cache_dir

__all__ = [
    "NUMBA_CACHE_ENV",
    "KERNELS",
    "KernelLoad",
    "kernel_cache_dir",
    "kernel_cache_problem",
    "kernels_compiled",
    "compile_kernels",
    "kernel_arguments",
]

#: Numba's own setting for its cache folder; when the user sets it, the kernels are cached there.
NUMBA_CACHE_ENV = "NUMBA_CACHE_DIR"

#: The Numba kernels of :mod:`contextsieve.kernels._jit` that the engine calls (the helpers they
#: inline are compiled into them).
KERNELS = ("score_matrix", "score_pool", "score_pool_topk", "group_max", "bm25_top_k", "half_rows")

_SOURCE = Path(os.path.abspath(__file__)).with_name("_jit.py")


@dataclass(frozen=True)
class KernelLoad:
    """One kernel made ready by :func:`compile_kernels`."""

    #: the kernel's name in :data:`KERNELS`
    name: str
    #: how many argument-type signatures were made ready
    signatures: int
    #: wall seconds to load or compile them (the first kernel of a process also pays Numba's target
    #: set-up, about 0.2 s)
    seconds: float
    #: True when nothing had to be compiled: every signature came from the disk cache (or had been
    #: loaded already in this process); False when at least one was compiled now
    from_cache: bool


def kernel_cache_dir() -> Path:
    """The folder Numba caches contextsieve's kernels in: ``$NUMBA_CACHE_DIR`` when the user set it,
    else ``<default_cache_dir()>/numba`` (``~/.cache/contextsieve/numba`` by default). Numba keeps one
    subfolder per source folder of the kernels in it. ``$NUMBA_CACHE_DIR`` is taken as Numba takes it
    (no ``~`` expansion)."""
    env = os.environ.get(NUMBA_CACHE_ENV)
    return Path(env) if env else default_cache_dir() / "numba"


def kernel_arguments() -> dict[str, list[tuple[object, ...]]]:
    """Small sample arguments per kernel, of the types :mod:`contextsieve.kernels.scoring` passes
    at its call sites (the types, not the sizes, pick the compiled code): float32 queries; float32 or
    int8 C-contiguous corpora with float32 scales, bool masks, float32 / int32 outputs; ``k`` and
    block counts as Python ints; ``group_max`` with float32 scores and int64 items;
    ``bm25_top_k`` with int64 slots and offsets, float64 term counts and idf, and int32 row lengths
    (:mod:`contextsieve.retrieval.bm25`'s); ``half_rows`` with a uint16 matrix, int64 rows and a uint32
    output."""
    f32, i8, i32, i64, f64, b = np.float32, np.int8, np.int32, np.int64, np.float64, np.bool_
    q = np.zeros((2, 8), f32)
    corpora = (np.zeros((4, 8), f32), np.zeros((4, 8), i8))
    no_scale, scale, mask = np.zeros(0, f32), np.ones(4, f32), np.zeros(0, b)
    return {
        "score_matrix": [(q, corpora[0], np.zeros((4, 2), f32))],
        "score_pool": [(q, c, s, mask, np.zeros(4, f32), np.zeros(4, i32)) for c, s in zip(corpora, (no_scale, scale))],
        "score_pool_topk": [(q, c, s, mask, 2, 1) for c, s in zip(corpora, (no_scale, scale))],
        "group_max": [(np.zeros(4, f32), np.zeros(4, i64), 1)],
        "half_rows": [(np.zeros((4, 8), np.uint16), np.zeros(2, i64), np.zeros((2, 8), np.uint32))],
        "bm25_top_k": [
            (
                np.zeros(1, i64),
                np.ones(1, f64),
                np.array([0, 1], i64),
                np.ones(1, f64),
                np.ones(4, i32),
                1.0,
                1.2,
                0.75,
                np.ones(4, b),
                1,
                np.zeros(0, i64),
            )
        ],
    }


def compile_kernels(progress: Callable[[str], None] | None = None) -> list[KernelLoad]:
    """Load every kernel of :data:`KERNELS` from the disk cache, compiling (and caching) those that are
    not there, for the argument types of :func:`kernel_arguments`; the kernels are not run.

    Args:
        progress: called with each kernel's name before it is made ready (default: nothing).

    Returns:
        One :class:`KernelLoad` per kernel, in :data:`KERNELS` order. From a warm cache all are ready in
        about 0.35 s, Numba's import included (then its target set-up, about 0.15 s, then about 10 ms a
        kernel); a cold cache compiles for 10-15 s on 2 cores. Where :func:`kernels_compiled` is True a
        caller may skip this: each kernel then loads on its first call. None where Numba's JIT is off
        (:func:`~contextsieve.kernels.threads.jit_disabled`): the kernels' numpy paths run, nothing is
        compiled.
    """
    from contextsieve.kernels.threads import jit_disabled, start_threads

    if jit_disabled():
        return []
    import numba

    start_threads()  # before a kernel loads: loading one starts Numba's threading layer
    from contextsieve.kernels import _jit

    samples = kernel_arguments()
    out = []
    for name in KERNELS:
        if progress is not None:
            progress(name)
        disp = getattr(_jit, name)
        sigs = [tuple(numba.typeof(a) for a in args) for args in samples[name]]
        misses = sum(disp.stats.cache_misses.values())
        t = time.perf_counter()
        for sig in sigs:
            disp.compile(sig)  # the call path's own step (typeof, then compile): loads from the cache first
        seconds = time.perf_counter() - t
        out.append(KernelLoad(name, len(sigs), seconds, sum(disp.stats.cache_misses.values()) == misses))
    return out


def kernel_cache_problem() -> str | None:
    """Why the kernels are compiled in memory in every process (the cache folder and the error met
    creating or writing it), or None when they are cached on disk. Imports Numba."""
    from contextsieve.kernels import _jit

    return _jit.CACHE_PROBLEM


def kernels_compiled() -> bool:
    """Whether every kernel is in the disk cache for this Numba, this Python and this source, so the
    next :func:`compile_kernels` (or first call) loads rather than compiles. Does not import Numba
    (a few ms).

    It reads, for each kernel, the index file Numba would read (``<kernel_cache_dir()>/<folder
    key>/_jit.<kernel>-<line>.py<version>.nbi``, the path built as Numba builds it) and checks: the
    folder can be read (one that cannot be written is loaded from, never written); the index was
    written by the installed Numba version; its source stamp is that of the ``_jit.py`` being imported
    (its sha256; its mtime and size for Numba releases from before source hashes); it lists at least
    as many compiled signatures as :func:`kernel_arguments` has for the kernel, and their data files
    exist. Not checked: which signatures and which CPU they were compiled for (a cache folder shared
    with a machine of another CPU model may answer True and compile anyway); a Numba setting that moves
    the cache elsewhere than ``$NUMBA_CACHE_DIR`` (``.numba_config.yaml``, ``NUMBA_CACHE_LOCATOR_CLASSES``).
    False on any doubt (an unreadable file, an unknown Numba version).
    """
    try:
        version = _numba_version()
        source = _SOURCE.read_bytes()
        st = _SOURCE.stat()
    except (OSError, ValueError):
        return False
    if version is None:
        return False
    folder = kernel_cache_dir() / _folder_key(_SOURCE)
    if not os.access(folder, os.R_OK | os.X_OK):  # a read-only folder is loaded from (_jit.READ_ONLY_DIR)
        return False
    stamps = (hashlib.sha256(source).digest(), (st.st_mtime, st.st_size))
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}"
    lines = _first_lines(source)
    wanted = kernel_arguments()
    for name in KERNELS:
        if name not in lines:
            return False
        index = folder / f"_jit.{name}-{lines[name]}.{tag}.nbi"
        data_files = _index_data_files(index, version, stamps)
        if data_files is None or len(data_files) < len(wanted[name]):
            return False
        if not all((folder / f).is_file() for f in data_files):
            return False
    return True


def _folder_key(source: Path) -> str:
    """Numba's subfolder for a source file (``_CacheLocator.get_suitable_cache_subpath``: the folder's
    name and the sha1 of its absolute path)."""
    parent = os.path.dirname(os.path.abspath(source))
    return f"{os.path.split(parent)[-1]}_{hashlib.sha1(parent.encode()).hexdigest()}"


def _first_lines(source: bytes) -> dict[str, int]:
    """Each module-level function's first line as its code object has it (the first decorator's
    line), which Numba puts in the cache file names."""
    out = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return out


def _numba_version() -> str | None:
    """The installed Numba's version, without importing it: ``numba/_version.py`` (versioneer's), else
    the distribution's metadata; None when Numba is not installed."""
    mod = sys.modules.get("numba")
    if mod is not None:
        return str(mod.__version__)
    import importlib.util

    spec = importlib.util.find_spec("numba")  # a top-level name: found, not imported
    if spec is None or spec.origin is None:
        return None
    try:
        m = re.search(r'"version":\s*"([^"]+)"', Path(spec.origin).with_name("_version.py").read_text("utf-8"))
    except OSError:
        m = None
    if m:
        return m.group(1)
    import importlib.metadata

    try:
        return importlib.metadata.version("numba")
    except importlib.metadata.PackageNotFoundError:
        return None


class _NoGlobals(pickle.Unpickler):
    """Reads plain values only: an index's header is a str, and nothing here may import Numba."""

    def find_class(self, module: str, name: str) -> object:
        raise pickle.UnpicklingError(f"{module}.{name} not read")


def _index_data_files(index: Path, version: str, stamps: tuple[bytes, tuple[float, int]]) -> list[str] | None:
    """The data files an index lists when it is Numba ``version``'s for this source, else None.

    The index is a pickled version string, then Numba's pickle of ``(stamp, {key: data file})``, which
    is walked opcode by opcode, never unpickled (its keys are Numba types). The stamp is the source's
    sha256 (recent Numba) or its ``(mtime, size)`` (Numba before source hashes); ``stamps`` holds both.
    """
    try:
        with open(index, "rb") as f:
            head = _NoGlobals(f).load()
            rest = f.read()
        if head != version:
            return None
        stamp: list[object] = []
        names = []
        for _op, arg, _pos in pickletools.genops(io.BytesIO(rest)):
            if not stamp and isinstance(arg, (bytes, float)):
                stamp.append(arg)  # the sha256, or the mtime then the size
            elif len(stamp) == 1 and isinstance(stamp[0], float) and isinstance(arg, int):
                stamp.append(arg)
            elif isinstance(arg, str) and arg.endswith(".nbc"):
                names.append(arg)
    except Exception:  # any unreadable index (truncated, foreign, garbage) means: not compiled
        return None
    fresh = stamp == [stamps[0]] or stamp == list(stamps[1])
    return sorted(set(names)) if fresh else None
