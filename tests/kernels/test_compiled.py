"""Where the compiled Numba kernels live, and loading them from there (issue 40, first run).

Each test runs fresh Python processes with their own cache folders (``CONTEXTSIEVE_CACHE`` /
``NUMBA_CACHE_DIR`` in a temp dir, ``HOME`` a temp dir), since Numba picks a kernel's cache folder once
per process. The read-only install is a copy of the modules the processes need, made read-only. As
root, whom file modes do not stop, the processes run without the capabilities that override them
(``setpriv``), and once more as an unprivileged user where that user can run this Python.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import contextsieve.kernels
from contextsieve.kernels.compiled import KERNELS
from tests.helpers.read_only import root_without_override

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path(contextsieve.kernels.__file__).resolve().parent
NOBODY = 65534


def _env(home: Path, **extra: str) -> dict[str, str]:
    """This environment without a Numba cache setting, ``HOME`` in a temp dir, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME", "CONTEXTSIEVE_CACHE")}
    home.mkdir(parents=True, exist_ok=True)
    if "PYTHONPATH" in extra and env.get("PYTHONPATH"):  # in front of the caller's
        extra = {**extra, "PYTHONPATH": extra["PYTHONPATH"] + os.pathsep + env["PYTHONPATH"]}
    return {**env, "HOME": str(home), "PYTHONDONTWRITEBYTECODE": "1", **extra}


