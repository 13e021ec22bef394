"""First contact with ``contextsieve serve``, against real processes: the help and the
README say when to use ``serve`` and when ``gateway`` with the host configuration of each; HTTP binds
before it announces (a taken port is exit code 1 with a clear message, ``--port 0`` announces the port
it got); a host other machines can reach is refused without a token (exit code 2); the SDK's and
uvicorn's INFO logs stay off stderr unless ``--log-level`` asks; a request whose ``id`` is not a
string or an integer, and a batch, get the same ``-32600`` answer over stdio and over HTTP (both
protocol eras)."""

from __future__ import annotations

import json
import os
import re
import select
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from contextsieve.agent.agentfile import example_agent_path
from tests.helpers.servers import http_server

ROOT = Path(__file__).resolve().parents[2]
AGENT = str(example_agent_path())
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def _env(model_cache: Path) -> dict[str, str]:
    return {**os.environ, "CONTEXTSIEVE_CACHE": str(model_cache), "CONTEXTSIEVE_DATA": str(model_cache / "data")}


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "contextsieve", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


# -- serve or gateway ----------------------------------------------------------------------------------


def _configs(text: str) -> list[dict[str, Any]]:
    """The host configurations (``{"mcpServers": ...}`` JSON on one line) in ``text``."""
    return [json.loads(m) for m in re.findall(r'\{"mcpServers": .*\}\}\}', text)]


def test_the_help_and_the_readme_say_when_to_use_serve_and_when_gateway() -> None:
    want = [
        {"mcpServers": {"contextsieve": {"command": "contextsieve", "args": ["serve", "/path/agent.yaml"]}}},
        {"mcpServers": {"tools": {"command": "contextsieve", "args": ["gateway", "/path/agent.yaml"]}}},
    ]
    for command in ("serve", "gateway"):
        shown = _cli(command, "--help")
        assert shown.returncode == 0, shown.stderr
        assert "serve or gateway?" in shown.stdout
        assert "for a host that calls select_context itself" in shown.stdout
        assert "for a host that should just see the right tools of the agent's MCP servers" in shown.stdout
        assert _configs(shown.stdout) == want
        assert "exit codes: 0" in shown.stdout
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## MCP hosts: serve or gateway?", 1)[1].split("\n## ", 1)[0]
    assert _configs(section) == want
    assert "select_context" in section and "contextsieve gateway" in section


# -- binding, announcing, exit codes -------------------------------------------------------------------


def test_a_taken_port_is_exit_code_1_with_a_clear_message_and_nothing_announced(model_cache: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _cli(
            "serve", AGENT, "--transport", "http", "--port", str(port), "--offline", "--no-stash", env=_env(model_cache)
        )
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])  # it was 3, after "serving at ..."
    assert f"cannot listen on 127.0.0.1:{port}: the port is in use" in done.stderr
    assert "serving" not in done.stderr and "Traceback" not in done.stderr


@contextmanager
def _serving(model_cache: Path, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], str, list[str]]]:
    """A ``serve --transport http --port 0`` process (no token), its announced URL, and the stderr lines
    read up to the announcement (the list grows with :func:`_rest`)."""
    cmd = [sys.executable, "-m", "contextsieve", "serve", AGENT, "--transport", "http", "--port", "0", "--offline"]
    proc = subprocess.Popen(
        [*cmd, "--no-stash", *args], env=_env(model_cache), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while not lines or "serving MCP" not in lines[-1]:
            line = proc.stderr.readline().decode()
            assert line or proc.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "".join(lines)
            lines.append(line)
        url = lines[-1].rsplit(" at ", 1)[1].strip()
        yield proc, url, lines
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)


def _rest(proc: subprocess.Popen[bytes], lines: list[str]) -> list[str]:
    """Stop ``proc`` and return every stderr line it wrote (the ones read before and the rest)."""
    proc.terminate()
    proc.wait(timeout=30)
    assert proc.stderr is not None
    return lines + proc.stderr.read().decode().splitlines(keepends=True)


def _post(url: str, body: str | bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """POST ``body`` as JSON: (status, headers, body), 4xx answers included."""
    data = body.encode() if isinstance(body, str) else body
    head = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **(headers or {})}
    request = urllib.request.Request(url, data=data, headers=head, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _message(body: bytes) -> dict[str, Any]:
    """The JSON-RPC message of an answer: the JSON body, or the data of its one SSE event."""
    text = body.decode()
    if text.lstrip().startswith("{"):
        return dict(json.loads(text))
    data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]
    return dict(json.loads(data[-1]))


