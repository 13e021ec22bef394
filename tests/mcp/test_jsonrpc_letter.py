"""JSON-RPC by the letter, against real ``serve`` and ``gateway`` processes over stdio,
raw lines in and raw lines out: every request whose ``id`` can be read gets that ``id`` back. A request
with params by position (an array) was answered as a batch with ``id: null`` by both, so the host
waited for its own timeout; it is ``-32602`` for its ``id`` now. A notification with params by position
got a ``null`` error (a notification is never answered); a batch got one ``null`` error (JSON-RPC
answers a batch with an array: one reply per request, with its ``id``); a fractional ``id`` got ``null``
(JSON-RPC: the same value). Well-formed traffic is answered as before."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from contextsieve.agent.agentfile import example_agent_path

TEST_SERVER = Path(__file__).parents[1] / "data" / "mcp_test_server.py"
BATCH = "Invalid request: JSON-RPC batches are not part of MCP; send one message per request"
BAD_ID = "Invalid request: a request's id must be a string or an integer"
NOT_A_MESSAGE = "Invalid request: not a JSON-RPC message"
BY_POSITION = "Invalid params: MCP takes a request's params by name (a JSON object), not by position (an array)"


def _error(rid: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


#: (a line, the answer owed to it: None for none at all)
LINES: list[tuple[str, Any]] = [
    # the request, and by position on other methods and with a string id
    ('{"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": [1, 2]}', _error(21, -32602, BY_POSITION)),
    ('{"jsonrpc":"2.0","id":"p","method":"tools/list","params":[]}', _error("p", -32602, BY_POSITION)),
    ('{"jsonrpc":"2.0","id":22,"method":"ping","params":["x"]}', _error(22, -32602, BY_POSITION)),
    # params that are no structured value: an invalid request object, answered with its id
    ('{"jsonrpc":"2.0","id":23,"method":"tools/call","params":"x"}', _error(23, -32600, NOT_A_MESSAGE)),
    ('{"jsonrpc":"2.0","id":24,"method":"tools/call","params":3}', _error(24, -32600, NOT_A_MESSAGE)),
    ('{"jsonrpc":"2.0","id":25,"method":"tools/list","params":true}', _error(25, -32600, NOT_A_MESSAGE)),
    # params null: read as no params, as the SDK reads it
    ('{"jsonrpc":"2.0","id":26,"method":"ping","params":null}', {"jsonrpc": "2.0", "id": 26, "result": {}}),
    # ids of other types: the same value when JSON-RPC allows it (a number), else null
    ('{"jsonrpc":"2.0","id":1.5,"method":"ping"}', _error(1.5, -32600, BAD_ID)),
    ('{"jsonrpc":"2.0","id":{"a":1},"method":"ping","params":[1]}', _error(None, -32600, BAD_ID)),
    ('{"jsonrpc":"2.0","id":true,"method":"ping"}', _error(None, -32600, BAD_ID)),
    # a notification is never answered, whatever its params
    ('{"jsonrpc":"2.0","method":"notifications/cancelled","params":[21]}', None),
    # a batch: an array of replies, one per request with its id, none for its notifications
    (
        '[{"jsonrpc":"2.0","id":27,"method":"tools/call","params":[1,2]},{"jsonrpc":"2.0","method":"x/y"},'
        '{"jsonrpc":"2.0","id":"b","method":"ping"},5]',
        [_error(27, -32600, BATCH), _error("b", -32600, BATCH), _error(None, -32600, BATCH)],
    ),
    ('[{"jsonrpc":"2.0","method":"x/y","params":[1]},{"jsonrpc":"2.0","method":"x/z"}]', None),
    ("[]", _error(None, -32600, BATCH)),
]
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


class Wire:
    """A process spoken to over stdio, a raw line at a time."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "contextsieve", *args],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.pending = b""

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def line(self, wait: float) -> str | None:
        """The next line written to stdout that is not a notification of the server's own (the gateway
        announces changes of its offer at any time), or None when none comes within ``wait`` seconds."""
        assert self.proc.stdout is not None
        end = time.monotonic() + wait
        while True:
            while b"\n" not in self.pending:
                ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, end - time.monotonic()))
                if not ready:
                    return None
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                assert chunk, "the process exited"
                self.pending += chunk
            first, self.pending = self.pending.split(b"\n", 1)
            message = json.loads(first)
            if not (isinstance(message, dict) and "method" in message and "id" not in message):
                return first.decode()

    def ask(self, line: str, wait: float = 120.0) -> Any:
        self.send(line)
        got = self.line(wait)
        assert got is not None, f"no answer to {line}"
        return json.loads(got)

    def close(self) -> str:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        return self.proc.stderr.read().decode()


