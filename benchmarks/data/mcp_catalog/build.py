"""A tool catalog of real MCP servers and tasks over it, for tuning selection (never the held-out set).

    python benchmarks/data/mcp_catalog/build.py list [--venv /tmp/mcp-catalog-venv]   # needs the registries
    python benchmarks/data/mcp_catalog/build.py                                       # writes the jsonl files

``list`` starts every server of :data:`SERVERS` (npm packages through ``npx -y``; PyPI packages from a
throw-away virtualenv it creates, never the project's), lists its tools with contextsieve's MCP client
(``initialize`` + every ``tools/list`` page, exactly what a host sees) and writes ``catalog.json``
(not kept: the next step turns it into the two files that are): per server the package, version,
licence, the package's own summary and the tools as listed (name, description, inputSchema). API keys are placeholders: these servers list their tools without calling
their services. Only packages whose licence allows redistribution (MIT, Apache-2.0, BSD, ISC, MPL-2.0)
are kept. The default step turns ``catalog.json`` (if present) into ``tools.jsonl`` (``server``, ``name``,
``description``, ``inputSchema``), ``servers.jsonl`` (``server``, ``description``: the package summary;
``registry``, ``package``, ``version``, ``licence``)
and ``queries.jsonl`` from :data:`TASKS`: tasks written for contextsieve, each needing 1-6 tools across
servers, some in German, Spanish and Chinese (``relevant``: ``server/tool``; ``lang``; ``split``:
``single`` or ``multi``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # run as a script: the repository's packages

from benchmarks.data import mcp_recording as rec  # noqa: E402

#: name -> (registry, package, arguments after the command, environment). ``{root}`` is a temp folder.
#: ``pypi-mcp1``: a server written for the MCP SDK 1.x, installed beside ``mcp<2`` in a venv of its own.
#: Licences (the reference servers' included) and virtualenvs: ``mcp_recording``.
SERVERS: dict[str, rec.ServerSpec] = {
    "filesystem": ("npm", "@modelcontextprotocol/server-filesystem", ["{root}"], {}),
    "memory": ("npm", "@modelcontextprotocol/server-memory", [], {}),
    "sequential-thinking": ("npm", "@modelcontextprotocol/server-sequential-thinking", [], {}),
    "github": ("npm", "@modelcontextprotocol/server-github", [], {"GITHUB_PERSONAL_ACCESS_TOKEN": "x"}),
    "postgres": ("npm", "@modelcontextprotocol/server-postgres", ["postgresql://localhost/db"], {}),
    "google-maps": ("npm", "@modelcontextprotocol/server-google-maps", [], {"GOOGLE_MAPS_API_KEY": "x"}),
    "slack": ("npm", "@modelcontextprotocol/server-slack", [], {"SLACK_BOT_TOKEN": "x", "SLACK_TEAM_ID": "x"}),
    "brave-search": ("npm", "@modelcontextprotocol/server-brave-search", [], {"BRAVE_API_KEY": "x"}),
    "redis": ("npm", "@modelcontextprotocol/server-redis", ["redis://localhost:6379"], {}),
    "puppeteer": ("npm", "@modelcontextprotocol/server-puppeteer", [], {"PUPPETEER_SKIP_DOWNLOAD": "1"}),
    "playwright": ("npm", "@playwright/mcp", [], {}),
    "chrome-devtools": ("npm", "chrome-devtools-mcp", [], {}),
    "context7": ("npm", "@upstash/context7-mcp", [], {}),
    "notion": ("npm", "@notionhq/notion-mcp-server", [], {"NOTION_TOKEN": "x"}),
    "gitlab": ("npm", "@zereight/mcp-gitlab", [], {"GITLAB_PERSONAL_ACCESS_TOKEN": "x"}),
    "azure-devops": ("npm", "@azure-devops/mcp", ["contoso"], {}),
    "mongodb": ("npm", "mongodb-mcp-server", [], {}),
    "stripe": ("npm", "@stripe/mcp", ["--tools=all", "--api-key=sk_test_x"], {}),
    "tavily": ("npm", "tavily-mcp", [], {"TAVILY_API_KEY": "x"}),
    "firecrawl": ("npm", "firecrawl-mcp", [], {"FIRECRAWL_API_KEY": "x"}),
    "desktop-commander": ("npm", "@wonderwhy-er/desktop-commander", [], {}),
    "sentry": ("npm", "@sentry/mcp-server", ["--access-token=x"], {}),
    "circleci": ("npm", "@circleci/mcp-server-circleci", [], {"CIRCLECI_TOKEN": "x"}),
    "figma": ("npm", "figma-developer-mcp", ["--figma-api-key=x", "--stdio"], {}),
    "eslint": ("npm", "@eslint/mcp", [], {}),
    "amap": ("npm", "@amap/amap-maps-mcp-server", [], {"AMAP_MAPS_API_KEY": "x"}),
    "baidu-map": ("npm", "@baidumap/mcp-server-baidu-map", [], {"BAIDU_MAP_API_KEY": "x"}),
    "howtocook": ("npm", "howtocook-mcp", [], {}),
    "chart": ("npm", "@antv/mcp-server-chart", [], {}),
    "kubernetes": ("npm", "mcp-server-kubernetes", [], {}),
    "youtube-transcript": ("npm", "@kimtaeyoon83/mcp-server-youtube-transcript", [], {}),
    "airtable": ("npm", "airtable-mcp-server", [], {"AIRTABLE_API_KEY": "x"}),
    "hubspot": ("npm", "@hubspot/mcp-server", [], {"PRIVATE_APP_ACCESS_TOKEN": "x"}),
    "heroku": ("npm", "@heroku/mcp-server", [], {"HEROKU_API_KEY": "x"}),
    "elasticsearch": ("npm", "@elastic/mcp-server-elasticsearch", [], {"ES_URL": "http://localhost:9200"}),
    "fetch": ("pypi", "mcp-server-fetch", [], {}),
    "time": ("pypi", "mcp-server-time", [], {}),
    "git": ("pypi", "mcp-server-git", [], {}),
    "sqlite": ("pypi-mcp1", "mcp-server-sqlite", ["--db-path", "{root}/catalog.db"], {}),
    "arxiv": ("pypi-mcp1", "arxiv-mcp-server", [], {}),
    "duckduckgo": ("pypi", "duckduckgo-mcp-server", [], {}),
    "wikipedia": ("pypi", "wikipedia-mcp", [], {}),
    "calculator": ("pypi-mcp1", "mcp-server-calculator", [], {}),
    "excel": ("pypi", "excel-mcp-server", ["stdio"], {}),
}

#: ``list``'s virtualenv option and its default folder, ``--timeout``'s default (seconds) and help.
COMMAND_LINE = rec.CommandLine(
    "--venv", "mcp-catalog-venv", 180.0, "first runs install it", "the existing catalog.json"
)


def list_servers(venv: Path, timeout: float, only: list[str] | None = None) -> None:
    """List the servers (all, or ``only`` these, merged into the existing ``catalog.json``)."""
    from contextsieve.agent.agent import McpServer
    from contextsieve.mcp_client.client import ListConfig, list_tools

    chosen = {k: v for k, v in SERVERS.items() if only is None or k in only}
    pypi = [p for reg, p, _, _ in chosen.values() if reg == "pypi"]
    if pypi:
        rec.make_venv(venv, pypi)
    root = Path(tempfile.mkdtemp(prefix="mcp-catalog-"))
    base = rec.base_env()
    servers, meta = [], {}
    for name, (reg, package, args, env) in chosen.items():
        args, env = rec.fill_root(args, env, root)
        if reg == "npm":
            command, args, (version, lic, summary) = rec.npm_launch(package, args)
        else:
            home = venv if reg == "pypi" else rec.make_venv(venv.with_name(f"{venv.name}-{name}"), [package, "mcp<2"])
            command, args, (version, lic, summary) = rec.pypi_launch(home, package, args)
        meta[name] = {"registry": reg, "package": package, "version": version, "licence": lic, "summary": summary}
        cfg = {"command": command, "args": args, "env": {**base, **env}}
        servers.append(McpServer(name, cfg))
    listings: dict = {}
    for i in range(0, len(servers), 6):  # a few at a time: first runs install packages
        listings |= asyncio.run(list_tools(servers[i : i + 6], ListConfig(timeout=timeout)))
    path = HERE / "catalog.json"
    catalog = json.loads(path.read_text(encoding="utf-8")) if only and path.exists() else {}
    for name, listing in listings.items():
        m = meta[name]
        ok = listing.tools is not None and m["licence"] in rec.ALLOWED_LICENCES
        why = listing.error or ("" if m["licence"] in rec.ALLOWED_LICENCES else f"licence {m['licence']!r}")
        print(
            f"{name:20} {m['package']}@{m['version']} {m['licence']}: " + (f"{len(listing.tools)} tools" if ok else why)
        )
        if ok:
            catalog[name] = m | {"tools": listing.tools}
    catalog = {k: catalog[k] for k in SERVERS if k in catalog}  # the order of SERVERS
    path.write_text(json.dumps(catalog, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def write_jsonl() -> None:
    """``tools.jsonl`` and ``servers.jsonl`` from ``catalog.json`` when a ``list`` step left one (it is
    not kept in the repository: the two files hold the same listing), then ``queries.jsonl``."""
    sys.path.insert(0, str(HERE))
    from tasks import TASKS  # the file beside this one

    raw = HERE / "catalog.json"
    if raw.exists():
        catalog = json.loads(raw.read_text(encoding="utf-8"))
        tools = [
            {"server": s, "name": t["name"], "description": t["description"], "inputSchema": t["inputSchema"]}
            for s, c in catalog.items()
            for t in c["tools"]
        ]
        servers = [
            {
                "server": s,
                "description": c["summary"],
                "registry": c["registry"],
                "package": c["package"],
                "version": c["version"],
                "licence": c["licence"],
            }
            for s, c in catalog.items()
        ]
        rec.write_jsonl(HERE / "tools.jsonl", tools)
        rec.write_jsonl(HERE / "servers.jsonl", servers)
    known = rec.tool_names(HERE / "tools.jsonl")
    queries = []
    for i, (lang, query, needed) in enumerate(TASKS):
        steps = [[x] if isinstance(x, str) else list(x) for x in needed]
        missing = [r for g in steps for r in g if r not in known]
        if missing:
            raise SystemExit(f"task {i} names unknown tools {missing}")
        split = "multi" if len(steps) > 1 else "single"
        row = {
            "id": f"task-{i}",
            "query": query,
            "relevant": [r for g in steps for r in g],
            "lang": lang,
            "split": split,
        }
        if any(len(g) > 1 for g in steps):
            row["relevant_groups"] = steps
        queries.append(row)
    rec.write_jsonl(HERE / "queries.jsonl", queries)
    n_servers = len((HERE / "servers.jsonl").read_text(encoding="utf-8").splitlines())
    print(f"{n_servers} servers, {len(known)} tools, {len(queries)} tasks")


def main() -> None:
    rec.run_build(__doc__ or "", list_servers, write_jsonl, COMMAND_LINE)


if __name__ == "__main__":
    main()