def test_port_0_announces_the_bound_port_once_it_serves_and_sdk_info_logs_stay_off_stderr(
    model_cache: Path, int8
) -> None:  # noqa: ANN001,E501
    with _serving(model_cache) as (proc, url, lines):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert port != 0 and url == f"http://127.0.0.1:{port}/mcp"  # it announced port 0 before
        status, headers, body = _post(url, json.dumps(INIT))  # at once: no retry, it listens already
        assert status == 200 and _message(body)["result"]["serverInfo"]["name"]
        session = {k.lower(): v for k, v in headers.items()}["mcp-session-id"]
        listed = _post(url, '{"jsonrpc":"2.0","id":2,"method":"tools/list"}', {"Mcp-Session-Id": session})
        assert listed[0] == 200 and _message(listed[2])["result"]["tools"]
        err = "".join(_rest(proc, lines))
    # the announcement, and none of the SDK's and uvicorn's INFO lines ("StreamableHTTP session manager
    # started", "Created new transport with session ID ...", "Uvicorn running on ...", access lines)
    assert err.count(f"contextsieve: serving MCP (streamable HTTP) at {url}\n") == 1, err
    for info in ("INFO", "StreamableHTTP", "Created new transport", "Uvicorn", "POST /mcp"):
        assert info not in err, err


def test_log_level_info_shows_the_sdk_logs(model_cache: Path, int8) -> None:  # noqa: ANN001
    with _serving(model_cache, "--log-level", "info") as (proc, url, lines):
        assert _post(url, json.dumps(INIT))[0] == 200
        err = "".join(_rest(proc, lines))
    assert "INFO mcp.server.streamable_http_manager: StreamableHTTP session manager started" in err
    assert "Created new transport with session ID" in err
    assert '"POST /mcp HTTP/1.1" 200' in err  # uvicorn's access log, one line per request


def test_a_host_other_machines_can_reach_is_refused_without_a_token(model_cache: Path, int8) -> None:  # noqa: ANN001
    env = _env(model_cache)
    for host in ("0.0.0.0", "::"):
        done = _cli(
            "serve", AGENT, "--transport", "http", "--host", host, "--port", "0", "--offline", env=env, timeout=60
        )
        assert done.returncode == 2, (host, done.returncode, done.stderr[-2000:])  # it served without a word
        assert "is reachable from other machines and no token is set: pass --token-env VAR" in done.stderr
        assert "serving" not in done.stderr
    from contextsieve.mcp_server.http_transport import check_exposure, is_loopback

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "", "nosuchhost.invalid"))
    check_exposure("0.0.0.0", "a-token")
    check_exposure("0.0.0.0", None, allow_unauthenticated=True)
    check_exposure("127.0.0.1", None)
    # with a token it serves on every interface, and asks for the token
    token_env = {**env, "CS_TEST_TOKEN": "t0ken"}
    cmd = [sys.executable, "-m", "contextsieve", "serve", AGENT, "--transport", "http", "--host", "0.0.0.0"]
    cmd += ["--port", "0", "--offline", "--no-stash", "--token-env", "CS_TEST_TOKEN"]
    proc = subprocess.Popen(cmd, env=token_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        seen = [proc.stderr.readline().decode()]
        while seen[-1] and "serving MCP" not in seen[-1]:
            seen.append(proc.stderr.readline().decode())
        line = seen[-1]
        assert "serving MCP (streamable HTTP) at http://0.0.0.0:" in line, seen
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        local = f"http://127.0.0.1:{port}/mcp"
        assert _post(local, json.dumps(INIT))[0] == 401
        assert _post(local, json.dumps(INIT), {"Authorization": "Bearer t0ken"})[0] == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_transport_is_checked_when_made_and_keeps_its_token_out_of_its_repr() -> None:
    from contextsieve.errors import InputError
    from contextsieve.mcp_server.http_transport import TransportConfig

    default = TransportConfig()
    assert (default.kind, default.host, default.port, default.token, default.allow_unauthenticated) == (
        "stdio",
        "127.0.0.1",
        8000,
        None,
        False,
    )
    with pytest.raises(InputError, match="transport must be 'stdio' or 'http', got 'tcp'"):
        TransportConfig(kind="tcp")
    with pytest.raises(InputError, match="is reachable from other machines and no token is set"):
        TransportConfig(kind="http", host="0.0.0.0")
    TransportConfig(kind="stdio", host="0.0.0.0")  # stdio listens nowhere: the host is not checked
    TransportConfig(kind="http", host="0.0.0.0", allow_unauthenticated=True)
    assert "s3cret" not in repr(TransportConfig(kind="http", host="0.0.0.0", token="s3cret"))


# -- requests that are not one MCP message: the same answer on both transports ---------------------------

BAD_ID = "Invalid request: a request's id must be a string or an integer"
BATCH = "Invalid request: JSON-RPC batches are not part of MCP; send one message per request"
BY_POSITION = "Invalid params: MCP takes a request's params by name (a JSON object), not by position (an array)"
#: (a line or body, the answer owed to it)
NOT_ONE_MESSAGE: list[tuple[str, Any]] = [
    (line, {"jsonrpc": "2.0", "id": rid, "error": {"code": -32600, "message": message}})
    for line, rid, message in [
        ('{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', None, BAD_ID),
        ('{"jsonrpc":"2.0","id":[1],"method":"ping"}', None, BAD_ID),
        ('{"jsonrpc":"2.0","id":1.5,"method":"ping"}', 1.5, BAD_ID),  # JSON-RPC: the same value
        ('{"jsonrpc":"2.0","id":true,"method":"ping"}', None, BAD_ID),
        ('{"jsonrpc":"2.0","id":null,"method":"tools/list"}', None, BAD_ID),
        ("[]", None, BATCH),
        ('{"jsonrpc":"2.0","id":"seven","method":3}', "seven", "Invalid request: not a JSON-RPC message"),
    ]
] + [  # a batch: one reply to each request in it, with its id (issue 48 item 8)
    (
        '[{"jsonrpc":"2.0","id":1,"method":"ping"}]',
        [{"jsonrpc": "2.0", "id": 1, "error": {"code": -32600, "message": BATCH}}],
    ),
    (
        '{"jsonrpc":"2.0","id":2,"method":"ping","params":[]}',
        {"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message": BY_POSITION}},
    ),
]


