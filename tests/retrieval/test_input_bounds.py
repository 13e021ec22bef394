"""Bounded work per input (issue 37, item 4): chunking is linear in the text and gives the pieces the
old quadratic algorithm gave; what an MCP server lists is held to :class:`ToolLimits`, and the cut is
noted on the tool, in the listing report and in ``explain``."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import jsonschema
import pytest
import yaml

from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.agentfile import load_agent, save_agent
from contextsieve.agent.file_servers import server_tools
from contextsieve.agent.items import IncludeMode, Reference, Tool
from contextsieve.agent.tool_limits import CUT_MARK, ToolLimits, limit_tool
from contextsieve.engine import Engine
from contextsieve.errors import AgentFileError, InputError
from contextsieve.mcp_client.client import ListConfig
from contextsieve.models.registry import get_model, resolve_folder
from contextsieve.models.tokenizer import TextTokenizer
from contextsieve.retrieval import text as text_module
from contextsieve.retrieval.text import TextSplit, heading_sections, split_text, token_windows
from contextsieve.selection import chunking
from contextsieve.selection.chunking import ChunkConfig, chunk_item, split_identifier
from contextsieve.session.explain import explain_item
from tests.helpers.fake_embedder import FakeEmbedder

Counter = Callable[[Sequence[str]], list[int]]
SERVER = Path(__file__).parents[1] / "data" / "mcp_test_server.py"


@pytest.fixture(scope="module")
def bert() -> Counter:
    """The real model's token counter (all-MiniLM-L6-v2's WordPiece, special tokens included)."""
    tok = TextTokenizer.from_file(resolve_folder(get_model("all-MiniLM-L6-v2")) / "tokenizer.json", 256)
    return tok.count_tokens


# --- the old algorithm, kept as the oracle ---------------------------------------------------------


def oracle_fit(
    text: str, limit: int, count: Counter, *, counted: int | None = None, first_only: bool = False
) -> list[str]:
    """The old ``_fit_tokens``: per piece, a bisection over all remaining words (quadratic)."""
    if count([text])[0] <= limit:
        return [text]
    words = text.split()
    pieces: list[str] = []
    start = 0
    while start < len(words):
        lo, hi = start + 1, len(words)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count([" ".join(words[start:mid])])[0] <= limit:
                lo = mid
            else:
                hi = mid - 1
        pieces.append(" ".join(words[start:lo]))
        start = lo
    return pieces


def oracle_split_text(text: str, config: TextSplit, count: Counter, limit: int) -> list[str]:
    """The old ``split_text``: paragraphs, sentences packed to ``max_chars``, then :func:`oracle_fit`."""
    chunks: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        if not paragraph.strip():
            continue
        if len(paragraph.strip()) <= config.max_chars:
            chunks.append(paragraph.strip())
            continue
        current = ""
        for sentence in (s.strip() for s in re.split(r"(?<=[.!?])\s+", paragraph)):
            if not sentence:
                continue
            if current and len(current) + 1 + len(sentence) <= config.max_chars:
                current = f"{current} {sentence}"
            elif not current:
                current = sentence
            else:
                chunks.append(current)
                current = sentence
        if current:
            chunks.append(current)
    return [piece for c in chunks for piece in oracle_fit(c, limit, count)]


OLD_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


def old_split_identifier(name: str) -> str:
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", name)
    return " ".join(re.sub(r"[_\-.]+", " ", name).split()) or name


# --- seeded random texts ---------------------------------------------------------------------------

COMMON = (
    "the a of request tool search GitHub issues pull café naïve über Straße 数据 天气 查询 🙂 x86_64 v2.1 "
    "e-mail (note) don't 1,000 — https://example.com/a?b=c&d=e JSON-RPC createIssue HTTPServer"
).split()


def random_text(rng: random.Random, n_words: int, breaks: bool) -> str:
    """Words common and rare, numbers, punctuation, CJK, emoji and now and then a long run of
    punctuated characters (one word over a small token window); with ``breaks`` also sentence ends and
    paragraph breaks. Words are separated by a space, sometimes a tab, a newline or two spaces."""
    out: list[str] = []
    for _ in range(n_words):
        r = rng.random()
        if r < 0.55:
            w = rng.choice(COMMON)
        elif r < 0.9:
            w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyzé") for _ in range(rng.randint(1, 14)))
        elif r < 0.99:
            w = "".join(rng.choice("abcXYZ0123456789-_/.:,'") for _ in range(rng.randint(1, 10)))
        else:
            w = ".".join("ab" for _ in range(rng.randint(5, 200)))  # up to 400 tokens in one word
        if breaks and rng.random() < 0.08:
            w += rng.choice(".!?")
        out.append(w)
        out.append(rng.choice([" "] * 20 + ["\t", "\n", "  "] + (["\n\n"] if breaks else [])))
    return "".join(out)


def words_plus_two(texts: Sequence[str]) -> list[int]:
    """A counter that adds up per word (as WordPiece does)."""
    return [len(t.split()) + 2 for t in texts]


def characters(texts: Sequence[str]) -> list[int]:
    """A counter that does not add up per word (the spaces count): every estimate is checked and searched."""
    return [len(t) for t in texts]


def half_words(texts: Sequence[str]) -> list[int]:
    """A counter whose per-word estimate is far too low (a word alone counts 0 past the constant)."""
    return [len(t.split()) // 2 + 2 for t in texts]


class Counting:
    """A counter that also sums how many characters it was asked to count (the work of counting)."""

    def __init__(self, count: Counter) -> None:
        self.count, self.chars = count, 0

    def __call__(self, texts: Sequence[str]) -> list[int]:
        self.chars += sum(len(t) for t in texts)
        return self.count(texts)


# --- chunking: the same pieces as the oracle, within the window, linear work -----------------------


@pytest.mark.parametrize("breaks", [False, True])
def test_split_text_gives_the_old_pieces_with_the_real_tokenizer(bert: Counter, breaks: bool) -> None:
    rng = random.Random(37 + breaks)
    for trial in range(6):
        text = random_text(rng, rng.randint(50, 1500), breaks)
        for limit in (16, 64, 254):
            new = split_text(text, TextSplit(), bert, limit)
            assert new == oracle_split_text(text, TextSplit(), bert, limit), (trial, limit)
            assert new, "a non-blank text has pieces"


@pytest.mark.parametrize("count", [words_plus_two, characters, half_words], ids=lambda c: c.__name__)
@pytest.mark.parametrize("breaks", [False, True])
def test_split_text_gives_the_old_pieces_with_any_growing_counter(count: Counter, breaks: bool) -> None:
    rng = random.Random(7 + breaks)
    for trial in range(40):
        text = random_text(rng, rng.randint(1, 600), breaks)
        for limit in (3, 16, 100):
            cfg = ChunkConfig(max_chars=rng.choice([40, 500]))
            assert split_text(text, cfg.text, count, limit) == oracle_split_text(text, cfg.text, count, limit), (
                trial,
                limit,
            )


def test_chunks_and_windows_equal_the_old_algorithms(bert: Counter, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every caller of the fitting (tool and reference chunks, capped headers, summaries and schema
    text, stash windows): the same output as with the old fitting put back in its place."""
    rng = random.Random(3)
    long_flat = random_text(rng, 2500, breaks=False)
    doc = "# Setup\n\n" + random_text(rng, 1200, breaks=True) + "\n\n## Linux\n\n" + random_text(rng, 900, False)
    schema = {
        "type": "object",
        "properties": {"query": {"type": "string", "description": random_text(rng, 300, False)}},
    }
    items = [
        Tool("github", "searchIssues", long_flat, schema, summary=random_text(rng, 200, False)),
        Reference("setup", doc, description=random_text(rng, 150, False), summary=random_text(rng, 120, True)),
    ]
    configs = [
        ChunkConfig(),
        ChunkConfig(max_tokens=64, split_identifiers=True, tool_schema="text"),
        ChunkConfig(tool_schema="chunk"),
    ]

    def run() -> list[object]:
        out: list[object] = [chunk_item(it, cfg, bert, server_description="GitHub") for it in items for cfg in configs]
        out += [token_windows(t, bert, 200, 32) for t in (long_flat, doc)]
        return out

    new = run()
    monkeypatch.setattr(text_module, "fit_tokens", oracle_fit)
    monkeypatch.setattr(chunking, "fit_tokens", oracle_fit)
    assert new == run()


