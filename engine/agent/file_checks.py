"""The checks of an agent file's keys and fields, each naming the file and the place.

- What each place of an agent file may hold (the reference format's keys and contextsieve's own):
  :data:`SETTING_NAMES`, :data:`SERVER_TYPES`, :data:`INCLUDE_MODES`, :data:`FRONT_MATTER_KEYS`.
- Keys nobody reads: :func:`document_unknown_keys` / :func:`unknown_keys` word a warning for each with
  its likely meaning ("did you mean 'rules'?"); :func:`issue_warnings` issues them as
  :class:`~contextsieve.errors.AgentFileWarning` attributed to the caller outside contextsieve.
- Typed field readers (:func:`read_include`, :func:`read_mapping`, :func:`read_flag`,
  :func:`read_string`, :func:`check_server_type`) that raise :class:`AgentFileError` through
  :func:`fail`, listing the valid values with the closest one (:func:`one_of`).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from contextsieve.agent.items import IncludeMode
from contextsieve.agent.settings import LLM_SETTINGS, AgentSettings
from contextsieve.errors import AgentFileError, AgentFileWarning, brief

__all__ = [
    "SETTING_NAMES",
    "OWN_SETTINGS",
    "SERVER_TYPES",
    "INCLUDE_MODES",
    "FRONT_MATTER_KEYS",
    "MAX_LOAD_WARNINGS",
    "fail",
    "closest",
    "one_of",
    "read_include",
    "read_mapping",
    "read_flag",
    "read_string",
    "check_server_type",
    "unknown_keys",
    "document_unknown_keys",
    "issue_warnings",
]

#: agent-file setting name -> AgentSettings field, or LlmSettings field (``AgentSettings.llm``) for the
#: names in :data:`~contextsieve.agent.settings.LLM_SETTINGS`
SETTING_NAMES = {
    "contextTopK": "context_top_k",
    "contextTopN": "context_top_n",
    "contextIncludeScore": "context_include_score",
    "maxChatTurns": "max_chat_turns",
    "maxOutputTokens": "max_output_tokens",
    "temperature": "temperature",
    "topP": "top_p",
    "toolPermission": "tool_permission",
    "model": "model",
}
#: contextsieve's own settings: the AgentSettings fields the reference format lacks, the names
#: ``settings.contextsieve`` may hold (not ``llm``: its fields are reference settings).
OWN_SETTINGS = tuple(
    f.name for f in dataclasses.fields(AgentSettings) if f.name not in SETTING_NAMES.values() and f.name != "llm"
)

#: MCP server ``type`` values (the reference format's); the MCP client also takes ``transport`` for
#: ``type`` and the spellings in :data:`_SERVER_TYPE_ALIASES` for ``streamable-http``.
SERVER_TYPES = ("stdio", "streamable-http", "sse", "internal")
_SERVER_TYPE_ALIASES = ("http", "streamableHttp", "streamable_http")
#: Include modes an item, a tool or a server's ``serverToolDefaults`` may be set to.
INCLUDE_MODES = ("always", "manual", "agent")

#: Keys each place of an agent file may hold: the reference format's (``tsagent-notes.md`` §1; read
#: here or only kept, such as ``providers``, ``theme`` or ``embeddings``) and contextsieve's own
#: (``name``, ``summary``, ``settings.contextsieve``, a server's ``description`` and ``transport``, a
#: tool's ``description`` and ``inputSchema``). Any other key is kept but read by nobody: a load
#: warning (:class:`~contextsieve.errors.AgentFileWarning`) names it with its likely meaning.
_TOP_KEYS = (
    "name",
    "id",
    "metadata",
    "settings",
    "systemPrompt",
    "rules",
    "references",
    "providers",
    "mcpServers",
    "supervisors",
)
_SETTING_KEYS = (*SETTING_NAMES, "theme", "systemPath", "mostRecentModel", "contextsieve")
_METADATA_KEYS = (
    "name",
    "version",
    "description",
    "iconUrl",
    "documentationUrl",
    "provider",
    "autonomous",
    "skills",
    "tools",
    "created",
    "lastAccessed",
)
_ITEM_KEYS = ("name", "description", "priorityLevel", "text", "include", "embeddings", "summary")
FRONT_MATTER_KEYS = ("name", "description", "priorityLevel", "include", "summary", "enabled")
_SERVER_KEYS = (
    "type",
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "tool",
    "serverToolDefaults",
    "tools",
    "toolInclude",
    "toolPermissionRequired",
    "toolEmbeddings",
    "description",
    "transport",
)
_DEFAULTS_KEYS = ("permissionRequired", "include")
_TOOL_KEYS = ("permissionRequired", "include", "embeddings", "hash", "description", "inputSchema", "summary")


def fail(path: Path, where: str, why: str) -> AgentFileError:
    """The error to raise for ``path`` at ``where`` (a dotted place such as ``mcpServers.git.type``):
    ``"<path>: <where>: <why>"``."""
    return AgentFileError(f"{path}: {where}: {why}")


def closest(word: object, choices: Sequence[str]) -> str | None:
    """The choice ``word`` most likely misspells (case aside; ``difflib`` ratio >= 0.6), or ``None``."""
    lowered = {c.lower(): c for c in choices}
    got = difflib.get_close_matches(str(word).lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[got[0]] if got else None


def one_of(value: object, what: str, valid: Sequence[str]) -> str:
    """``"'stdoi' is not a server type (did you mean 'stdio'?); valid: stdio, sse"``."""
    near = closest(value, valid) if isinstance(value, str) else None
    mean = f" (did you mean {near!r}?)" if near else ""
    return f"{brief(value)} is not {what}{mean}; valid: {', '.join(valid)}"


def read_include(value: Any, path: Path, where: str) -> IncludeMode | None:
    """An include mode (``None``: not set); :class:`AgentFileError` listing the valid ones otherwise."""
    if value is None:
        return None
    if isinstance(value, str) and value in INCLUDE_MODES:
        return IncludeMode(value)
    raise fail(path, where, one_of(value, "an include mode", INCLUDE_MODES))


def check_server_type(cfg: Mapping[str, Any], path: Path, where: str) -> None:
    """A server's ``type`` (or ``transport``), when given, is one the MCP client can start."""
    for key in ("type", "transport"):
        value = cfg.get(key)
        if value is not None and not (isinstance(value, str) and value in (*SERVER_TYPES, *_SERVER_TYPE_ALIASES)):
            raise fail(path, f"{where}.{key}", one_of(value, "an MCP server type", SERVER_TYPES))


