"""An agent file's MCP servers and their tools.

:func:`servers_and_tools` reads ``mcpServers`` (legacy tool settings migrated by
:func:`migrate_server`); :func:`server_tools` makes a server's tools from a listing (a catalog or a
live ``tools/list``, held to :class:`~contextsieve.agent.tool_limits.ToolLimits`) with the file's
overrides applied, plus the tools the file itself describes.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from contextsieve.agent.agent import McpServer
from contextsieve.agent.file_checks import (
    check_server_type,
    fail,
    read_flag,
    read_include,
    read_mapping,
    read_string,
)
from contextsieve.agent.items import ItemKey, Tool
from contextsieve.agent.tool_limits import ToolLimits, limit_tool
from contextsieve.errors import AgentFileError, ContextSieveError, InputError, brief

__all__ = ["check_catalog", "server_tools", "servers_and_tools", "migrate_server", "describe_tool"]

#: The shape of a tool catalog, as its errors say it.
CATALOG_SHAPE = '{"SERVER": [{"name": "TOOL", "description": "...", "inputSchema": {...}}, ...], ...}'


def check_catalog(catalog: object, what: str = "tools") -> None:
    """:class:`InputError` starting with ``what`` unless ``catalog`` is a tool catalog: a mapping of each
    server's name to its MCP ``tools/list`` entries (objects with a ``name``), :data:`CATALOG_SHAPE`."""
    if not isinstance(catalog, Mapping):
        raise InputError(f"{what} must be an object {CATALOG_SHAPE}, got {brief(catalog)}")
    for server, listed in catalog.items():
        if not isinstance(server, str):
            raise InputError(f"{what}: a server's name must be a string, got {brief(server)}")
        if not isinstance(listed, (list, tuple)):
            raise InputError(f"{what}: server {brief(server)} must map to a list of tools, got {brief(listed)}")
        for i, entry in enumerate(listed):
            if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not entry["name"]:
                raise InputError(
                    f"{what}: tool {i} of server {brief(server)} must be an object with a non-empty string "
                    f'"name" (an MCP tools/list entry), got {brief(entry)}'
                )


def servers_and_tools(
    raw: Any, path: Path, catalog: Mapping[str, list[dict[str, Any]]] | None
) -> tuple[dict[str, McpServer], list[Tool], dict[ItemKey, tuple[str, str]]]:
    """An agent file's ``mcpServers`` (``raw``; ``None``: none): its servers, their tools (the ``catalog``'s
    listing of each server with the file's overrides, :func:`server_tools`) and what the catalog said of
    the listed ones. :class:`AgentFileError` names the field of a malformed server, :class:`InputError`
    what is wrong with a ``catalog`` of another shape (:func:`check_catalog`)."""
    if catalog is not None:
        check_catalog(catalog)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise fail(path, "mcpServers", "must be a mapping")
    servers: dict[str, McpServer] = {}
    tools: list[Tool] = []
    from_catalog: dict[ItemKey, tuple[str, str]] = {}
    for name, cfg in raw.items():
        where = f"mcpServers.{name}"
        if not isinstance(cfg, dict):
            raise fail(path, where, "must be a mapping")
        try:
            cfg = migrate_server(cfg)
        except (AttributeError, TypeError) as e:
            raise fail(path, where, f"legacy tool settings are malformed: {e}") from e
        check_server_type(cfg, path, where)
        defaults = read_mapping(cfg.get("serverToolDefaults"), path, f"{where}.serverToolDefaults")
        servers[name] = McpServer(
            name,
            cfg,
            read_include(defaults.get("include") or None, path, f"{where}.serverToolDefaults.include"),
            read_flag(defaults.get("permissionRequired"), path, f"{where}.serverToolDefaults.permissionRequired"),
            read_string(cfg, "description", path, where),
        )
        got, described = server_tools(servers[name], (catalog or {}).get(name, []), path)
        tools += got
        from_catalog.update(described)
    return servers, tools, from_catalog