def _run(
    code: str, env: dict[str, str], cwd: Path, preexec: Callable[[], None] | None = None, prefix: tuple[str, ...] = ()
) -> Any:
    """Run ``code`` in a fresh Python (after ``prefix``, a command that runs it) and read the JSON it prints last."""
    out = subprocess.run(
        [*prefix, sys.executable, "-c", code],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        preexec_fn=preexec,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _numba_files(folder: Path) -> dict[str, int]:
    """Numba cache files under ``folder``: path -> mtime (ns)."""
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*") if p.suffix in (".nbi", ".nbc")}


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``folder``: path -> (size, mtime ns)."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in [folder, *folder.rglob("*")]}


ONE_KERNEL = """
import json, os, numpy as np
import contextsieve.kernels.scoring as K
from contextsieve.kernels import _jit, compiled
n = K.GROUP_NUMBA_ROWS
best, arg = K.group_max(np.arange(n, dtype=np.float32), np.zeros(n, np.int64), 2)
assert best.tolist() == [n - 1, -np.inf] and arg.tolist() == [n - 1, -1]
import numba, user_module  # the user's own cache=True function, decorated after contextsieve's kernels
assert user_module.plus_one(1) == 2
print(json.dumps({
    "kernel_cache": _jit.group_max.stats.cache_path,
    "misses": sum(_jit.group_max.stats.cache_misses.values()),
    "user_cache": user_module.plus_one.stats.cache_path,
    "numba_setting": numba.config.CACHE_DIR,
    "env": os.environ.get("NUMBA_CACHE_DIR"),
    "kernel_cache_dir": str(compiled.kernel_cache_dir()),
    "problem": compiled.kernel_cache_problem(),
}))
"""


def _user_module(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "user_module.py").write_text(
        "from numba import njit\n\n@njit(cache=True)\ndef plus_one(x):\n    return x + 1\n", encoding="utf-8"
    )
    return folder


def test_the_kernels_are_cached_under_the_contextsieve_cache_not_next_to_the_source(tmp_path: Path) -> None:
    """Without NUMBA_CACHE_DIR the kernels are cached in <CONTEXTSIEVE_CACHE>/numba: nothing is written
    next to the installed source (Numba's default) nor in ~/.cache/numba; the user's own Numba function,
    decorated afterwards, still gets Numba's default place, and Numba's setting and the environment are
    as they were."""
    before = _numba_files(SOURCE)
    user = _user_module(tmp_path / "user")
    env = _env(tmp_path / "home", CONTEXTSIEVE_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(user))
    got = _run(ONE_KERNEL, env, cwd=tmp_path)
    cache = tmp_path / "cache" / "numba"
    assert Path(got["kernel_cache"]).parent == cache
    assert got["kernel_cache_dir"] == str(cache) and got["problem"] is None
    written = {Path(p).name for p in _numba_files(cache)}
    assert any(n.startswith("_jit.group_max-") and n.endswith(".nbi") for n in written), written
    assert any(n.startswith("_jit.group_max-") and n.endswith(".nbc") for n in written), written
    assert _numba_files(SOURCE) == before
    assert _numba_files(tmp_path / "home") == {}
    assert got["user_cache"] == str(user / "__pycache__")
    assert got["numba_setting"] == "" and got["env"] is None


def test_a_users_numba_cache_dir_wins(tmp_path: Path) -> None:
    env = _env(
        tmp_path / "home",
        CONTEXTSIEVE_CACHE=str(tmp_path / "cache"),
        NUMBA_CACHE_DIR=str(tmp_path / "theirs"),
        PYTHONPATH=str(_user_module(tmp_path / "user")),
    )
    got = _run(ONE_KERNEL, env, cwd=tmp_path)
    assert Path(got["kernel_cache"]).parent == tmp_path / "theirs"
    assert got["kernel_cache_dir"] == str(tmp_path / "theirs") and got["problem"] is None
    assert _numba_files(tmp_path / "theirs") and not (tmp_path / "cache").exists()
    assert Path(got["user_cache"]).parent == tmp_path / "theirs"  # theirs for their own functions too
    assert got["numba_setting"] == str(tmp_path / "theirs")


def test_a_cache_folder_that_cannot_be_created_compiles_in_memory(tmp_path: Path) -> None:
    """The kernels still run, compiled in memory (no cache, no write anywhere), and
    kernel_cache_problem() says why; without this Numba would write next to the source or raise."""
    (tmp_path / "a-file").write_text("not a folder")
    before = _numba_files(SOURCE)
    env = _env(
        tmp_path / "home",
        CONTEXTSIEVE_CACHE=str(tmp_path / "a-file" / "cache"),
        PYTHONPATH=str(_user_module(tmp_path / "user")),
    )
    got = _run(ONE_KERNEL, env, cwd=tmp_path)
    assert got["kernel_cache"] is None and got["misses"] == 1
    assert got["problem"].startswith(str(tmp_path / "a-file" / "cache" / "numba"))
    assert _numba_files(SOURCE) == before and _numba_files(tmp_path / "home") == {}


# -- a read-only install ---------------------------------------------------------------------------

LOAD_ALL = """
import dataclasses, json, os, sys, tempfile
from contextsieve.kernels import compiled
try:
    tempfile.TemporaryFile(dir=os.path.dirname(compiled.__file__)).close()
    install_writable = True
except OSError:
    install_writable = False
before = compiled.kernels_compiled()
numba_before = "numba" in sys.modules
loads = compiled.compile_kernels()
from contextsieve.kernels import _jit
stats = {}
for name in compiled.KERNELS:
    s = getattr(_jit, name).stats
    stats[name] = [sum(s.cache_hits.values()), sum(s.cache_misses.values()), s.cache_path]
print(json.dumps({
    "file": compiled.__file__, "before": before, "numba_before": numba_before,
    "after": compiled.kernels_compiled(), "loads": [dataclasses.asdict(x) for x in loads], "stats": stats,
    "problem": compiled.kernel_cache_problem(), "install_writable": install_writable,
}))
"""

#: After compile_kernels, the calls the engine makes at Numba sizes, with the types its call sites
#: pass (float32 and int8 corpora, masks, BM25 through the real TermIndex): none may compile anew.
ENGINE_CALLS = """
import json, numpy as np
from contextsieve.kernels import compiled, _jit
import contextsieve.kernels.scoring as K
from contextsieve.retrieval.bm25 import TermIndex
compiled.compile_kernels()
before = {n: len(getattr(_jit, n).signatures) for n in compiled.KERNELS}
K.NUMBA_MIN_WORK = 0
rng = np.random.default_rng(7)
c = rng.standard_normal((300, 16), dtype=np.float32)
q = rng.standard_normal((3, 16), dtype=np.float32)
mask = np.zeros(300, bool)
K.query_scores(c, q)
K.score_pool(q, c); K.score_pool(q, c, exclude=mask)
K.score_pool_topk(q, c, 5); K.score_pool_topk(q, c, 5, exclude=mask)
i8 = K.Int8Corpus.from_vectors(c)
i8.score_pool(q); i8.score_pool(q, exclude=mask); i8.score_pool_topk(q, 5); i8.score_pool_topk(q, 5, exclude=mask)
n = K.GROUP_NUMBA_ROWS
K.group_max(rng.random(n).astype(np.float32), rng.integers(0, 10, n), 10)
K.group_max(rng.random(n), rng.integers(0, 10, n).astype(np.int32), 10)
index = TermIndex.from_texts(["alpha beta"] * K.BM25_TOPK_NUMBA_POSTINGS + ["beta gamma"] * 10, str.split)
assert index.search(["alpha", "gamma"], 3, np.ones(len(index), bool), also=[0])
K.HALF_NUMBA_VALUES = 0
K.half_rows(c.astype(np.float16), np.arange(5)); K.half_rows(c.astype(np.float16), np.arange(5, dtype=np.int32))
after = {n: len(getattr(_jit, n).signatures) for n in compiled.KERNELS}
print(json.dumps({"before": before, "after": after}))
"""


def _copy_install(site: Path) -> Path:
    """The modules the processes import, as an installed package: contextsieve (its root, errors,
    fileio, the BM25 module of retrieval) and contextsieve.kernels."""
    pkg = site / "contextsieve"
    (pkg / "retrieval").mkdir(parents=True)
    for name in ("__init__.py", "errors.py", "fileio.py"):
        shutil.copy2(ROOT / "engine" / name, pkg / name)
    for name in ("__init__.py", "bm25.py"):
        shutil.copy2(ROOT / "engine" / "retrieval" / name, pkg / "retrieval" / name)
    shutil.copytree(ROOT / "kernels", pkg / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    return pkg


def _set_writable(folder: Path, writable: bool) -> None:
    for p in [folder, *folder.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755 if writable else 0o555)
        else:
            p.chmod(0o644 if writable else 0o444)


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


@dataclass
class ReadOnlyRun:
    pkg: Path
    cache: Path
    first: dict[str, Any]
    second: dict[str, Any]
    engine_calls: dict[str, Any]
    unchanged: bool
    #: whether the file modes bind the processes (not when root keeps its capabilities)
    enforced: bool


@pytest.fixture(scope="module", params=["this user", "unprivileged user"])
def read_only_run(request: pytest.FixtureRequest) -> Iterator[ReadOnlyRun]:
    """A read-only install whose kernels are compiled by a first process, loaded by a second, then
    called as the engine calls them by a third; the install's files before and after compared."""
    as_nobody = request.param == "unprivileged user"
    if as_nobody:
        if os.geteuid() != 0:
            pytest.skip("not root: the 'this user' run is already unprivileged")
        try:
            probe = subprocess.run([sys.executable, "-c", "import numba"], preexec_fn=_as_nobody, capture_output=True)
            ok = probe.returncode == 0
        except OSError:  # the exec refused: the interpreter is in a folder that user cannot enter
            ok = False
        if not ok:
            pytest.skip(f"user {NOBODY} cannot run {sys.executable} with Numba (its folders are not readable to them)")
    base = Path(tempfile.mkdtemp(prefix="contextsieve-readonly-"))
    base.chmod(0o755)
    try:
        pkg = _copy_install(base / "site")
        home, cache = base / "home", base / "home" / "cache"
        cache.mkdir(parents=True)
        if as_nobody:
            for p in (home, cache):
                os.chown(p, NOBODY, NOBODY)
        _set_writable(base / "site", False)
        before = _tree(base / "site")
        env = _env(home, CONTEXTSIEVE_CACHE=str(cache), PYTHONPATH=str(base / "site"))
        pre = _as_nobody if as_nobody else None
        # root keeps its uid but loses the capabilities that override file modes, where setpriv exists
        # (without it, root's run still checks that nothing is written inside the install)
        prefix = () if as_nobody else root_without_override()
        first = _run(LOAD_ALL, env, cwd=home, preexec=pre, prefix=prefix)
        second = _run(LOAD_ALL, env, cwd=home, preexec=pre, prefix=prefix)
        calls = _run(ENGINE_CALLS, env, cwd=home, preexec=pre, prefix=prefix)
        enforced = os.geteuid() != 0 or as_nobody or bool(prefix)
        yield ReadOnlyRun(pkg, cache, first, second, calls, _tree(base / "site") == before, enforced)
    finally:
        _set_writable(base, True)
        shutil.rmtree(base, ignore_errors=True)


def test_a_read_only_install_loads_every_kernel_from_the_cache(read_only_run: ReadOnlyRun) -> None:
    """First process compiles into <CONTEXTSIEVE_CACHE>/numba, the second loads every kernel from there
    (no miss, a hit each), and nothing is written inside the install."""
    r = read_only_run
    assert Path(r.first["file"]).parent == r.pkg / "kernels"  # the copy, not the working tree
    assert r.first["install_writable"] is not r.enforced
    assert r.first["problem"] is None
    assert [x["from_cache"] for x in r.first["loads"]] == [False] * len(KERNELS)
    for name, (hits, misses, path) in r.second["stats"].items():
        assert misses == 0 and hits > 0, (name, hits, misses)
        assert Path(path).parent == r.cache / "numba"
    assert r.unchanged


def test_compile_kernels_and_kernels_compiled_tell_a_first_run_from_a_later_one(read_only_run: ReadOnlyRun) -> None:
    r = read_only_run
    assert r.first["before"] is False and r.first["numba_before"] is False  # checked without Numba
    assert r.first["after"] is True
    assert [x["name"] for x in r.first["loads"]] == list(KERNELS)
    assert [x["signatures"] for x in r.first["loads"]] == [1, 2, 2, 1, 1, 1]
    assert r.second["before"] is True and r.second["numba_before"] is False
    assert [x["from_cache"] for x in r.second["loads"]] == [True] * len(KERNELS)


def test_compile_kernels_covers_every_signature_the_engine_calls(read_only_run: ReadOnlyRun) -> None:
    got = read_only_run.engine_calls
    assert got["after"] == got["before"]


def test_kernels_compiled_is_false_for_another_numba_or_source(
    read_only_run: ReadOnlyRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache the read-only run filled counts for its own source and Numba only: not for an index of
    another Numba version, nor for a changed ``_jit.py`` (here a copy with one more line, whose folder
    gets a copy of the filled cache)."""
    from contextsieve.kernels import compiled

    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("CONTEXTSIEVE_CACHE", str(read_only_run.cache))
    monkeypatch.setattr(compiled, "_SOURCE", read_only_run.pkg / "kernels" / "_jit.py")
    assert compiled.kernels_compiled()
    with monkeypatch.context() as m:
        m.setattr(compiled, "_numba_version", lambda: "0.0.1")
        assert not compiled.kernels_compiled()
    numba_dir = read_only_run.cache / "numba"
    for text in (b"", b"# changed\n"):
        changed = tmp_path / ("same" if not text else "changed") / "kernels" / "_jit.py"
        changed.parent.mkdir(parents=True)
        changed.write_bytes((read_only_run.pkg / "kernels" / "_jit.py").read_bytes() + text)
        shutil.copytree(numba_dir / compiled._folder_key(compiled._SOURCE), numba_dir / compiled._folder_key(changed))
        with monkeypatch.context() as m:
            m.setattr(compiled, "_SOURCE", changed)
            assert compiled.kernels_compiled() is (not text)


# -- a read-only cache -----------------------------------------------------------------------------

WARNED = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import numpy as np
    import contextsieve.kernels.scoring as K
    n = K.GROUP_NUMBA_ROWS
    best, _ = K.group_max(np.arange(n, dtype=np.float32), np.zeros(n, np.int64), 2)
assert best.tolist() == [n - 1, -np.inf]
print(json.dumps([(type(w.message).__name__, str(w.message)) for w in caught]))
"""


def test_a_read_only_cache_loads_the_kernels_it_holds_and_writes_nothing(tmp_path: Path) -> None:
    """A cache folder filled by ``contextsieve build`` and then made read-only (an edge machine's image)
    is loaded from: no kernel is compiled, nothing is written. A read-only cache without the kernels
    compiles them in memory and warns once that every process will."""
    prefix = root_without_override()
    if os.geteuid() == 0 and not prefix:
        pytest.skip("root, and setpriv cannot drop the capabilities that let root write a read-only folder")
    tmp_path.chmod(0o755)
    home, cache, empty = tmp_path / "home", tmp_path / "cache", tmp_path / "empty"
    for folder in (cache, empty / "numba"):
        folder.mkdir(parents=True)
    env = _env(home, CONTEXTSIEVE_CACHE=str(cache))
    first = _run(LOAD_ALL, env, cwd=home)
    assert first["problem"] is None and first["after"] is True
    _set_writable(cache, False)
    _set_writable(empty, False)
    try:
        before = _tree(cache)
        second = _run(LOAD_ALL, env, cwd=home, prefix=prefix)
        assert second["problem"] is not None  # it cannot be written ...
        assert second["before"] is True  # ... and still counts as compiled
        assert [x["from_cache"] for x in second["loads"]] == [True] * len(KERNELS)
        for name, (hits, misses, _path) in second["stats"].items():
            assert misses == 0 and hits > 0, (name, hits, misses)
        quiet = _run(WARNED, env, cwd=home, prefix=prefix)
        assert quiet == []
        assert _tree(cache) == before
        warned = _run(WARNED, {**env, "CONTEXTSIEVE_CACHE": str(empty)}, cwd=home, prefix=prefix)
        assert [k for k, _ in warned] == ["CacheFolderWarning"], warned
        assert "scoring kernels" in warned[0][1] and "contextsieve build" in warned[0][1]
        assert list((empty / "numba").iterdir()) == []
    finally:
        _set_writable(cache, True)
        _set_writable(empty, True)