class _Stdio:
    """A ``serve`` process over stdio, spoken to line by line."""

    def __init__(self, model_cache: Path) -> None:
        args = [sys.executable, "-m", "contextsieve", "serve", AGENT, "--offline", "--no-stash"]
        self.proc = subprocess.Popen(
            args, env=_env(model_cache), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.pending = b""

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def reply(self, wait: float = 60.0) -> Any:
        """The next line the server writes, or None if none comes within ``wait`` seconds."""
        assert self.proc.stdout is not None
        end = time.monotonic() + wait
        while b"\n" not in self.pending:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            assert chunk, "the server exited"
            self.pending += chunk
        first, self.pending = self.pending.split(b"\n", 1)
        return json.loads(first)

    def close(self) -> str:
        """End the process (stdin closed: the host went away); its stderr."""
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        return self.proc.stderr.read().decode()


def test_an_id_that_is_no_string_or_integer_and_a_batch_are_answered_on_stdio(model_cache: Path, int8) -> None:  # noqa: ANN001
    stdio = _Stdio(model_cache)
    try:
        for line, want in NOT_ONE_MESSAGE:
            stdio.send(line)
            assert stdio.reply() == want, line  # an object id got no answer at all
        stdio.send('{"jsonrpc":"2.0","method":"ping"}')  # a notification (no id member): never answered
        stdio.send('{"jsonrpc":"2.0","id":7,"method":"ping"}')
        assert stdio.reply() == {"jsonrpc": "2.0", "id": 7, "result": {}}
    finally:
        err = stdio.close()
    assert "Traceback" not in err and "INFO" not in err, err


def test_http_answers_them_as_stdio_does_on_both_protocol_eras(model_cache: Path, int8) -> None:  # noqa: ANN001
    with http_server(model_cache, "--no-stash", token=None) as url:
        status, headers, body = _post(url, json.dumps(INIT))
        session = {k.lower(): v for k, v in headers.items()}["mcp-session-id"]
        eras = {
            "no version header": {},
            "handshake session": {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"},
            "2026-07-28": {"MCP-Protocol-Version": "2026-07-28"},
        }
        for era, head in eras.items():
            for line, want in NOT_ONE_MESSAGE:
                status, _, body = _post(url, line, head)
                # was: -32602 with pydantic's text for a batch, 202 and no answer for an object id
                assert (status, json.loads(body)) == (400, want), (era, line, status, body[:300])
        assert _post(url, '{"jsonrpc":"2.0","id":3,"method":"ping"}', eras["handshake session"])[0] == 200


# -- select_context's tools ------------------------------------------------------------------------------


def test_select_context_says_how_a_host_calls_the_tools_serve_does_not_call(model_cache: Path, int8) -> None:  # noqa: ANN001
    from mcp import Client, MCPError, StdioServerParameters

    from tests.helpers.mcp_results import result

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "contextsieve", "serve", AGENT, "--offline", "--no-stash"],
        env=_env(model_cache),
    )

    async def main() -> None:
        async with Client(params, read_timeout_seconds=120) as c:
            got = result(
                await c.call_tool("select_context", {"message": "Please open a pull request for the cart fix."})
            )
            names = [t["name"] for t in got["tools"]]
            assert names
            with pytest.raises(MCPError, match="unknown tool"):  # serve does not call them: the premise
                await c.call_tool(names[0], {})
            calling = got["calling_tools"]
            assert "contextsieve gateway" in calling["how"] and "own connection" in calling["how"]
            items = {(i["serverName"], i["name"]) for i in got["items"] if i["type"] == "tool"}
            assert set(calling["routes"]) == set(names)
            assert {(r["server"], r["tool"]) for r in calling["routes"].values()} <= items
            assert all(f"{r['server']}_{r['tool']}" == n for n, r in calling["routes"].items())

    anyio.run(main)