def test_pieces_never_exceed_the_window(bert: Counter) -> None:
    rng = random.Random(11)
    for breaks in (False, True):
        text = random_text(rng, 20_000, breaks)
        for limit in (32, 254):
            pieces = split_text(text, TextSplit(), bert, limit)
            sizes = bert(pieces)
            assert all(n <= limit or len(p.split()) == 1 for p, n in zip(pieces, sizes))
            assert any(n > limit for n in sizes) == any(n > limit for n in bert(text.split()))  # lone long words only
            assert " ".join(" ".join(pieces).split()) == " ".join(text.split())  # every word, in order, once
    tool = Tool("s", "t", random_text(rng, 20_000, False))
    ref = Reference("r", random_text(rng, 20_000, True), summary=random_text(rng, 500, False))
    for item in (tool, ref):
        chunks = chunk_item(item, ChunkConfig(), bert)
        assert len(chunks) > 20
        assert all(n <= 256 or len(c.text.split()) == 1 for c, n in zip(chunks, bert([c.embed_text for c in chunks])))


def test_chunking_counts_each_character_a_bounded_number_of_times(bert: Counter) -> None:
    """The work is linear: the counter is asked about each character of a 100 KB text without
    sentence breaks a few times (the old bisection counted it hundreds of times: 8 s here)."""
    rng = random.Random(5)
    text = random_text(rng, 16_000, breaks=False)
    assert len(text) > 100_000
    counting = Counting(bert)
    pieces = split_text(text, TextSplit(), counting)
    assert len(pieces) > 100
    assert counting.chars <= 5 * len(text), counting.chars / len(text)
    windows = Counting(bert)
    token_windows(text, windows, 200, 32)
    assert windows.chars <= 7 * len(text), windows.chars / len(text)
    tool = Counting(bert)
    chunk_item(Tool("s", "t", text), ChunkConfig(), tool)
    assert tool.chars <= 7 * len(text), tool.chars / len(text)
    # a counter that does not add up per word: every end is searched, still a bounded multiple
    for count in (characters, half_words):
        other = Counting(count)
        split_text(text, TextSplit(), other)
        assert other.chars <= 40 * len(text), (count.__name__, other.chars / len(text))


