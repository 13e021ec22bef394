"""Provider-native deferred tool offers. The payloads of ``Request.anthropic`` and
``Request.openai_responses`` (both ``tools="selected"`` and ``tools="deferred"``) validate against the
SDKs' own typed parameters (pydantic over their TypedDicts, unknown keys refused), go through the real
SDK clients to an HTTP server on 127.0.0.1 unchanged, and in deferred mode keep the cached prefix
(tools and system) byte-identical across a session while each request loads its own tools."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from pydantic import TypeAdapter

from contextsieve.agent.agentfile import example_agent_path
from contextsieve.engine import Engine
from contextsieve.errors import InputError
from contextsieve.session.assembly import LOAD_CALL_ID, anthropic_tool_result, openai_tool_search_output

MESSAGES = [
    "Please open a pull request for the cart rounding fix.",
    "My parcel is late and has not moved for a week.",
    "Roll back the payments service to yesterday's version.",
    "hi",
    "Move the old invoices folder into the archive.",
]


@pytest.fixture(scope="module")
def engine(int8, tmp_path_factory: pytest.TempPathFactory) -> Engine:  # noqa: ANN001
    return Engine.from_file(example_agent_path(), embedder=int8, cache_dir=tmp_path_factory.mktemp("payloads"))


def anthropic_params() -> TypeAdapter[Any]:
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

    return TypeAdapter(MessageCreateParamsNonStreaming)


def openai_params() -> TypeAdapter[Any]:
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

    return TypeAdapter(ResponseCreateParamsNonStreaming)


def validate(adapter: TypeAdapter[Any], payload: dict[str, Any]) -> Any:
    """``adapter``'s validation of ``payload``, with every ``Iterable`` field consumed (pydantic checks
    those lazily, as they are iterated)."""

    def consume(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: consume(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)) or type(v).__name__ == "ValidatorIterator":
            return [consume(x) for x in v]
        return v

    return consume(adapter.validate_python(payload))


def known_keys(payload_a: dict[str, Any], payload_o: dict[str, Any]) -> None:
    """Every block we build uses only keys of its SDK type (pydantic ignores unknown keys of a
    TypedDict, so this is checked by name)."""
    from anthropic.types import ToolParam, ToolReferenceBlockParam, ToolResultBlockParam, ToolUseBlockParam
    from openai.types.responses import FunctionToolParam, ResponseToolSearchOutputItemParamParam, ToolSearchToolParam
    from openai.types.responses.response_input_item_param import ToolSearchCall

    def within(d: dict[str, Any], typ: Any) -> None:
        assert set(d) <= set(typ.__annotations__), (set(d) - set(typ.__annotations__), typ.__name__)

    for t in payload_a["tools"]:
        within(t, ToolParam)
    for m in payload_a["messages"]:
        for b in m["content"] if isinstance(m["content"], list) else []:
            within(b, {"tool_use": ToolUseBlockParam, "tool_result": ToolResultBlockParam}[b["type"]])
            for c in b.get("content", []) if b["type"] == "tool_result" else []:
                if c["type"] == "tool_reference":
                    within(c, ToolReferenceBlockParam)
    for t in payload_o["tools"]:
        within(t, FunctionToolParam if t["type"] == "function" else ToolSearchToolParam)
    for item in payload_o["input"]:
        if item.get("type") == "tool_search_call":
            within(item, ToolSearchCall)
        elif item.get("type") == "tool_search_output":
            within(item, ResponseToolSearchOutputItemParamParam)
            for t in item["tools"]:
                within(t, FunctionToolParam)


def test_payloads_validate_against_both_sdks_types(engine: Engine) -> None:
    s = engine.session()
    a, o = anthropic_params(), openai_params()
    for msg in MESSAGES:
        r = s.build_request(msg)
        for mode in ("selected", "deferred"):
            validate(a, {"model": "claude-test", "max_tokens": 64, **r.anthropic(tools=mode)})
            validate(o, {"model": "gpt-test", **r.openai_responses(tools=mode)})
            known_keys(r.anthropic(tools=mode), r.openai_responses(tools=mode))
    bad = r.anthropic(tools="deferred")
    bad["tools"][-1]["defer_loadin"] = True
    with pytest.raises(AssertionError):  # the check can fail: a misspelt key is caught
        known_keys(bad, r.openai_responses())
    wrong = r.anthropic(tools="deferred")
    wrong["tools"][-1]["defer_loading"] = ["not", "a", "bool"]
    from pydantic import ValidationError

    with pytest.raises(ValidationError):  # and a value of the wrong type by pydantic
        validate(a, {"model": "claude-test", "max_tokens": 64, **wrong})
    with pytest.raises(InputError):
        r.anthropic(tools="lazy")


def test_deferred_offers_keep_the_prefix_and_load_the_selected_tools(engine: Engine) -> None:
    s = engine.session()
    prefixes_a, prefixes_o, selected_a = set(), set(), set()
    for msg in MESSAGES:
        r = s.build_request(msg)
        s.record_reply(r, "ok")
        a = r.anthropic(tools="deferred")
        prefixes_a.add(json.dumps([a["tools"], a["system"]], sort_keys=False))
        selected_a.add(json.dumps(r.anthropic()["tools"]))
        names = [t["name"] for t in a["tools"]]
        assert names[0] == "search_tools" and len(names) == len(set(names)) == 1 + len(r.catalog)
        deferred = [t for t in a["tools"] if t.get("defer_loading")]
        assert all("cache_control" not in t for t in deferred)  # the API answers 400 to both on one tool
        assert [t for t in a["tools"] if "cache_control" in t] == [a["tools"][len(a["tools"]) - len(deferred) - 1]]
        assert a["system"][0]["cache_control"] == {"type": "ephemeral"}
        call, result = a["messages"][-2], a["messages"][-1]
        assert call["content"][0]["id"] == LOAD_CALL_ID and call["content"][0]["input"] == {"query": r.message}
        loaded = [b["tool_name"] for b in result["content"][0]["content"] if b["type"] == "tool_reference"]
        assert loaded == [t["name"] for t in r.tools if t["name"] not in r.always]
        assert set(loaded) <= {t["name"] for t in deferred}
        o = r.openai_responses(tools="deferred")
        prefixes_o.add(json.dumps([o["tools"], o["instructions"]]))
        assert o["input"][-2]["type"] == "tool_search_call" and o["input"][-1]["type"] == "tool_search_output"
        assert [t["name"] for t in o["input"][-1]["tools"]] == loaded
    assert len(prefixes_a) == 1 and len(prefixes_o) == 1  # byte-identical over the session
    assert len(selected_a) > 1  # what per-request selection does to the same prefix


class _Recorder(BaseHTTPRequestHandler):
    bodies: list[tuple[str, dict[str, Any]]] = []

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append((self.path, body))
        if self.path.endswith("/messages"):
            reply: dict[str, Any] = {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": "ok"}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }
        else:
            reply = {
                "id": "resp_1",
                "object": "response",
                "created_at": 0,
                "model": body["model"],
                "status": "completed",
                "output": [],
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
            }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    _Recorder.bodies = []
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Recorder.bodies
    server.shutdown()


def test_the_sdk_clients_send_the_payloads_unchanged(engine: Engine, recorder) -> None:  # noqa: ANN001
    import anthropic
    import openai

    url, bodies = recorder
    r = engine.session().build_request(MESSAGES[0])
    a = r.anthropic(tools="deferred")
    anthropic.Anthropic(api_key="test", base_url=url, max_retries=0).messages.create(
        model="claude-test", max_tokens=64, **a
    )
    o = r.openai_responses(tools="deferred")
    openai.OpenAI(api_key="test", base_url=url + "/v1", max_retries=0).responses.create(model="gpt-test", **o)
    (path_a, sent_a), (path_o, sent_o) = bodies
    assert path_a == "/v1/messages" and path_o == "/v1/responses"
    assert sent_a["tools"] == a["tools"] and sent_a["system"] == a["system"] and sent_a["messages"] == a["messages"]
    assert (
        sent_o["tools"] == o["tools"] and sent_o["input"] == o["input"] and sent_o["instructions"] == o["instructions"]
    )


def test_answering_the_models_search_call() -> None:
    """The helpers the README's loops use to answer a search call of the model."""
    block = anthropic_tool_result("toolu_1", ["github_create_pull_request"])
    assert block == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": "tool_reference", "tool_name": "github_create_pull_request"}],
    }
    assert anthropic_tool_result("toolu_2", [])["content"][0]["type"] == "text"
    out = openai_tool_search_output("call_1", [{"name": "x_y", "description": "d", "input_schema": {"type": "object"}}])
    assert out["tools"][0] == {
        "type": "function",
        "name": "x_y",
        "description": "d",
        "parameters": {"type": "object"},
        "strict": False,
    }


