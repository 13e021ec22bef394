"""The package uses the MCP SDK through its public API only, so a minor SDK release cannot break
``serve`` or the gateway by renaming an internal: nothing in engine/ reads, writes or names (``getattr``,
``setattr``, ``hasattr``, ``delattr``) a private member of an SDK object (an attribute whose name starts
with one underscore: ``MCPServer._lowlevel_server``, ``_subscriptions``, ``ctx.session._connection``,
``Server._request_handlers`` ...), no private attribute is hung on another's object (``server._x = ...``
where none of contextsieve's classes defines ``_x``), and nothing is imported from a private SDK module
or under a private name.

Which names are the SDK's private members is read from the installed SDK itself (``mcp`` and
``mcp_types``: every ``self._x`` it assigns, every ``_x`` its classes define). A private name that
contextsieve also gives one of its own objects is checked only when called on an object that is not
``self``/``cls`` and the name is one of :data:`ALWAYS_SDK` (names the SDK's server objects hold that
this package must never reach).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "engine"
SDK_PACKAGES = ("mcp", "mcp_types")

#: Private members of the SDK's server, session and context objects that engine/ reached for before
#: (issue 48 item 10) or might: flagged on any object but ``self``/``cls``, whatever contextsieve names
#: its own attributes.
ALWAYS_SDK = frozenset(
    {
        "_lowlevel_server",
        "_subscriptions",
        "_connection",
        "_request_handlers",
        "_notification_handlers",
        "_session_manager",
        "_tool_manager",
        "_resource_manager",
        "_prompt_manager",
        "_request_context",
        "_request_outbound",
        "_mcp_server",
        "_input_params",
    }
)

NAMING_CALLS = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _members(tree: ast.AST) -> set[str]:
    """Private member names a module's classes define: ``self._x``/``cls._x`` assigned anywhere, and
    methods, nested classes and annotated or assigned names in class bodies."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls") and _private(node.attr):
                out.add(node.attr)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                names: list[str] = []
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names = [item.name]
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names = [item.target.id]
                elif isinstance(item, ast.Assign):
                    names = [t.id for t in item.targets if isinstance(t, ast.Name)]
                out.update(n for n in names if _private(n))
    return out


def _parsed(folder: Path) -> dict[Path, ast.AST]:
    return {p: ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in sorted(folder.rglob("*.py"))}


@cache
def _engine() -> dict[Path, ast.AST]:
    return _parsed(ENGINE)


@cache
def _sdk_private_members() -> frozenset[str]:
    out: set[str] = set()
    for package in SDK_PACKAGES:
        module = pytest.importorskip(package)
        for tree in _parsed(Path(module.__file__).parent).values():
            out |= _members(tree)
    return frozenset(out)


@cache
def _own_private_members() -> frozenset[str]:
    out: set[str] = set()
    for tree in _engine().values():
        out |= _members(tree)
    return frozenset(out)


def _flagged(name: str, receiver: ast.expr, store: bool = False) -> bool:
    """Whether reaching ``receiver.<name>`` is a use of an SDK private member (``store``: it is assigned,
    and a private name none of contextsieve's classes defines is one added to another's object, such as
    an attribute hung on the SDK's ``Server``)."""
    if not _private(name) or (isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")):
        return False
    if name in ALWAYS_SDK or (store and name not in _own_private_members()):
        return True
    return name in _sdk_private_members() and name not in _own_private_members()


def _sdk_module(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in SDK_PACKAGES


def private_sdk_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each use of the SDK's private API in a module."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _flagged(node.attr, node.value, isinstance(node.ctx, ast.Store)):
            found.append((node.lineno, f"attribute {node.attr}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in NAMING_CALLS:
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                if _flagged(node.args[1].value, node.args[0], node.func.id == "setattr"):
                    found.append((node.lineno, f"{node.func.id}(..., {node.args[1].value!r})"))
        elif isinstance(node, ast.ImportFrom) and _sdk_module(node.module):
            assert node.module is not None
            if any(_private(part) for part in node.module.split(".")):
                found.append((node.lineno, f"private module {node.module}"))
            names = [a.name for a in node.names if _private(a.name)]
            found.extend((node.lineno, f"private name {name} from {node.module}") for name in names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _sdk_module(alias.name) and any(_private(part) for part in alias.name.split(".")):
                    found.append((node.lineno, f"private module {alias.name}"))
    return sorted(found)


def test_the_check_finds_each_way_of_reaching_into_the_sdk() -> None:
    """The check itself: each form engine/ used before (issue 48 item 10) is found; public use is not."""
    bad = """
from mcp.server._streamable_http_modern import handle_modern_request
from mcp.shared.message import _private_helper
import mcp.client._memory
low = server._lowlevel_server
low.add_request_handler("tools/list", object, None)
subs = getattr(server, "_subscriptions", None)
state = ctx.session._connection.state
handlers = low._request_handlers
low._contextsieve_state = object()
"""
    found = private_sdk_uses(ast.parse(bad))
    assert [line for line, _ in found] == [2, 3, 4, 5, 7, 8, 9, 10], found
    good = """
from mcp.server.lowlevel import Server
server = Server("x", on_list_tools=handler)
server.add_request_handler("logging/setLevel", SetLevelRequestParams, on_set_level)
await ctx.session.report_progress(1.0, None, "waiting")
self._lock = object()
"""
    assert private_sdk_uses(ast.parse(good)) == []


def test_engine_uses_no_private_member_or_module_of_the_mcp_sdk() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path, tree in _engine().items()
        for line, what in private_sdk_uses(tree)
    ]
    assert not found, "the MCP SDK's private API is used (use its public API):\n" + "\n".join(found)
