"""README.md's examples run and print what the README shows; its command table, error list and links hold.

Conventions in README.md that this test relies on:

- Every ```python block is run, in README order, each as a fresh ``python`` process (this interpreter) in
  its own empty temporary working directory. All blocks share one temporary ``CONTEXTSIEVE_CACHE`` folder
  for the test session (the first block builds and measures the model graphs there; nothing is
  downloaded). ``CONTEXTSIEVE_VARIANT`` and ``CONTEXTSIEVE_INT8_WEIGHTS`` are removed, so the README's
  defaults are what runs, and this interpreter's ``bin`` folder comes first on ``PATH`` (for
  ``mcp-server-time``, installed by the ``test`` extra). A block must exit 0.
- Expected output: when the first non-blank line after a python block ends with ``prints:`` (the README
  writes "It prints:"), the next line must open a ```text block, and that block is the block's expected
  stdout. The two are compared line by line after stripping trailing whitespace from each line and
  trailing blank lines from both, so any other difference fails. Examples print names, include modes
  and counts rather than raw similarity scores, which vary per CPU in their last digits.
- Shell (```bash) blocks are not run. The "## Command line" table is checked against the CLI's own
  ``--help``: every subcommand has a row, each row names a real subcommand, and every ``--option`` a row
  names is an option of that subcommand.
- The error classes named under "## Errors" are exactly the ``ContextSieveError`` subclasses that
  ``contextsieve`` exports.
- Every relative link in README.md and docs/*.md points to a file that exists (and, with ``#anchor``, to
  a heading of it); README links to every docs/ page and every docs/ page links back to the README.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"


@dataclass(frozen=True)
class Example:
    line: int  # 1-based line of the opening ```python fence
    code: str
    expected: str | None  # the ```text block after "... prints:", if any


def fenced_blocks(text: str) -> list[tuple[int, int, str, str]]:
    """(opening line index, closing line index, language, body) of each fenced block, in order."""
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
            raise AssertionError(f"README.md:{i + 1}: a ``` block is never closed")
        blocks.append((i, end, m.group(1), "\n".join(lines[i + 1 : end]) + "\n"))
        i = end + 1
    return blocks


def examples(text: str) -> list[Example]:
    """The README's python blocks, each with the output block that follows it (see the module docstring)."""
    lines = text.splitlines()
    blocks = fenced_blocks(text)
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
                raise AssertionError(f"README.md:{nxt + 1}: 'prints:' must be followed at once by a ```text block")
            expected = by_start[shown][2]
        out.append(Example(start + 1, body, expected))
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
            report.append(f"line {i + 1}:\n  README shows: {w}\n  code prints:  {g}")
    return "\n".join(report)


README_TEXT = README.read_text(encoding="utf-8")
EXAMPLES = examples(README_TEXT)


def section(title_start: str) -> str:
    """The README section whose '## ' heading starts with ``title_start``, up to the next '## ' heading."""
    m = re.search(rf"^## {re.escape(title_start)}.*?$(.*?)(?=^## |\Z)", README_TEXT, flags=re.M | re.S)
    assert m, f"README.md has no '## {title_start}' section"
    return m.group(1)


@pytest.fixture(scope="session")
def readme_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("readme-cache")


def test_the_readme_has_checked_examples_of_each_job() -> None:
    checked = [e for e in EXAMPLES if e.expected is not None]
    assert len(EXAMPLES) >= 6 and len(checked) == len(EXAMPLES), [e.line for e in EXAMPLES if e.expected is None]
    for title in ("Quickstart", "Select", "Serve", "Gateway", "Stash", "Configuration"):
        assert "```python" in section(title), f"the {title} section has no python example"


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"README-line-{e.line}" for e in EXAMPLES])
def test_readme_example_prints_what_the_readme_shows(example: Example, readme_cache: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CONTEXTSIEVE_VARIANT", "CONTEXTSIEVE_INT8_WEIGHTS")}
    env["CONTEXTSIEVE_CACHE"] = str(readme_cache)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    script = tmp_path / "example.py"
    script.write_text(example.code, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, f"README.md:{example.line}: the example failed\n{run.stderr[-4000:]}"
    if example.expected is not None:
        diff = differences(run.stdout, example.expected)
        assert not diff, f"README.md:{example.line}: the output differs from the README\n{diff}"


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
    rows = [line for line in section("Command line").splitlines() if line.startswith("| `contextsieve ")]
    assert rows
    usage = re.search(r"\{([a-z,-]+)\}", _help())
    assert usage, "no subcommand list in `contextsieve --help`"
    listed = usage.group(1).split(",")
    seen = set()
    for row in rows:
        m = re.match(r"\| `contextsieve ([\w-]+)", row)
        assert m, row
        command = m.group(1)
        assert command in listed, f"README's command table names `contextsieve {command}`, which does not exist"
        seen.add(command)
        options = set(re.findall(r"--[a-z][a-z0-9-]*", _help(command)))
        for option in re.findall(r"--[a-z][a-z0-9-]*", row):
            assert option in options, f"`contextsieve {command}` has no {option} (README's command table)"
    assert seen == set(listed), f"commands missing from README's table: {sorted(set(listed) - seen)}"


def test_the_errors_section_names_every_exported_error() -> None:
    import contextsieve

    named = set(re.findall(r"`(?:contextsieve\.)?([A-Z]\w*Error)`", section("Errors")))
    exported = {
        n
        for n in contextsieve.__all__
        if isinstance(getattr(contextsieve, n), type) and issubclass(getattr(contextsieve, n), Exception)
    }
    assert named == exported, (sorted(named - exported), sorted(exported - named))
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