def server_tools(
    server: McpServer,
    listed: Sequence[Any],
    path: Path = Path("<tools>"),
    limits: ToolLimits = ToolLimits(),
) -> tuple[list[Tool], dict[ItemKey, tuple[str, str]]]:
    """The tools of ``server``: the ``listed`` MCP ``tools/list`` entries (a catalog or a live listing)
    with the agent file's overrides of that server applied (``include``, ``permissionRequired``,
    ``summary``), plus the tools the file itself describes (a ``description`` in the override) that
    are not listed. Returns the tools and, for the listed ones, what the listing said of them.

    Every listed tool is held to ``limits`` (:class:`ToolLimits`: descriptions over 10,000 characters
    and schemas over 24,000 by default are cut, and the tool's ``cut_note`` says so); the tools the
    file describes are not.

    Raises :class:`AgentFileError` naming the field for malformed overrides or entries.
    """
    cfg, name = server.config, server.name
    where = f"mcpServers.{name}"
    overrides = read_mapping(cfg.get("tools"), path, f"{where}.tools")
    for tool_name, o in overrides.items():  # every override, also of tools not listed now
        tw = f"{where}.tools.{tool_name}"
        read_mapping(o, path, tw)  # `t1: agent` is no settings mapping
        read_flag((o or {}).get("permissionRequired"), path, f"{tw}.permissionRequired")
        read_include((o or {}).get("include"), path, f"{tw}.include")
    listed_by_name = {t["name"]: t for t in listed if isinstance(t, dict) and isinstance(t.get("name"), str)}
    declared: set[str] = set()
    for tool_name, o in overrides.items():
        if isinstance(o, dict) and "description" in o and tool_name not in listed_by_name:
            listed_by_name[tool_name] = {
                "name": tool_name,
                "description": o["description"],
                "inputSchema": o.get("inputSchema", {}),
            }
            declared.add(tool_name)
    tools: list[Tool] = []
    from_catalog: dict[ItemKey, tuple[str, str]] = {}
    for tool_name, t in listed_by_name.items():
        o = overrides.get(tool_name) or {}
        tw = f"{where}.tools.{tool_name}"
        try:
            description = t.get("description") or ""
            schema = read_mapping(t.get("inputSchema"), path, f"{tw}.inputSchema")
            note = ""
            if tool_name not in declared and isinstance(description, str):
                description, schema, note = limit_tool(description, schema, limits)
            tool = Tool(
                name,
                tool_name,
                description,
                schema,
                read_include(o.get("include"), path, f"{tw}.include"),
                read_flag(o.get("permissionRequired"), path, f"{tw}.permissionRequired"),
                read_string(o, "summary", path, tw),
                note,
            )
        except AgentFileError:
            raise  # names the file and the field already
        except (ContextSieveError, ValueError) as e:
            raise fail(path, tw, str(e)) from e
        tools.append(tool)
        if tool_name not in declared:
            from_catalog[tool.key] = describe_tool(tool)
    return tools, from_catalog


def migrate_server(cfg: dict[str, Any]) -> dict[str, Any]:
    """Legacy ``toolInclude`` / ``toolPermissionRequired`` / ``toolEmbeddings`` -> the current fields."""
    if not any(k in cfg for k in ("toolInclude", "toolPermissionRequired", "toolEmbeddings")):
        return cfg
    cfg = copy.deepcopy(cfg)
    defaults = dict(cfg.get("serverToolDefaults") or {})
    tools = dict(cfg.get("tools") or {})
    inc = cfg.pop("toolInclude", None) or {}
    perm = cfg.pop("toolPermissionRequired", None) or {}
    cfg.pop("toolEmbeddings", None)  # not migrated (another runtime's vectors; regenerated when needed)
    if inc.get("serverDefault"):
        defaults.setdefault("include", inc["serverDefault"])
    if "serverDefault" in perm:
        defaults.setdefault("permissionRequired", perm["serverDefault"])
    for name, mode in (inc.get("tools") or {}).items():
        tools.setdefault(name, {}).setdefault("include", mode)
    for name, req in (perm.get("tools") or {}).items():
        tools.setdefault(name, {}).setdefault("permissionRequired", req)
    if defaults:
        cfg["serverToolDefaults"] = defaults
    if tools:
        cfg["tools"] = tools
    return cfg


def describe_tool(tool: Tool) -> tuple[str, str]:
    """What a catalog says of a tool (to tell a catalog tool from one declared or edited here)."""
    return (tool.description, json.dumps(tool.input_schema, sort_keys=True, default=str))