def test_a_stable_offer_only_grows_within_a_task(engine: Engine) -> None:
    """Issue 29, hosts without deferral: with ``OfferConfig(mode="stable")`` a tool once offered stays
    and new ones are appended, so the tools array is unchanged unless something new is needed; the
    budget drops the tools selected longest ago; ``new_task`` starts over."""
    from contextsieve import OfferConfig

    s = engine.session(offer=OfferConfig(mode="stable", budget=12))
    offers = []
    for msg in MESSAGES:
        r = s.build_request(msg)
        names = [t["name"] for t in r.tools]
        assert len(names) == len(set(names)) <= 12
        offers.append(names)
    per_request = [[t["name"] for t in engine.session().build_request(m).tools] for m in MESSAGES]
    for before, after, own in zip(offers, offers[1:], per_request[1:]):
        assert set(own) <= set(after)  # every request still offers what it selected
        kept = [n for n in before if n in after]
        assert after[: len(kept)] == kept  # what stays keeps its place: appended, never reordered
    again = s.build_request(MESSAGES[-1])
    assert [t["name"] for t in again.tools] == offers[-1]  # the same request again: the same array
    s.new_task()
    assert [t["name"] for t in s.build_request(MESSAGES[0]).tools] == per_request[0]
    with pytest.raises(InputError):
        OfferConfig(mode="sticky")
