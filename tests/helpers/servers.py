"""Real ``contextsieve serve --transport http`` processes for tests: started on a free port of
127.0.0.1, ready once they announce their address, ended at the end."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from contextsieve.agent.agentfile import example_agent_path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def http_server(
    model_cache: Path,
    *args: str,
    token: str | None = "t0ken-for-the-test",
    agent: Path | None = None,
    command: str = "serve",
    env: dict[str, str] | None = None,
) -> Iterator[str]:
    """A served agent (default: the bundled example, offline) with ``args`` added to ``serve``'s command
    line (``command="gateway"``: the gateway's, not offline); yields its URL (``http://127.0.0.1:PORT/mcp``).
    Caches and data live under ``model_cache`` unless ``env`` says otherwise. ``token=None``: no bearer
    token required."""
    port = free_port()
    env = {
        **os.environ,
        "CONTEXTSIEVE_CACHE": str(model_cache),
        "CONTEXTSIEVE_DATA": str(model_cache / "data"),
        **(env or {}),
        "CS_TEST_TOKEN": token or "",
    }
    cmd: Sequence[str] = [
        sys.executable,
        "-m",
        "contextsieve",
        command,
        str(agent or example_agent_path()),
        "--transport",
        "http",
        "--port",
        str(port),
        *(["--token-env", "CS_TEST_TOKEN"] if token is not None else []),
        *(["--offline"] if command == "serve" else []),
        *args,
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        assert proc.stderr is not None
        seen: list[str] = []
        deadline = time.monotonic() + 120
        while not seen or url not in seen[-1]:  # the address is announced just before it listens
            line = proc.stderr.readline().decode()
            assert line or proc.poll() is None, "".join(seen)
            assert time.monotonic() < deadline and len(seen) < 200, "".join(seen)
            seen.append(line)
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "".join(seen)
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