def _env(model_cache: Path, data: Path) -> dict[str, str]:
    return {**os.environ, "CONTEXTSIEVE_CACHE": str(model_cache), "CONTEXTSIEVE_DATA": str(data)}


def _gateway_agent(folder: Path) -> Path:
    tools = folder / "tools.json"
    tools.write_text(json.dumps([{"name": "hello", "description": "say hello"}]))
    server = {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(TEST_SERVER), str(tools)],
        "serverToolDefaults": {"include": "always"},
    }
    path = folder / "agent.yaml"
    path.write_text(yaml.safe_dump({"name": "letter", "systemPrompt": "You help.", "mcpServers": {"t": server}}))
    return path


@pytest.mark.parametrize("command", ["serve", "gateway"])
def test_every_request_gets_its_own_id_back_and_notifications_none(
    command: str,
    tmp_path: Path,
    model_cache: Path,
    int8: Any,  # noqa: ARG001 - builds the model in model_cache for the CLI
) -> None:
    if command == "serve":
        args = ["serve", str(example_agent_path()), "--offline", "--no-stash"]
    else:
        args = ["gateway", str(_gateway_agent(tmp_path)), "--timeout", "60"]
    wire = Wire(args, _env(model_cache, tmp_path / "data"))
    try:
        assert wire.ask(json.dumps(INIT))["result"]["serverInfo"]["name"]
        wire.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        for n, (line, want) in enumerate(LINES):
            wire.send(line)
            if want is not None:
                got = wire.line(60)
                assert got is not None, f"{command}: no answer to {line}"
                assert json.loads(got) == want, (command, line)
            # nothing else was written for the line: the next answer is the next request's
            ping = {"jsonrpc": "2.0", "id": f"after-{n}", "method": "ping"}
            assert wire.ask(json.dumps(ping), 60) == {"jsonrpc": "2.0", "id": f"after-{n}", "result": {}}, line
        # well-formed traffic as before
        listed = wire.ask('{"jsonrpc":"2.0","id":30,"method":"tools/list","params":{}}')
        assert listed["id"] == 30 and listed["result"]["tools"]
        if command == "serve":
            call = {"name": "select_context", "arguments": {"message": "Where is my order?"}}
        else:
            call = {"name": "t_hello", "arguments": {"x": 1}}
        done = wire.ask(json.dumps({"jsonrpc": "2.0", "id": 31, "method": "tools/call", "params": call}))
        assert done["id"] == 31 and not done["result"].get("isError"), done
        if command == "gateway":
            assert json.loads(done["result"]["content"][0]["text"]) == {"tool": "hello", "x": 1}
    finally:
        err = wire.close()
    assert "Traceback" not in err, err


def test_http_answers_the_same_and_accepts_a_notification_by_position(model_cache: Path, int8: Any) -> None:  # noqa: ARG001
    """``serve --transport http`` refuses as stdio does (one refusal for both): ``400`` with the reply
    for a request, ``202`` and no body when nothing is owed."""
    import urllib.error
    import urllib.request

    from tests.helpers.servers import http_server

    def post(url: str, body: str) -> tuple[int, bytes]:
        head = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",  # stateless: a request needs no session first
        }
        request = urllib.request.Request(url, data=body.encode(), headers=head, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=60) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    with http_server(model_cache, "--no-stash", token=None) as url:
        for line, want in LINES:
            status, body = post(url, line)
            if want is None:
                assert (status, body) == (202, b""), line
            elif line.endswith('"params":null}'):  # a message: the SDK answers it (2026-07-28: it lacks _meta)
                assert json.loads(body)["id"] == 26, (line, status, body[:300])
            else:
                assert (status, json.loads(body)) == (400, want), line
