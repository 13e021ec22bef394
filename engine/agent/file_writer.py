"""An agent as a current-format agent file: :func:`to_document` and the YAML :func:`to_yaml` writes.

The document is built from the agent's own fields, so every edit made through the API is saved; the
document it was loaded from contributes only what this library does not know (unknown keys, settings,
item and server fields), so a round trip keeps them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import yaml

from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.file_checks import OWN_SETTINGS, SETTING_NAMES
from contextsieve.agent.file_servers import describe_tool, migrate_server
from contextsieve.agent.items import ItemKey, ItemKind, Reference, Rule
from contextsieve.agent.settings import LLM_SETTINGS, AgentSettings

__all__ = ["to_document", "to_yaml"]

_R = TypeVar("_R", Rule, Reference)


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, s: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)


def _list(dumper: yaml.SafeDumper, xs: list) -> yaml.Node:
    flow = bool(xs) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)  # vectors on one line
    return dumper.represent_sequence("tag:yaml.org,2002:seq", xs, flow_style=flow)


_Dumper.add_representer(str, _str)
_Dumper.add_representer(list, _list)


#: Top-level keys of the reference format this library reads; everything else is kept from the file.
_KNOWN_TOP = ("metadata", "settings", "systemPrompt", "rules", "references", "mcpServers")


def _settings_doc(agent: Agent, loaded: Mapping[str, Any]) -> dict[str, Any]:
    """``settings``: the agent's values for the reference's keys (written where the file had the key or
    the value is not the default; the LLM settings from ``llm``), contextsieve's own under
    ``contextsieve``, unknown keys as loaded."""
    settings, defaults = agent.settings, AgentSettings()
    out = {
        k: copy.deepcopy(v)
        for k, v in loaded.items()
        if k not in SETTING_NAMES and k not in ("mostRecentModel", "contextsieve")
    }
    for key, field_name in SETTING_NAMES.items():
        llm = field_name in LLM_SETTINGS
        v = getattr(settings.llm if llm else settings, field_name)
        if v is not None and (
            key in loaded
            or (key == "model" and "mostRecentModel" in loaded)
            or v != getattr(defaults.llm if llm else defaults, field_name)
        ):
            out[key] = v
    own = {
        name: (dict(v) if isinstance(v, Mapping) else v)
        for name in OWN_SETTINGS
        if (v := getattr(settings, name)) != getattr(defaults, name)
    }
    if own:
        out["contextsieve"] = own
    return out


def _item_doc(item: Rule, loaded: Mapping[str, Any] | None) -> dict[str, Any]:
    """A rule or reference; its unknown fields kept, except another runtime's ``embeddings`` once the
    embedded text changed (the reference system would otherwise read stale vectors)."""
    d: dict[str, Any] = {
        "name": item.name,
        "description": item.description,
        "priorityLevel": item.priority,
        "text": item.text,
        "include": item.include.value,
    }
    if item.summary:
        d["summary"] = item.summary
    extra = dict(item.extra)
    if loaded is not None and (
        loaded.get("text") != item.text or (loaded.get("description") or "") != item.description
    ):
        extra.pop("embeddings", None)
    d.update(extra)
    return d


def _server_doc(agent: Agent, server: McpServer) -> dict[str, Any]:
    """An MCP server: its connection config as loaded, its defaults and tools as the agent has them now.

    Tool entries of tools the agent never loaded (overrides for tools of a live server that was not
    listed) are kept as they were; entries of tools deleted since loading are dropped. A tool's
    ``description`` / ``inputSchema`` are written only for tools the file declares or the API added,
    never for tools that came from a catalog (the live server stays their source).
    """
    cfg = copy.deepcopy(migrate_server(dict(server.config)))
    loaded_defaults = cfg.get("serverToolDefaults")
    for key in ("serverToolDefaults", "description", "tools"):
        cfg.pop(key, None)
    defaults: dict[str, Any] = {  # unknown default fields kept as loaded
        k: v
        for k, v in (loaded_defaults if isinstance(loaded_defaults, dict) else {}).items()
        if k not in ("include", "permissionRequired")
    }
    if server.default_permission_required is not None:
        defaults["permissionRequired"] = server.default_permission_required
    if server.default_include is not None:
        defaults["include"] = server.default_include.value
    if defaults:
        cfg["serverToolDefaults"] = defaults
    if server.description:
        cfg["description"] = server.description
    loaded_tools = migrate_server(dict(server.config)).get("tools") or {}
    tools: dict[str, Any] = {}
    for name, entry in loaded_tools.items():
        tool_key = ItemKey(ItemKind.TOOL, name, server.name)
        if tool_key not in agent.loaded_keys and not agent.has(tool_key):
            tools[name] = copy.deepcopy(entry)  # an override for a tool this library never saw
    for tool in (t for t in agent.tools if t.server == server.name):
        was = loaded_tools.get(tool.name)
        entry = copy.deepcopy(was) if isinstance(was, dict) else {}
        for key in ("include", "permissionRequired", "summary"):
            entry.pop(key, None)
        if tool.include is not None:
            entry["include"] = tool.include.value
        if tool.permission_required is not None:
            entry["permissionRequired"] = tool.permission_required
        if agent.catalog.get(tool.key) != describe_tool(tool):  # declared in the file, added or edited here
            entry["description"] = tool.description
            entry.pop("inputSchema", None)
            if tool.input_schema:
                entry["inputSchema"] = copy.deepcopy(tool.input_schema)
        if tool.summary:
            entry["summary"] = tool.summary
        if entry or was is not None:
            tools[tool.name] = entry
    if tools:
        cfg["tools"] = tools
    return cfg


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _file_order(items: Sequence[_R], loaded: Any) -> list[_R]:
    """Items in the order the file listed them (the agent keeps its own sorted order), new ones after."""
    names = [r.get("name") for r in loaded if isinstance(r, dict)] if isinstance(loaded, list) else []
    rank = {name: i for i, name in enumerate(names)}
    return sorted(items, key=lambda r: rank.get(r.name, len(rank)))  # stable: new items keep the agent's order


def to_document(agent: Agent) -> dict[str, Any]:
    """The agent as a current-format document, built from the agent's own fields.

    The document it was loaded from (``agent.document``) contributes only what this library does not
    know: unknown top-level keys (``providers``, ``supervisors``, ...), unknown settings and metadata,
    unknown item and server fields. So every edit made through the API is saved: added, changed and
    deleted items and servers, settings, the name, ``autonomous`` and the system prompt.
    """
    loaded = agent.document
    meta = copy.deepcopy(agent.metadata)
    if "name" not in loaded or "name" in meta:  # the name goes where the file had it (metadata by default)
        meta["name"] = agent.name
    if agent.autonomous:
        meta["autonomous"] = True
    elif "autonomous" in (loaded.get("metadata") or {}):
        meta["autonomous"] = False  # as the file had it
    else:
        meta.pop("autonomous", None)  # the reference drops it when false
    loaded_settings = loaded.get("settings") if isinstance(loaded.get("settings"), dict) else {}
    loaded_items = {
        (kind, r.get("name")): r
        for kind in ("rules", "references")
        for r in _as_list(loaded.get(kind))
        if isinstance(r, dict)
    }
    built: dict[str, Any] = {
        "name": agent.name,
        "metadata": meta,
        "settings": _settings_doc(agent, loaded_settings or {}),
        "systemPrompt": agent.system_prompt,
        "rules": [
            _item_doc(r, loaded_items.get(("rules", r.name))) for r in _file_order(agent.rules, loaded.get("rules"))
        ],
        "references": [
            _item_doc(r, loaded_items.get(("references", r.name)))
            for r in _file_order(agent.references, loaded.get("references"))
        ],
        "mcpServers": {name: _server_doc(agent, server) for name, server in agent.servers.items()},
    }
    doc: dict[str, Any] = {}
    for key in [*loaded, *_KNOWN_TOP]:  # the file's key order, then what it lacked
        if key in doc:
            continue
        doc[key] = built[key] if key in built else copy.deepcopy(loaded[key])
    return doc


def to_yaml(agent: Agent) -> str:
    """The agent as the YAML text :func:`~contextsieve.agent.agentfile.save_agent` writes: the document
    of :func:`to_document` in its key order, multi-line texts as blocks, vectors on one line."""
    return yaml.dump(to_document(agent), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=10**9, indent=2)
