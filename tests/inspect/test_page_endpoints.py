"""The inspect page's endpoints as named units, called without a server: each method answers JSON-ready
data for its request or raises the HTTP error the page shows, and :func:`json_endpoint` turns every
error into a JSON ``{"error": ...}`` response with the page's headers, never a traceback."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from contextsieve import Engine, example_agent_path
from contextsieve.errors import InputError
from contextsieve.inspect.app import PageEndpoints, _HttpError, json_endpoint
from contextsieve.inspect.inspector import Inspector
from tests.helpers.fake_embedder import FakeEmbedder

pytest.importorskip("starlette")
from starlette.requests import Request  # noqa: E402


def request(body: bytes, content_type: str = "application/json") -> Request:
    """A POST request carrying ``body``, as Starlette hands it to an endpoint."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    return Request({"type": "http", "method": "POST", "path": "/api/select", "headers": headers}, receive)


@pytest.fixture()
def endpoints() -> PageEndpoints:
    engine = Engine.from_file(example_agent_path(), embedder=FakeEmbedder(), cache_dir=False)
    return PageEndpoints(Inspector(engine), max_body_bytes=200)


def test_select_answers_a_turn_for_the_message(endpoints: PageEndpoints) -> None:
    turn = anyio.run(endpoints.select, request(b'{"message": "open a pull request for the fix"}'))
    assert json.loads(json.dumps(turn))  # JSON-ready
    assert "pull request" in json.dumps(turn)


@pytest.mark.parametrize(
    ("body", "kind", "status", "says"),
    [
        (b"[1, 2]", "application/json", 400, "must be a JSON object"),
        (b"{}", "application/json", 400, 'has no "message"'),
        (b"{nope", "application/json", 400, "not valid JSON"),
        (b'{"message": "x"}', "text/plain", 415, "application/json"),
        (b'{"message": "' + b"x" * 300 + b'"}', "application/json", 413, "over 200 bytes"),
    ],
)
def test_select_refuses_a_bad_body_with_the_status_the_page_shows(
    endpoints: PageEndpoints, body: bytes, kind: str, status: int, says: str
) -> None:
    with pytest.raises(_HttpError) as e:
        anyio.run(endpoints.select, request(body, kind))
    assert e.value.status == status and says in e.value.message


@pytest.mark.parametrize(
    ("error", "status", "says"),
    [
        (_HttpError(413, "too big"), 413, "too big"),
        (InputError("the message is empty"), 400, "the message is empty"),
        (RuntimeError("boom"), 500, "internal error (RuntimeError)"),
    ],
)
def test_every_error_becomes_a_json_answer_with_the_page_headers(error: Exception, status: int, says: str) -> None:
    async def fails(request: Any) -> Any:
        raise error

    response = anyio.run(json_endpoint(fails), request(b"{}"))
    assert response.status_code == status
    assert says in json.loads(response.body)["error"]
    assert response.headers["x-content-type-options"] == "nosniff"