def test_headings_and_identifiers_give_the_old_results() -> None:
    rng = random.Random(2)
    alphabet = ["#", "#", " ", "\t", "\u3000", "\xa0", "\x0b", "a", "b", "#"]
    for _ in range(50_000):
        line = "#" * rng.randint(0, 8) + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        text = f"intro\n{line}\nbody\n## Sub ##\nmore"
        m = OLD_HEADING.match(line)
        old = None if m is None else (len(m.group(1)), m.group(2))
        assert text_module._heading(line) == old, repr(line)
        assert heading_sections(text) == old_sections(text)
    for _ in range(50_000):
        name = "".join(rng.choice("aAbBZz09_-. xY") for _ in range(rng.randint(0, 16)))
        assert split_identifier(name) == old_split_identifier(name), repr(name)


def old_sections(text: str) -> list[tuple[tuple[str, ...], str]]:
    sections: list[tuple[tuple[str, ...], str]] = []
    stack: list[tuple[int, str]] = []
    lines: list[str] = []
    fenced = False

    def close() -> None:
        body = "\n".join(lines).strip()
        if body:
            sections.append((tuple(h for _, h in stack), body))
        lines.clear()

    for line in text.splitlines():
        if re.match(r"^\s*(```|~~~)", line):
            fenced = not fenced
        m = None if fenced else OLD_HEADING.match(line)
        if m is None:
            lines.append(line)
            continue
        close()
        while stack and stack[-1][0] >= len(m.group(1)):
            stack.pop()
        stack.append((len(m.group(1)), m.group(2)))
    close()
    return sections


