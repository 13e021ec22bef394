"""Nothing left behind, against real processes: a SIGKILL of ``contextsieve gateway``
(no handler runs) left its downstream server running when the server ignores stdin EOF and SIGTERM
(tests/data/mcp_test_server.py ``--linger``), and the server's own child with it. Now the reaper
(:mod:`contextsieve.mcp_client.reaper`) ends their process group within 3 s and exits itself; it ends
with a gateway that exits normally, signals no group it was not told of (nor one forgotten), covers a
listing (``Engine.connect``, ``contextsieve tools``) killed in the middle the same way, and a reaper that
cannot start is a warning, never an error."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX")

TEST_SERVER = Path(__file__).parents[1] / "data" / "mcp_test_server.py"
#: a process that ignores SIGTERM and stdin EOF, writes its pid to argv[1] and sleeps
STUBBORN = (
    "import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"
)


def processes() -> list[tuple[int, int, int, str, str]]:
    """(pid, parent pid, process group, state, command line) of every process (``ps``: Linux and macOS)."""
    out = subprocess.run(
        ["ps", "-A", "-ww", "-o", "pid=,ppid=,pgid=,stat=,args="], capture_output=True, text=True, check=True
    ).stdout
    rows = []
    for line in out.splitlines():
        pid, ppid, pgid, state, *args = line.split(None, 4)
        rows.append((int(pid), int(ppid), int(pgid), state, args[0] if args else ""))
    return rows


def living(pgid: int, *pids: int) -> list[int]:
    """The processes of group ``pgid`` and those of ``pids`` still alive (zombies are dead)."""
    return [p for p, _, g, state, _ in processes() if (g == pgid or p in pids) and not state.startswith("Z")]


def wait_for(path: Path, seconds: float = 90.0) -> int:
    deadline = time.monotonic() + seconds
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path.name} was not written within {seconds:g} s"
        time.sleep(0.05)
    return int(path.read_text())


def left_after(pgid: int, *pids: int, seconds: float = 3.0) -> list[int]:
    """What of ``pgid`` and ``pids`` is still alive ``seconds`` after now (or [] as soon as nothing is)."""
    deadline = time.monotonic() + seconds
    while (alive := living(pgid, *pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def end(pgid: int, *pids: int) -> None:
    """Clean up after a failed test: SIGKILL whatever of it is left."""
    for pid in living(pgid, *pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def reapers_of(parent: int) -> list[int]:
    return [p for p, pp, _, state, args in processes() if pp == parent and "reaper.py" in args and state[0] != "Z"]


@contextmanager
def gateway(tmp_path: Path, model_cache: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, int]]:
    """``contextsieve gateway`` on an agent whose one server lingers and has a child; yields the gateway
    process, the server's process group and its child's pid once the server is up (its pidfile)."""
    pidfile = tmp_path / "server.pid"
    (tmp_path / "tools.json").write_text(json.dumps([{"name": "hello", "description": "say hello"}]))
    server = {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(TEST_SERVER), str(tmp_path / "tools.json"), "--linger", str(pidfile)],
    }
    agent = tmp_path / "agent.yaml"
    agent.write_text(yaml.safe_dump({"name": "left", "systemPrompt": "You help.", "mcpServers": {"stub": server}}))
    env = {**os.environ, "CONTEXTSIEVE_CACHE": str(model_cache), "CONTEXTSIEVE_DATA": str(tmp_path / "data")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "contextsieve", "gateway", str(agent), "--timeout", "60"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    pgid = child = 0
    try:
        pgid = wait_for(pidfile)
        child = wait_for(Path(f"{pidfile}.child"))
        yield proc, pgid, child
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if pgid:
            end(pgid, child)


def test_a_sigkill_of_the_gateway_leaves_no_server_nor_its_child(tmp_path: Path, model_cache: Path) -> None:
    with gateway(tmp_path, model_cache) as (proc, pgid, child):
        assert living(pgid, child), "the server is not up"
        reapers = reapers_of(proc.pid)
        proc.kill()  # SIGKILL: no handler of the gateway runs
        proc.wait()
        left = left_after(pgid, child, *reapers)
        # was: the server and its child, both still running minutes later
        assert not left, f"left behind 3 s after the SIGKILL: {left}"


def test_the_reaper_ends_with_a_gateway_that_exits_normally(tmp_path: Path, model_cache: Path) -> None:
    with gateway(tmp_path, model_cache) as (proc, pgid, child):
        reapers = reapers_of(proc.pid)
        assert len(reapers) == 1, reapers  # one reaper for the gateway's servers
        assert proc.stdin is not None
        proc.stdin.close()  # the host went away
        proc.wait(timeout=30)
        assert not left_after(pgid, child, *reapers, seconds=5.0)


def _parent(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_the_reaper_ends_only_the_groups_it_was_told_of_and_not_forgotten(tmp_path: Path) -> None:
    """A parent starts three stubborn process groups, tells its reaper of two and forgets one of those,
    then dies of SIGKILL: the one group told of and not forgotten ends, the others live on."""
    code = f"""
