"""Context items: rules, references and MCP tools, and how each is included.

An item is identified by its kind and name (and server, for tools): :class:`ItemKey`. Rules and
references carry text; tools carry a description and an input schema. Each has an include mode:

- ``always``: put into every new session (a user may remove it from one session);
- ``manual``: only when the user adds it (UI, ``@rule:name`` / ``@ref:name`` mentions);
- ``agent``: chosen per request by semantic search, for that request only.

A tool's effective mode is its own setting, else its server's default, else ``always`` (as the
reference system does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any, NamedTuple

from contextsieve.errors import InputError, brief, check_text

__all__ = ["IncludeMode", "ItemKind", "ItemKey", "Rule", "Reference", "Tool", "Item", "NAME_RE", "tool_key"]

#: Names of rules and references (the reference system enforces the same pattern).
NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")


class IncludeMode(str, Enum):
    """How an item gets into a request (see the module docstring).

    ``EXPANSION`` only marks request items pulled in by another selected item (two-pass expansion),
    and ``STASH`` stashed segments a session retrieved for a request
    (:class:`~contextsieve.selection.context.StashedEntry`); neither is a setting an item can have.
    """

    ALWAYS = "always"
    MANUAL = "manual"
    AGENT = "agent"
    EXPANSION = "expansion"
    STASH = "stash"


def include_setting(value: object, where: str) -> IncludeMode:
    """The include mode an item or server may be set to (always, manual or agent); else ValueError/InputError."""
    mode = IncludeMode(value)
    if mode in (IncludeMode.EXPANSION, IncludeMode.STASH):
        raise InputError(f"{where}: include must be always, manual or agent, not {mode.value}")
    return mode


class ItemKind(str, Enum):
    """The three kinds of context item."""

    RULE = "rule"
    REFERENCE = "reference"
    TOOL = "tool"


class ItemKey(NamedTuple):
    """Identity of an item: ``rule:<name>``, ``reference:<name>`` or ``tool:<server>:<name>``.

    A tuple, so hashing and comparing keys (done per item on every request) costs next to nothing.

    Its string form (``str(key)``, what session files, the usage log, MCP arguments, explanations and the
    inspect page carry) escapes the two characters that would make it ambiguous in each part: ``%`` is
    written ``%25`` and ``:`` is written ``%3A``. So a proxy's tool ``github:create_issue`` of server
    ``gh`` is ``tool:gh:github%3Acreate_issue``, and every key reads back as itself
    (:meth:`parse`). A key with neither character is written as it always was.
    """

    kind: ItemKind
    name: str
    server: str = ""

    def __str__(self) -> str:
        if self.kind is ItemKind.TOOL:
            return f"{self.kind.value}:{_escape(self.server)}:{_escape(self.name)}"
        return f"{self.kind.value}:{_escape(self.name)}"

    @classmethod
    def parse(cls, text: str) -> "ItemKey":
        """Inverse of ``str(key)``; :class:`InputError` for anything else."""
        if not isinstance(text, str):
            raise InputError(f"an item key must be a str, got {type(text).__name__}")
        parts = text.split(":")
        bad = f"not an item key: {brief(text)} (rule:NAME, reference:NAME or tool:SERVER:NAME; a : in a name is %3A)"
        try:
            kind = ItemKind(parts[0])
        except ValueError:
            raise InputError(bad) from None
        if kind is ItemKind.TOOL and len(parts) == 3 and parts[2]:
            return cls(kind, _unescape(parts[2]), _unescape(parts[1]))
        if kind is not ItemKind.TOOL and len(parts) == 2 and parts[1]:
            return cls(kind, _unescape(parts[1]))
        raise InputError(bad)


_ESCAPED = re.compile(r"%(25|3[Aa])")


def tool_key(tool: object) -> ItemKey | None:
    """``tool`` as :meth:`~contextsieve.agent.usage.UsageLog.forget` takes it, as a key (``None`` stays ``None``)."""
    if isinstance(tool, str):
        prefix = f"{ItemKind.TOOL.value}:"
        tool = ItemKey.parse(tool if tool.startswith(prefix) else prefix + tool)
    if tool is not None and (not isinstance(tool, ItemKey) or tool.kind is not ItemKind.TOOL):
        raise InputError(f"only tools have a history, got {brief(tool)}")
    if tool is not None:
        check_text(tool.server + tool.name, f"the tool {brief(str(tool))}")
    return tool


def _escape(part: str) -> str:
    """A key part with ``%`` and ``:`` escaped (``%25``, ``%3A``): see :class:`ItemKey`."""
    return part.replace("%", "%25").replace(":", "%3A") if ("%" in part or ":" in part) else part


def _unescape(part: str) -> str:
    """Inverse of :func:`_escape`; any other ``%`` is kept as it is (keys written before escaping)."""
    return _ESCAPED.sub(lambda m: "%" if m.group(1) == "25" else ":", part) if "%" in part else part


def _check_strings(item: object, fields: tuple[str, ...]) -> None:
    """Each field is a str of valid Unicode (no lone surrogates); :class:`InputError` naming it otherwise."""
    for f in fields:
        value = getattr(item, f)
        where = f"{type(item).__name__.lower()} {getattr(item, 'name', '')!r:.60} {f}"
        if not isinstance(value, str):
            raise InputError(f"{where} must be a str, got {type(value).__name__}")
        check_text(value, where)


def _check_common(kind: str, name: str, priority: int) -> None:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):  # fullmatch: "rule\n" is no name
        raise InputError(f"{kind} name {brief(name)} must match {NAME_RE.pattern}")
    if not isinstance(priority, int) or not 0 <= priority <= 999:
        raise InputError(f"{kind} {name!r}: priorityLevel must be an int in 0..999, got {brief(priority)}")


@dataclass(frozen=True)
class Rule:
    """A rule: an instruction sent to the model as ``"Rule: " + text``.

    Attributes:
        name: unique among rules, ``[A-Za-z0-9_-]+``.
        text: the rule (non-empty).
        description: one line on what it is for (may be empty).
        priority: ``priorityLevel`` 0-999 (default 500); sessions list items by priority, then name.
        include: include mode (default ``manual``, as in the reference system).
        summary: what the item is about, for its chunks' embedding context (contextual embeddings;
            default ``""``: none). Never sent to the model. A contextsieve field (``summary`` in the file).
        extra: fields of the agent file this library does not use, kept for round trips.
    """

    name: str
    text: str
    description: str = ""
    priority: int = 500
    include: IncludeMode = IncludeMode.MANUAL
    summary: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    kind = ItemKind.RULE

    def __post_init__(self) -> None:
        _check_common(self.kind.value, self.name, self.priority)
        _check_strings(self, ("text", "description", "summary"))
        if not self.text:
            raise InputError(f"{self.kind.value} {self.name!r}: text must not be empty")
        object.__setattr__(self, "include", include_setting(self.include, f"{self.kind.value} {self.name!r}"))

    @cached_property
    def key(self) -> ItemKey:
        return ItemKey(self.kind, self.name)


@dataclass(frozen=True)
class Reference(Rule):
    """A reference document, sent to the model as ``"Reference: " + text``. Same fields as :class:`Rule`."""

    kind = ItemKind.REFERENCE


@dataclass(frozen=True)
class Tool:
    """An MCP tool of a server.

    Attributes:
        server: the MCP server's name in the agent.
        name: the tool's name on that server.
        description: what the tool does (may be empty).
        input_schema: its JSON schema.
        include: the tool's own include mode, or ``None`` to use the server default.
        permission_required: the tool's own setting, or ``None`` for the server default.
        summary: extra embedding context for the tool (default ``""``); never sent to the model.
        cut_note: what the input limits cut from the tool as its MCP server listed it (default ``""``:
            nothing), e.g. ``"description cut from 1,048,576 to 10,000 characters (limit 10,000)"``; set by
            :func:`contextsieve.agent.file_servers.server_tools` (see
            :class:`~contextsieve.agent.tool_limits.ToolLimits`), shown by ``explain`` and the tool listing.
    """

    server: str
    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict, compare=False)
    include: IncludeMode | None = None
    permission_required: bool | None = None
    summary: str = ""
    cut_note: str = field(default="", compare=False)

    kind = ItemKind.TOOL

    def __post_init__(self) -> None:
        _check_strings(self, ("server", "name", "description", "summary", "cut_note"))
        if not self.server or not self.name:
            raise InputError(f"a tool needs a server and a name, got {self.server!r} / {self.name!r}")
        if self.include is not None:
            object.__setattr__(self, "include", include_setting(self.include, f"{self.kind.value} {self.name!r}"))

    @cached_property
    def key(self) -> ItemKey:
        return ItemKey(ItemKind.TOOL, self.name, self.server)


Item = Rule | Reference | Tool