def test_long_heading_lines_and_capital_runs_finish() -> None:
    """Inputs the old patterns backtracked over for hours (a heading line with 100,000 spaces, 200,000
    hashes, 200,000 capitals) are read in a child process that must finish (a guard against a hang,
    not a speed goal: the fixed code takes milliseconds)."""
    code = (
        "from contextsieve.retrieval.text import heading_sections\n"
        "from contextsieve.selection.chunking import split_identifier\n"
        "assert heading_sections('# a' + ' ' * 100_000 + 'x\\nbody') == [(('a' + ' ' * 100_000 + 'x',), 'body')]\n"
        "assert heading_sections('# ' + '#' * 200_000 + ' x\\nbody') == [(('#' * 200_000 + ' x',), 'body')]\n"
        "assert split_identifier('A' * 200_000 + 'Bc') == 'A' * 200_000 + ' Bc'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


# --- tool limits ------------------------------------------------------------------------------------


def test_tool_limits_are_checked() -> None:
    assert (ToolLimits().description_chars, ToolLimits().schema_chars) == (10_000, 24_000)
    for bad in ({"description_chars": 99}, {"schema_chars": 0}, {"description_chars": True}, {"schema_chars": 1e5}):
        with pytest.raises(InputError):
            ToolLimits(**bad)  # type: ignore[arg-type]
    with pytest.raises(InputError):
        ListConfig(limits={"description_chars": 10})  # type: ignore[arg-type]


def test_a_long_description_is_cut_at_a_word_boundary() -> None:
    rng = random.Random(1)
    text = random_text(rng, 50_000, breaks=True)
    for limit in (100, 10_000, 123_457):
        cut, schema, note = limit_tool(text, {"type": "object"}, ToolLimits(description_chars=limit))
        assert len(cut) <= limit and cut.endswith(CUT_MARK) and schema == {"type": "object"}
        kept = cut[: -len(CUT_MARK)]
        assert text.startswith(kept) and (text[len(kept)].isspace() or len(kept) < limit - 200)
        assert note == f"description cut from {len(text):,} to {len(cut):,} characters (limit {limit:,})"
    same = "x" * 10_000
    assert limit_tool(same, {"type": "object"}) == (same, {"type": "object"}, "")
    hard = "y" * 20_000  # no space to cut at
    assert limit_tool(hard, {})[0] == "y" * (10_000 - len(CUT_MARK)) + CUT_MARK


def json_len(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def big_schema(n: int, text: int) -> dict:
    """A schema whose properties (one named ``description``, one ``title``) carry long annotations,
    nested objects, arrays, ``anyOf`` and a ``$ref`` into ``$defs``."""
    props: dict[str, object] = {
        f"p{i}": {"type": "string", "description": f"parameter {i} " + "word " * text, "title": f"P{i}"}
        for i in range(n)
    }
    props["description"] = {"type": "string", "description": "the text of the issue " * 20}
    props["title"] = {"type": "string", "maxLength": 80, "examples": ["a title"] * 10}
    props["filters"] = {
        "type": "object",
        "description": "filters " * 50,
        "properties": {"state": {"enum": ["open", "closed"], "description": "state " * 30}},
        "additionalProperties": False,
    }
    props["labels"] = {"type": "array", "items": {"type": "string", "description": "a label " * 30}, "minItems": 1}
    props["when"] = {"anyOf": [{"type": "string", "format": "date"}, {"type": "null", "title": "none"}]}
    props["owner"] = {"$ref": "#/$defs/user", "description": "who " * 40}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "description": "top " * 40,
        "properties": props,
        "required": ["description", "p3", "labels", "owner"],
        "additionalProperties": False,
        "$defs": {"user": {"type": "object", "properties": {"login": {"type": "string", "description": "login " * 9}}}},
    }


def instances(rng: random.Random, n: int) -> list[object]:
    values = ["open", "x" * 90, "2024-01-01", None, 3, ["a"], [], {"login": "me"}, {"login": 3}, {"state": "shut"}]
    out: list[object] = []
    for _ in range(n):
        keys = rng.sample(
            ["description", "title", "filters", "labels", "when", "owner", "p3", "extra"], rng.randint(0, 8)
        )
        out.append({k: rng.choice(values) for k in keys})
    return out


def test_a_schema_over_the_limit_loses_annotations_and_validates_the_same() -> None:
    schema = big_schema(100, 60)
    original = json.dumps(schema)
    assert json_len(schema) > 24_000
    cut_desc, cut, note = limit_tool("d", schema)
    assert json.dumps(schema) == original  # the listing itself is left alone
    assert cut_desc == "d" and json_len(cut) <= 24_000
    jsonschema.Draft202012Validator.check_schema(cut)
    assert set(cut["properties"]) == set(schema["properties"]) and cut["required"] == schema["required"]
    assert cut["properties"]["description"]["type"] == "string"  # a property named like an annotation stays
    assert cut["properties"]["p0"]["description"] == schema["properties"]["p0"]["description"]  # the first kept
    assert "description" not in cut["properties"]["p99"]  # the last left out
    assert cut["additionalProperties"] is False and cut["$defs"]["user"]["properties"]["login"]["type"] == "string"
    old, new = jsonschema.Draft202012Validator(schema), jsonschema.Draft202012Validator(cut)
    for inst in instances(random.Random(4), 400):
        assert old.is_valid(inst) == new.is_valid(inst), inst
    dropped = sum(1 for k in re.findall(r'"(description|title|examples)": ', original)) - sum(
        1 for k in re.findall(r'"(description|title|examples)": ', json.dumps(cut))
    )
    assert re.fullmatch(
        rf"input schema cut from {json_len(schema):,} to {json_len(cut):,} characters of JSON \(limit 24,000\): "
        rf"{dropped:,} of \d+ descriptions, titles and examples left out",
        note,
    ), note


def test_a_schema_whose_structure_is_over_the_limit_keeps_its_top_level_properties() -> None:
    schema = big_schema(5, 1)
    for i in range(150):  # structure, not annotations: 150 properties with enums
        schema["properties"][f"e{i}"] = {"type": "string", "enum": [f"value-{j}" for j in range(5)]}
    _, cut, note = limit_tool("d", schema, ToolLimits(schema_chars=5_000))
    assert json_len(cut) <= 5_000 and cut["type"] == "object"
    assert list(cut["properties"]) == [
        *schema["required"],
        *(p for p in schema["properties"] if p not in schema["required"]),
    ]
    whole = [p for p, sub in cut["properties"].items() if "enum" in sub]
    assert whole == [f"e{i}" for i in range(len(whole))] and 10 < len(whole) < 150  # in order while they fit
    assert cut["properties"]["e149"] == {"type": "string"}
    jsonschema.Draft202012Validator.check_schema(cut)
    assert cut["required"] == ["description", "p3", "labels", "owner"]  # required ones first, all kept
    assert list(cut["properties"])[:4] == cut["required"]
    assert cut["properties"]["owner"] == {}  # its $ref points into $defs, which is gone
    assert "$defs" not in cut and "additionalProperties" not in cut  # a dropped property may still be passed
    assert cut["properties"]["labels"] == {"type": "array", "items": {"type": "string"}, "minItems": 1}  # whole
    assert re.search(rf"limit 5,000\): 161 of its 161 top-level properties kept \({len(whole) + 10:,} whole", note), (
        note
    )
    tiny = {"type": "object", "properties": {f"{'n' * 20}{i}": {"type": "string"} for i in range(100)}}
    _, cut, _ = limit_tool("d", tiny, ToolLimits(schema_chars=100))
    assert json_len(cut) <= 100 and len(cut["properties"]) == 1


def test_random_schemas_stay_valid_and_within_the_limit() -> None:
    rng = random.Random(9)

    def sub(depth: int) -> dict:
        s: dict[str, object] = {"type": rng.choice(["string", "integer", "object", "array"])}
        if rng.random() < 0.7:
            s["description"] = "w " * rng.randint(0, 400)
        if rng.random() < 0.2:
            s["title"] = "t" * rng.randint(0, 50)
        if s["type"] == "object" and depth < 4:
            s["properties"] = {f"k{i}": sub(depth + 1) for i in range(rng.randint(0, 6))}
        if s["type"] == "array" and depth < 4:
            s["items"] = sub(depth + 1)
        if rng.random() < 0.1:
            s["enum"] = ["description", "title"] * rng.randint(1, 30)
        return s

    for _ in range(200):
        schema = {"type": "object", "properties": {f"p{i}": sub(0) for i in range(rng.randint(0, 30))}}
        limit = rng.choice([100, 500, 2_000, 24_000])
        _, cut, note = limit_tool("d", schema, ToolLimits(schema_chars=limit))
        assert json_len(cut) <= max(limit, json_len(schema) if not note else 0)
        assert (cut == schema) == (note == "") == (json_len(schema) <= limit)
        jsonschema.Draft202012Validator.check_schema(cut)


def test_listed_tools_are_cut_and_the_files_own_are_not(tmp_path: Path) -> None:
    long = "Find things. " * 2000  # 26,000 characters
    server = McpServer("docs", {"tools": {"mine": {"description": long}, "big": {"include": "agent"}}})
    tools, listed = server_tools(server, [{"name": "big", "description": long, "inputSchema": big_schema(100, 60)}])
    by = {t.name: t for t in tools}
    assert len(by["big"].description) <= 10_000 and by["big"].description.endswith(CUT_MARK)
    assert json_len(by["big"].input_schema) <= 24_000
    assert (
        by["big"].cut_note.startswith("description cut from 26,000 to ")
        and "; input schema cut from" in by["big"].cut_note
    )
    assert by["big"].include is IncludeMode.AGENT  # the file's overrides still apply
    assert by["mine"].description == long and by["mine"].cut_note == ""  # the file's own text: never cut
    assert listed == {
        by["big"].key: (by["big"].description, json.dumps(by["big"].input_schema, sort_keys=True, default=str))
    }
    wide, _ = server_tools(server, [{"name": "big", "description": long}], limits=ToolLimits(description_chars=30_000))
    assert {t.name: t for t in wide}["big"].description == long

    # a catalog given to load_agent is listed input too; saving writes neither the cut nor a listed tool
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({"name": "a", "mcpServers": {"docs": server.config}}), encoding="utf-8")
    agent = load_agent(path, tools={"docs": [{"name": "big", "description": long}]})
    assert {t.name: t.cut_note != "" for t in agent.tools} == {"big": True, "mine": False}
    save_agent(agent, path)
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert doc["mcpServers"]["docs"]["tools"] == {"mine": {"description": long}, "big": {"include": "agent"}}
    with pytest.raises(AgentFileError, match="nested too deep"):
        deep: dict = {"type": "object"}
        for _ in range(100_000):
            deep = {"type": "object", "properties": {"x": deep}}
        server_tools(server, [{"name": "deep", "inputSchema": deep}])