def read_mapping(value: Any, path: Path, where: str) -> dict[str, Any]:
    """A mapping field (``None`` or missing: ``{}``); :class:`AgentFileError` naming it otherwise."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail(path, where, f"must be a mapping, got {type(value).__name__}")
    return value


def read_flag(value: Any, path: Path, where: str) -> bool | None:
    """A true/false field (``None``: not set); the string ``'false'`` is an error, not True."""
    if value is None or isinstance(value, bool):
        return value
    raise fail(path, where, f"must be true or false, got {type(value).__name__} {brief(value)}")


def read_string(raw: Mapping[str, Any], key: str, path: Path, where: str, *, required: bool = False) -> str:
    """A string field of an item (``None`` or missing: ``""``, or an error when ``required``)."""
    value = raw.get(key)
    if value is None:
        if required:
            typo = [k for k in raw if isinstance(k, str) and k not in _ITEM_KEYS and closest(k, [key])]
            raise fail(
                path,
                f"{where}.{key}",
                "is required" + (f" (the item has {typo[0]!r}: did you mean {key!r}?)" if typo else ""),
            )
        return ""
    if not isinstance(value, str):
        raise fail(path, f"{where}.{key}", f"must be a string, got {type(value).__name__}")
    return value


#: What a key unknown in one place likely means, beyond a close spelling: place -> key -> hint (a key
#: of another place, a snake_case name of a reference setting, a word other formats use).
_MEANT: dict[str, dict[str, str]] = {
    "": {
        **{k: "it belongs under settings" for k in _SETTING_KEYS},
        **{k: "it belongs under metadata" for k in _METADATA_KEYS if k not in _TOP_KEYS},
        "tools": "tools belong under mcpServers.<server>.tools",
        "refs": "did you mean 'references'?",
        "instructions": "did you mean 'systemPrompt'?",
    },
    "settings": {
        **{name: "it belongs under settings.contextsieve" for name in OWN_SETTINGS},
        "llm": "the LLM settings go under settings by their own names: "
        + ", ".join(k for k, name in SETTING_NAMES.items() if name in LLM_SETTINGS),
        **{field_name: f"did you mean {key!r}?" for key, field_name in SETTING_NAMES.items() if field_name != key},
    },
    "server": {k: "it belongs under serverToolDefaults" for k in _DEFAULTS_KEYS},
}


def unknown_keys(path: Path, raw: Mapping[Any, Any], where: str, known: Sequence[str], place: str = "") -> list[str]:
    """A warning for each key of ``raw`` not in ``known``, saying what it likely means: the tail of a
    text a comma cut short in a flow mapping, what it means elsewhere (:data:`_MEANT`), the
    closest known key, or else the known keys."""
    out = []
    for key in raw:
        if key in known:
            continue
        meant = _MEANT.get(place, {}).get(key) if isinstance(key, str) else None
        near = closest(key, known)
        if raw[key] is None and isinstance(key, str) and " " in key.strip():  # `{text: a, b}` reads `b` as a key
            hint = "a key without a value: the rest of a text cut at a comma inside {...}? put the text in quotes"
        elif meant or near:
            hint = meant or f"did you mean {near!r}?"
        else:
            hint = f"known here: {', '.join(known)}"
        shown = key if isinstance(key, str) and key.isprintable() and len(key) <= 80 else brief(key)
        at = f"{where}.{shown}" if where else shown
        out.append(f"{path}: {at}: unknown key ({hint}); it is kept in the file but not read")
    return out


def document_unknown_keys(doc: Mapping[Any, Any], path: Path, legacy: bool) -> list[str]:
    """Warnings for every key of the document that nobody reads (see :data:`_TOP_KEYS`); the items of a
    legacy folder are checked where they are read (their ``.mdt`` front matter)."""
    out = unknown_keys(path, doc, "", _TOP_KEYS)
    if isinstance(doc.get("settings"), dict):
        out += unknown_keys(path, doc["settings"], "settings", _SETTING_KEYS, "settings")
    if isinstance(doc.get("metadata"), dict):
        out += unknown_keys(path, doc["metadata"], "metadata", _METADATA_KEYS)
    for kind in ("rules", "references"):
        if not legacy and isinstance(doc.get(kind), list):
            for i, item in enumerate(doc[kind]):
                if isinstance(item, dict):
                    out += unknown_keys(path, item, f"{kind}[{i}]", _ITEM_KEYS)
    servers = doc.get("mcpServers")
    for name, cfg in (servers if isinstance(servers, dict) else {}).items():
        if not isinstance(cfg, dict):
            continue
        where = f"mcpServers.{name}"
        out += unknown_keys(path, cfg, where, _SERVER_KEYS, "server")
        if isinstance(cfg.get("serverToolDefaults"), dict):
            out += unknown_keys(path, cfg["serverToolDefaults"], f"{where}.serverToolDefaults", _DEFAULTS_KEYS)
        tools = cfg.get("tools")
        for tool_name, o in (tools if isinstance(tools, dict) else {}).items():
            if isinstance(o, dict):
                out += unknown_keys(path, o, f"{where}.tools.{tool_name}", _TOOL_KEYS)
    return out


#: Most load warnings kept and issued for one file (the last says how many more there were).
MAX_LOAD_WARNINGS = 20


def issue_warnings(messages: Sequence[str]) -> None:
    """Issue each message once as an :class:`AgentFileWarning`, attributed to the first caller outside
    contextsieve (so Python's default filter shows each once per place in the caller's code)."""
    here = Path(__file__).parent.parent  # the package contextsieve (this file is in contextsieve/agent/)
    package = tuple({str(here) + os.sep, str(here.resolve()) + os.sep})
    level, frame = 2, sys._getframe(1)  # level 2: issue_warnings's caller
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    for message in dict.fromkeys(messages):
        warnings.warn(message, AgentFileWarning, stacklevel=level)
