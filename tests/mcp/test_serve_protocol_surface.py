"""``serve``'s MCP surface beside its tools, on both protocol eras (in memory, the SDK's client): the
capabilities it declares, the ``context`` prompt's argument errors (MCP invalid params, never an
internal error with a traceback), the resources and their unknown-URI error, a ``requestState`` the
server never issued, and state of its own for each connection of the handshake protocol."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client, MCPError
from mcp.types import INVALID_PARAMS

from contextsieve.agent.agentfile import example_agent_path
from contextsieve.engine import Engine
from contextsieve.mcp_server.server import build_server
from tests.helpers.mcp_results import result


@pytest.fixture(scope="module")
def engine(int8, tmp_path_factory: pytest.TempPathFactory) -> Engine:  # noqa: ANN001
    return Engine.from_file(example_agent_path(), embedder=int8, cache_dir=tmp_path_factory.mktemp("surface"))


async def _invalid(call: object, match: str) -> None:
    with pytest.raises(MCPError) as bad:
        await call  # type: ignore[misc]
    assert bad.value.error.code == INVALID_PARAMS and match in bad.value.error.message, bad.value.error


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_declared_capabilities_on_each_era(engine: Engine, mode: str) -> None:
    """Tools, prompts, resources and logging; on 2026-07-28 the lists' changes are announced on
    ``subscriptions/listen`` (served), on the handshake protocol nothing is announced."""

    async def main() -> None:
        async with Client(build_server(engine), mode=mode) as c:
            caps = c.server_capabilities
            changes = mode == "auto"
            assert caps.tools is not None and bool(caps.tools.list_changed) is changes
            assert caps.prompts is not None and bool(caps.prompts.list_changed) is changes
            assert caps.resources is not None and bool(caps.resources.subscribe) is changes
            assert caps.logging is not None and caps.completions is None
            assert c.server_info is not None and c.server_info.name == f"contextsieve ({engine.agent.name})"
            assert c.instructions is not None and "select_context" in c.instructions

    anyio.run(main)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_prompt_arguments_resources_and_request_state_are_checked_as_invalid_params(
    engine: Engine, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``context`` prompt without its message, or with an argument it does not take, was error code 0
    (handshake) or -32603 (2026-07-28) with a traceback in the log. A ``requestState`` this server never
    issued (it asks for no input) is refused, as the SDK's high-level server refused it."""

    async def main() -> None:
        async with Client(build_server(engine), mode=mode) as c:
            await _invalid(c.get_prompt("context"), "needs the argument message")
            await _invalid(c.get_prompt("context", {"other": "x"}), "unknown argument 'other'")
            await _invalid(c.get_prompt("context", {"message": "hi", "extra": "y"}), "unknown argument 'extra'")
            await _invalid(c.get_prompt("nope", {"message": "hi"}), "unknown prompt 'nope'")
            got = await c.get_prompt("context", {"message": "My parcel is late."})
            assert got.messages[0].role == "user" and "Rule " in got.messages[0].content.text  # type: ignore[union-attr]
            listed = (await c.list_resources()).resources
            assert [r.uri for r in listed][:1] == [f"contextsieve://rule/{engine.agent.rules[0].name}"]
            assert {r.mime_type for r in listed} == {"text/markdown"}
            assert (await c.list_resource_templates()).resource_templates == []
            await _invalid(c.read_resource("contextsieve://rule/nope"), "Unknown resource: contextsieve://rule/nope")
            forged = c.call_tool("select_context", {"message": "hi"}, request_state="not issued here")
            await _invalid(forged, "Invalid or expired requestState")

    anyio.run(main)
    assert "Traceback" not in caplog.text


def test_each_connection_of_the_handshake_protocol_has_its_own_session(engine: Engine) -> None:
    """One server, two in-memory connections after another and one beside them: each keeps one session
    across its calls (its state is per connection, from the server's lifespan) and no two share one."""
    server = build_server(engine)

    async def handles(c: Client) -> list[str]:
        return [result(await c.call_tool("select_context", {"message": "hello"}))["session"] for _ in range(2)]

    async def main() -> None:
        async with Client(server, mode="legacy") as a, Client(server, mode="legacy") as b:
            ha, hb = await handles(a), await handles(b)
        async with Client(server, mode="legacy") as later:
            hl = await handles(later)
        assert ha[0] == ha[1] and hb[0] == hb[1] and hl[0] == hl[1]
        assert len({ha[0], hb[0], hl[0]}) == 3

    anyio.run(main)