def test_a_server_listing_a_one_megabyte_description_is_cut_reported_and_explained(tmp_path: Path) -> None:
    """A real stdio MCP server lists a 1 MB description: the agent gets it cut, ``contextsieve tools``'
    report names the cut, ``explain`` gives it as a reason, and the first request embeds a handful of
    chunks (the whole description would have been about 700)."""
    rng = random.Random(8)
    huge = random_text(rng, 160_000, breaks=False)
    assert len(huge) > 1_000_000
    listing = tmp_path / "tools.json"
    listing.write_text(
        json.dumps(
            [
                {"name": "fetch_page", "description": huge, "inputSchema": big_schema(100, 60)},
                {"name": "create_issue", "description": "Open an issue in the tracker with a title and body"},
            ]
        ),
        encoding="utf-8",
    )
    doc = {
        "name": "live",
        "mcpServers": {
            "web": {
                "type": "stdio",
                "command": sys.executable,
                "args": [str(SERVER), str(listing)],
                "serverToolDefaults": {"include": "agent", "permissionRequired": False},
            }
        },
    }
    agent_file = tmp_path / "agent.yaml"
    agent_file.write_text(yaml.safe_dump(doc), encoding="utf-8")
    fake = FakeEmbedder()
    engine = Engine.from_file(agent_file, connect=True, embedder=fake, cache_dir=tmp_path / "cache")
    assert engine.tool_catalog is not None
    report = engine.tool_catalog.servers[0]
    assert report.error is None and report.found == 2
    [line] = report.cut
    assert line.startswith(f"fetch_page: description cut from {len(huge):,} to ")
    assert f"web: tool {line}" in engine.tool_catalog.summary().splitlines()
    tool = engine.agent.get("tool:web:fetch_page")
    assert isinstance(tool, Tool) and len(tool.description) <= 10_000 and tool.cut_note == line.split(": ", 1)[1]
    assert engine.agent.get("tool:web:create_issue").cut_note == ""

    session = engine.session()
    request = session.build_request("fetch the page and read it")
    assert fake.texts < 40  # the cut description's chunks, the other tool, the message
    sent = [t for t in request.tools if t["description"].endswith(CUT_MARK)]
    assert all(len(t["description"]) <= 10_000 for t in request.tools) and len(sent) <= 1
    ex = explain_item(
        tool.key,
        request,
        session_mode=None,
        include_mode=engine.agent.include_mode(tool),
        tool_available=True,
        item=tool,
    )
    assert ex.reasons[-1].endswith(tool.cut_note) and "listed it over the input limits" in ex.reasons[-1]
    plain = explain_item(
        tool.key, request, session_mode=None, include_mode=engine.agent.include_mode(tool), tool_available=True
    )
    assert ex.reasons[:-1] == plain.reasons  # the rest of the explanation is unchanged
    other = engine.agent.get("tool:web:create_issue")
    assert not any(
        "input limits" in r
        for r in explain_item(
            other.key, request, session_mode=None, include_mode=IncludeMode.AGENT, tool_available=True, item=other
        ).reasons
    )


