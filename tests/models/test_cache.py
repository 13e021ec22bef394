"""The built-model cache: verified loads, tamper refusal, rebuild on request, reuse across processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from contextsieve import Embedder
from contextsieve.errors import ModelCacheError
from contextsieve.fileio import atomic_write_bytes
from contextsieve.models.cache import CACHE_ENV, ModelCache, default_cache_dir


@pytest.fixture()
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def test_second_load_uses_the_cache(cache: Path) -> None:
    first = Embedder(variant="int8", cache_dir=cache)
    second = Embedder(variant="int8", cache_dir=cache)
    assert first.info.built and not second.info.built
    assert first.info.onnx_path == second.info.onnx_path
    texts = ["cache me", "twice"]
    np.testing.assert_array_equal(first.embed(texts), second.embed(texts))


def test_second_process_does_not_rebuild(cache: Path) -> None:
    Embedder(variant="int8", cache_dir=cache)
    code = "import sys; from contextsieve import Embedder; e = Embedder(variant='int8'); print(int(e.info.built))"
    env = {**os.environ, CACHE_ENV: str(cache)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"


def test_tampered_file_is_refused_then_rebuilt_on_request(cache: Path) -> None:
    e = Embedder(variant="int8", cache_dir=cache)
    path = e.info.onnx_path
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ModelCacheError, match="tampered"):
        Embedder(variant="int8", cache_dir=cache)
    fixed = Embedder(variant="int8", cache_dir=cache, rebuild=True)
    assert fixed.info.built
    assert not Embedder(variant="int8", cache_dir=cache).info.built
    assert len(list((cache / "models").glob("*.onnx"))) == 1


def test_truncated_file_is_refused(cache: Path) -> None:
    e = Embedder(variant="int8", cache_dir=cache)
    e.info.onnx_path.write_bytes(e.info.onnx_path.read_bytes()[:1000])
    with pytest.raises(ModelCacheError):
        Embedder(variant="int8", cache_dir=cache)


def test_a_fifo_in_place_of_the_cached_graph_is_refused_without_hanging(cache: Path) -> None:
    e = Embedder(variant="int8", cache_dir=cache)
    path = e.info.onnx_path
    path.unlink()
    os.mkfifo(path)  # reading it would block forever
    with pytest.raises(ModelCacheError, match="not a regular file"):
        Embedder(variant="int8", cache_dir=cache)


def test_corrupt_entry_is_refused(cache: Path) -> None:
    Embedder(variant="int8", cache_dir=cache)
    entry = next((cache / "models").glob("*.json"))
    entry.write_text("{not json")
    with pytest.raises(ModelCacheError, match="unreadable"):
        Embedder(variant="int8", cache_dir=cache)


def test_no_temp_files_left(cache: Path) -> None:
    Embedder(variant="int8", cache_dir=cache)
    assert not [p for p in cache.rglob("*") if p.name.endswith(".tmp")]
    entry = json.loads(next((cache / "models").glob("*.json")).read_text())
    assert {"onnx", "onnx_sha256", "weights_sha256", "builder", "variant"} <= set(entry)


def test_weights_hash_memo_follows_the_file(tmp_path: Path) -> None:
    mc = ModelCache(tmp_path / "c")
    w = tmp_path / "w.bin"
    w.write_bytes(b"a" * 100)
    h1 = mc.weights_sha256(w)
    assert mc.weights_sha256(w) == h1
    w.write_bytes(b"b" * 101)
    assert mc.weights_sha256(w) != h1


def test_atomic_write_replaces_whole_file(tmp_path: Path) -> None:
    p = tmp_path / "x" / "f.bin"
    atomic_write_bytes(p, b"one")
    atomic_write_bytes(p, b"two")
    assert p.read_bytes() == b"two"
    assert os.listdir(p.parent) == ["f.bin"]


def test_cache_dir_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "env-cache"))
    assert default_cache_dir() == tmp_path / "env-cache"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "contextsieve"


def test_writes_keep_the_mode_handle_links_and_clear_stale_temps(tmp_path) -> None:  # noqa: ANN001
    """Failed before (issue 10 item 6): 0664 became 0600, a link was replaced by a regular file (user
    files) or written through (caches), and a killed writer's temp file stayed forever."""
    import os
    import time

    from contextsieve.fileio import STALE_TEMP_SECONDS, atomic_write_bytes

    target = tmp_path / "agent.yaml"
    target.write_text("old")
    os.chmod(target, 0o664)
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new" and (target.stat().st_mode & 0o777) == 0o664
    real = tmp_path / "real.yaml"
    real.write_text("old")
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    atomic_write_bytes(link, b"through")  # a user's file: written through the link
    assert link.is_symlink() and real.read_bytes() == b"through"
    atomic_write_bytes(link, b"cache", follow_symlinks=False)  # a cache: the link is replaced
    assert not link.is_symlink() and link.read_bytes() == b"cache" and real.read_bytes() == b"through"
    stale = tmp_path / ".agent.yaml.abc123.tmp"
    young = tmp_path / ".agent.yaml.def456.tmp"
    stale.write_bytes(b"x" * 100)
    young.write_bytes(b"y")
    old = time.time() - STALE_TEMP_SECONDS - 5
    os.utime(stale, (old, old))
    atomic_write_bytes(target, b"newer")
    assert not stale.exists() and young.exists() and target.read_bytes() == b"newer"


