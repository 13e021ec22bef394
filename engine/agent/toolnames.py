"""The one name a model sees for each of an agent's tools, and the way back from it.

Every surface that hands tools to a model (the request payloads and their ``tool_reference`` /
``tool_search_output`` items, the gateway's tool list, the framework integrations) and every surface that
reads a name back (``Session.record_outcome``, the gateway's ``tools/call``, ``ToolSelector``) uses
:meth:`Agent.tool_names() <contextsieve.agent.agent.Agent.tool_names>`, built by :func:`tool_names`.

The naming rule (deterministic: the same tools give the same names in every session, process and
restart):

1. A tool's name is ``<server>_<tool>`` when that is a name every provider accepts
   (:data:`TOOL_NAME_PATTERN`: ASCII letters, digits, ``_`` and ``-``, 1-64 characters), is none of
   contextsieve's own tool names (:data:`RESERVED_TOOL_NAMES`), and no other tool of the agent has the
   same ``<server>_<tool>`` (servers ``a_b`` with tool ``c`` and ``a`` with tool ``b_c`` do).
2. Otherwise it is a readable part, ``<server>_<tool>`` folded to ASCII (accents dropped) with every
   run of other characters made one ``_`` and cut to 55 characters, then ``_`` and the first 8 hex
   digits of the SHA-256 of ``server + "\\0" + tool`` (UTF-8): ``com.example.weather`` /
   ``get forecast`` becomes ``com_example_weather_get_forecast_1c0a9e3b``. A name whose readable part
   is empty (a Chinese server and tool name) starts with ``tool``. Both tools of a collision take this
   form, so neither points at the other.
3. Should a name of rule 2 still equal another tool's name (a tool literally named so), it takes 12,
   then 16, ... hex digits, the tools taken in the order of their keys.

A name depends only on its own key, except in a collision of rule 1: adding a server whose tool makes
``<server>_<tool>`` ambiguous renames both tools.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping

from contextsieve.agent.items import ItemKey, ItemKind
from contextsieve.errors import InputError, UnknownItemError, brief

__all__ = ["TOOL_NAME_PATTERN", "RESERVED_TOOL_NAMES", "ToolNames", "tool_names", "valid_tool_name"]

#: What Anthropic's and OpenAI's APIs accept as a tool name (anything else fails the whole request).
TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
#: Names of contextsieve's own tools that share a tools array with an agent's tools (the deferred
#: offer's search tool, the gateway's tools): never given to an agent's tool.
RESERVED_TOOL_NAMES = frozenset({"search_tools", "set_task", "select_context"})
_MAX = 64
_OTHER = re.compile(r"[^A-Za-z0-9_-]+")
_DIGITS = (8, 12, 16, 24, 32, 48, 63)


def valid_tool_name(name: object) -> bool:
    """Whether ``name`` is a str every provider accepts as a tool name (:data:`TOOL_NAME_PATTERN`)."""
    return isinstance(name, str) and TOOL_NAME_PATTERN.fullmatch(name) is not None


def _readable(server: str, tool: str) -> str:
    folded = unicodedata.normalize("NFKD", f"{server}_{tool}").encode("ascii", "ignore").decode("ascii")
    return _OTHER.sub("_", folded).strip("_")


def _hashed(server: str, tool: str, digits: int) -> str:
    h = hashlib.sha256(f"{server}\0{tool}".encode("utf-8", "surrogatepass")).hexdigest()
    stem = _readable(server, tool)[: _MAX - 1 - digits].rstrip("_") or "tool"
    return f"{stem}_{h[: min(digits, _MAX - 1 - len(stem))]}"


class ToolNames(Mapping[str, ItemKey]):
    """The names of an agent's tools: a mapping name -> tool key, and :meth:`name` for key -> name.

    Built by :func:`tool_names`; read it through :meth:`Agent.tool_names()
    <contextsieve.agent.agent.Agent.tool_names>`, which keeps it up to date as tools change.
    """

    __slots__ = ("_by_key", "_by_name")

    def __init__(self, by_key: Mapping[ItemKey, str]) -> None:
        self._by_key = dict(by_key)
        self._by_name = {n: k for k, n in self._by_key.items()}

    def name(self, key: ItemKey) -> str:
        """The name a model sees for the tool ``key``; :class:`UnknownItemError` for a tool not here."""
        try:
            return self._by_key[key]
        except (KeyError, TypeError):
            raise UnknownItemError(f"the agent has no {brief(str(key))}") from None

    def key(self, name: str) -> ItemKey:
        """The tool a model's ``name`` means; :class:`UnknownItemError` for a name no tool has."""
        found = self._by_name.get(name) if isinstance(name, str) else None
        if found is None:
            raise UnknownItemError(f"no tool of the agent is named {brief(name)}")
        return found

    def __getitem__(self, name: str) -> ItemKey:
        return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def __repr__(self) -> str:
        return f"ToolNames({len(self)} tools)"


def tool_names(keys: Iterable[ItemKey]) -> ToolNames:
    """The names of the tools ``keys`` by the module's rule (order does not matter).

    Raises:
        InputError: a key that is not a tool's.
    """
    tools = list(dict.fromkeys(keys))
    for k in tools:
        if not isinstance(k, ItemKey) or k.kind is not ItemKind.TOOL:
            raise InputError(f"tool_names takes tool keys, got {brief(k)}")
    plain = {k: f"{k.server}_{k.name}" for k in tools}
    count = Counter(plain.values())
    names: dict[ItemKey, str] = {}
    rest: list[ItemKey] = []
    for k in tools:
        p = plain[k]
        if count[p] == 1 and p not in RESERVED_TOOL_NAMES and valid_tool_name(p):
            names[k] = p
        else:
            rest.append(k)
    taken = set(names.values()) | RESERVED_TOOL_NAMES
    for k in sorted(rest, key=lambda k: (k.server, k.name)):
        for digits in _DIGITS:
            candidate = _hashed(k.server, k.name, digits)
            if candidate not in taken:
                break
        else:  # pragma: no cover - 63 hex digits of SHA-256 equal for two keys
            raise InputError(f"no unique name for {k}")
        names[k] = candidate
        taken.add(candidate)
    return ToolNames({k: names[k] for k in tools})