def test_an_agent_built_in_code_keeps_its_own_text() -> None:
    """The limits are for listings: a tool made in code is the caller's own and is never cut."""
    text = "word " * 5_000
    agent = Agent("a", servers={"s": McpServer("s", {})}, tools=[Tool("s", "t", text)])
    assert agent.tools[0].description == text and agent.tools[0].cut_note == ""


def test_a_framework_tool_is_held_to_the_limits_and_explain_says_so() -> None:
    """A framework's tools often come from MCP servers too: ToolSelector ranks them cut to ToolLimits
    (the framework still sends its own definition), and Session.explain names the cut."""
    from contextsieve.integrations.selector import ToolSelector, ToolSpec
    from tests.helpers.fake_embedder import FakeEmbedder

    huge = "fetch a page and return its text " * 40_000  # 1.3 MB without a sentence break
    selector = ToolSelector.from_tools(
        [ToolSpec("fetch_page", huge), ToolSpec("get_time", "the current time")],
        embedder=FakeEmbedder(),
        cache_dir=False,
    )
    tool = selector.session.agent.get("tool:tools:fetch_page")
    assert isinstance(tool, Tool) and len(tool.description) <= ToolLimits().description_chars
    assert tool.cut_note.startswith("description cut from")
    assert selector.choose("fetch the page text").keys[0] == tool.key
    reasons = selector.session.explain("fetch the page text", tool.key).reasons
    assert "over the input limits" in reasons[-1]


def test_a_long_tool_written_in_code_is_sent_whole_and_embedded_up_to_max_tool_chars() -> None:
    from tests.helpers.fake_embedder import FakeEmbedder

    huge = "fetch a page and return its text " * 30_000  # ~1 MB, the user's own text: never cut in what is sent
    agent = Agent(name="code")
    agent.add_server(McpServer("web", {}, IncludeMode.AGENT))
    agent.upsert(Tool("web", "fetch_page", huge))
    tool = agent.get("tool:web:fetch_page")
    assert isinstance(tool, Tool)

    def words(texts: Sequence[str]) -> list[int]:
        return [len(t.split()) + 2 for t in texts]

    chunks = chunk_item(tool, ChunkConfig(), words)
    assert 1 < len(chunks) and sum(len(c.text) for c in chunks) <= ChunkConfig().max_tool_chars + 100
    assert len(chunk_item(tool, ChunkConfig(max_tool_chars=10**7), words)) > 50 * len(chunks)
    request = Engine(agent, embedder=FakeEmbedder(), cache_dir=False).session().build_request("fetch the page text")
    assert [t["description"] for t in request.tools] == [huge]
    with pytest.raises(InputError, match="max_tool_chars"):
        ChunkConfig(max_tool_chars=0)