def test_a_cache_entry_cannot_point_outside_the_cache(tmp_path) -> None:  # noqa: ANN001
    """Failed before (issue 10 item 9): the entry's onnx path was joined as given, '../x' included."""
    import json

    from contextsieve.errors import ModelCacheError
    from contextsieve.models.cache import ModelCache

    outside = tmp_path / "elsewhere.onnx"
    outside.write_bytes(b"not yours")
    cache = ModelCache(tmp_path / "cache")
    entry = cache.entry_path("m", {"k": "v"})
    entry.parent.mkdir(parents=True)
    for name in ("../../elsewhere.onnx", str(outside), "sub/x.onnx", "x.txt"):
        entry.write_text(json.dumps({"onnx": name, "onnx_sha256": "0" * 64}))
        with pytest.raises(ModelCacheError, match="not a .onnx file of its folder"):
            cache.load(entry)


def test_concurrent_processes_build_once(cache: Path) -> None:
    """Three processes missing the cache at once: one builds under the lock, the others load its file."""
    code = (
        "import sys, time; from contextsieve import Embedder\n"
        "time.sleep(max(0.0, float(sys.argv[1]) - time.time()))\n"
        "e = Embedder(variant='int8'); print(int(e.info.built), e.info.onnx_path.name)"
    )
    env = {**os.environ, CACHE_ENV: str(cache)}
    import time

    start = str(time.time() + 3.0)  # all three past their imports before any looks at the cache
    procs = [
        subprocess.Popen([sys.executable, "-c", code, start], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-500:] for o in outs]
    rows = [o[0].decode().split() for o in outs]
    assert sorted(r[0] for r in rows) == ["0", "0", "1"], rows
    assert len({r[1] for r in rows}) == 1


def test_build_lock_times_out_with_a_typed_error(cache: Path) -> None:
    mc = ModelCache(cache)
    entry = mc.entry_path("m", {"k": "v"})
    code = (
        "import sys, time; from pathlib import Path; from contextsieve.models.cache import ModelCache\n"
        "with ModelCache(Path(sys.argv[1])).build_lock(Path(sys.argv[2])):\n"
        "    print('locked', flush=True); time.sleep(30)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(cache), str(entry)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(ModelCacheError, match="another process has been building"):
            with mc.build_lock(entry, timeout=0.3):
                pass
    finally:
        holder.kill()
        holder.wait()
    with mc.build_lock(entry, timeout=5):  # released when its holder died
        pass


def test_a_killed_writers_temp_file_goes_at_the_next_write(tmp_path) -> None:  # noqa: ANN001
    """A temp file of a process that is gone is removed at once; one of a live process is kept."""
    import os
    import signal

    from contextsieve.fileio import _HOST, atomic_write_bytes

    target = tmp_path / "s.json"
    code = (
        "import os, sys, time\n"
        "from contextsieve.fileio import _HOST\n"
        "p = os.path.join(sys.argv[1], f'.s.json.{_HOST}-{os.getpid()}-zz.tmp')\n"
        "open(p, 'wb').write(b'half'); print(p, flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    left = Path(child.stdout.readline().strip())
    live = tmp_path / f".s.json.{_HOST}-{os.getpid()}-mine.tmp"
    live.write_bytes(b"mine")
    atomic_write_bytes(target, b"1")
    assert left.exists() and live.exists()  # its writer still runs; ours is ours
    child.send_signal(signal.SIGKILL)
    child.wait()
    atomic_write_bytes(target, b"2")
    assert not left.exists() and live.exists() and target.read_bytes() == b"2"