import subprocess, sys, time
from contextsieve.mcp_client.reaper import Reaper
reaper = Reaper(grace=0.3)
groups = []
for name in ("told", "forgotten", "untold"):
    groups.append(subprocess.Popen([sys.executable, "-c", {STUBBORN!r}, {str(tmp_path)!r} + "/" + name],
                                   start_new_session=True).pid)
reaper.watch(groups[0]); reaper.watch(groups[1]); reaper.forget(groups[1])
print(reaper.pid, *groups, flush=True)
time.sleep(600)
"""
    parent = _parent(code)
    groups: list[int] = []
    try:
        assert parent.stdout is not None
        reaper, *groups = (int(x) for x in parent.stdout.readline().split())
        for name in ("told", "forgotten", "untold"):
            wait_for(tmp_path / name)
        parent.kill()
        parent.wait()
        assert not left_after(groups[0], reaper)
        time.sleep(0.5)
        assert living(groups[1]) and living(groups[2]), "the reaper ended a group it was not told of"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for g in groups:
            end(g)


def test_a_listing_killed_in_the_middle_leaves_nothing_behind(tmp_path: Path) -> None:
    """``Engine.connect`` and ``contextsieve tools`` list servers through the same stdio children: a
    process killed while a server is starting leaves no server behind either."""
    pidfile = tmp_path / "stuck.pid"
    code = f"""
from contextsieve.agent.agent import McpServer
from contextsieve.mcp_client.client import ListConfig, list_tools_sync
config = {{"type": "stdio", "command": {sys.executable!r}, "args": ["-c", {STUBBORN!r}, {str(pidfile)!r}]}}
list_tools_sync([McpServer(name="stuck", config=config)], ListConfig(timeout=600))
"""
    parent = _parent(code)
    pgid = 0
    try:
        pgid = wait_for(pidfile)  # a server that never answers: the listing waits for it
        parent.kill()
        parent.wait()
        assert not left_after(pgid), "the stuck server outlived its listing's process"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if pgid:
            end(pgid)


def test_a_reaper_that_cannot_start_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from contextsieve.mcp_client.reaper import Reaper

    reaper = Reaper()
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    with caplog.at_level(logging.WARNING, logger="contextsieve.mcp_client.reaper"):
        reaper.watch(12345)  # no error: the server runs without a reaper
        reaper.watch(12346)
        reaper.forget(12345)
    assert reaper.pid is None
    warned = [r for r in caplog.records if "could not start the process that ends stdio servers" in r.getMessage()]
    assert len(warned) == 1, caplog.text  # once


def test_stdio_servers_of_a_process_share_one_reaper_that_ends_with_the_last(tmp_path: Path) -> None:
    from contextsieve.mcp_client.reaper import Reaper

    reaper = Reaper()
    reaper.watch(2**22 + 1)  # group ids no process has: the reaper is only told of them
    first = reaper.pid
    reaper.watch(2**22 + 2)
    assert first is not None and reaper.pid == first
    reaper.forget(2**22 + 1)
    assert reaper.pid == first
    reaper.forget(2**22 + 2)
    assert reaper.pid is None
    deadline = time.monotonic() + 5
    while any(p == first and state[0] != "Z" for p, _, _, state, _ in processes()):
        assert time.monotonic() < deadline, "the reaper did not end when its last group was forgotten"
        time.sleep(0.05)
