"""Reading MCP tool results in tests: a result's JSON, and a refusal the model sees (``isError``)."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable
from typing import Any


def result(r: Any) -> dict[str, Any]:
    """The JSON of a successful tool result."""
    assert not r.is_error, r.content
    return json.loads(r.content[0].text)


async def refused(call: Awaitable[Any], match: str) -> str:
    """Await ``call``: it must come back as a tool result with ``isError`` whose text matches ``match``
    (a regular expression); returns the text (what the model reads)."""
    r = await call
    assert r.is_error, r.content
    text = r.content[0].text
    assert re.search(match, text), text
    return str(text)
