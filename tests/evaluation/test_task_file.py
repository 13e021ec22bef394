"""Reading a task file as a stream of lines: line ends (only "\\n", CRLF too), deep nesting, lone surrogates
in any string, the limit on one line (memory for a line, not for the file), and a "did you mean" hint that
the reader accepts for tools whose server or name hold ':' or '%'."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest

from contextsieve import InputError, ItemKey, ItemKind, example_agent_path, load_agent
from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.items import Tool
from contextsieve.evaluation.tasks import MAX_LINE_BYTES, Step, Task, read_tasks

TRACK = ItemKey(ItemKind.TOOL, "track_parcel", "helpdesk")
LOG = ItemKey(ItemKind.TOOL, "git_log", "git")
SHAPES = 'a task is {"message": "...", "tools": [...]} or {"steps": [{"message": "...", "tools": [...]}, ...]}'
HOW = (
    "; name tools as SERVER:TOOL or by the name offered to the model (SERVER_TOOL), a : or % in a server's or "
    "tool's name as %3A or %25: `contextsieve tools AGENT` lists them"
)


@pytest.fixture(scope="module")
def agent() -> Agent:
    return load_agent(example_agent_path())


def _line(
    message: str = "Where is parcel 4512?", tools: tuple[str, ...] = ("helpdesk:track_parcel",), **more: str
) -> str:
    """One task's line; every character as it is (``ensure_ascii`` off: no ``\\u`` escapes)."""
    return json.dumps({**more, "message": message, "tools": list(tools)}, ensure_ascii=False)


def _refused(path: Path, agent: Agent) -> str:
    with pytest.raises(InputError) as e:
        read_tasks(path, agent)
    return str(e.value)


def test_a_deeply_nested_line_is_an_input_error_naming_the_line(tmp_path: Path, agent: Agent) -> None:
    path = tmp_path / "n.jsonl"
    path.write_text(_line() + "\n" + "[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    assert _refused(path, agent) == f"{path}, line 2: not a task: its JSON is nested too deeply to read; {SHAPES}"
    deep = '{"message": "m", "tools": [' + "[" * 400 + "]" * 400 + "]}"  # deep, yet not too deep to read
    path.write_text(deep + "\n", encoding="utf-8")
    assert _refused(path, agent) == (
        f"{path}, line 1: a tool is a non-empty string (or a list of them: any one will do), got " + "[" * 60
    )


def test_line_and_paragraph_separators_inside_strings_are_text(tmp_path: Path, agent: Agent) -> None:
    odd = "Where is\u2028parcel\u0085 4512?\u2029 Thanks"
    path = tmp_path / "sep.jsonl"
    lines = [_line(odd, id="a\u2028b"), "", _line("Show me\u2029 the git log.", ("git:git_log",))]
    path.write_bytes("\n".join(lines).encode("utf-8"))  # the separators as they are, the last line without end
    assert path.read_bytes().count("\u2028".encode()) == 2
    tasks = read_tasks(path, agent)
    assert tasks == [
        Task((Step(odd, ((TRACK,),)),), ((TRACK,),), "a\u2028b"),
        Task((Step("Show me\u2029 the git log.", ((LOG,),)),), ((LOG,),), "line 3"),
    ]
    with path.open("a", encoding="utf-8", newline="") as f:  # line 4: still counted right after them
        f.write('\n{"message": "x", "tools": ["nope"]}\n')
    assert _refused(path, agent).startswith(f"{path}, line 4: the agent has no tool 'nope'")


def test_crlf_files_and_a_last_line_without_its_end_still_read(tmp_path: Path, agent: Agent) -> None:
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(b"\r\n".join(x.encode() for x in (_line(id="one"), "", _line(id="two"), _line(id="3\r"))))
    assert path.read_bytes().count(b"\r") == 3  # the line ends' (JSON writes the id's own as the escape \\r)
    tasks = read_tasks(path, agent)
    assert [t.id for t in tasks] == ["one", "two", "3\r"]
    path.write_bytes(_line(id="one").encode() + b"\r\n" + b'{"message": "x",\r"tools": ["nope"]}\r\n')
    assert _refused(path, agent).startswith(f"{path}, line 2: the agent has no tool 'nope'")  # "\r" alone ends no line


@pytest.mark.parametrize(
    ("row", "error"),
    [
        (
            {"id": "\ud800", "message": "hi", "tools": ["git:git_log"]},
            ": id holds a lone surrogate '\\ud800' at character 0",
        ),
        (
            {"steps": [{"message": "hi", "tools": []}, {"message": "ok\udfff", "tools": ["git:git_log"]}]},
            ", step 2: \"message\" holds a lone surrogate '\\udfff' at character 2",
        ),
        (
            {"message": "hi", "tools": ["helpdesk:\udc00"]},
            ": the tool name \"helpdesk:\\udc00\" holds a lone surrogate '\\udc00' at character 9",
        ),
        (
            {"message": "hi", "tools": [["helpdesk:track_parcel", "tool:git:\ud83d"]]},
            ": the tool name \"tool:git:\\ud83d\" holds a lone surrogate '\\ud83d' at character 9",
        ),
        (
            {"message": "hi", "tools": ["\udbff"]},
            ": the tool name \"\\udbff\" holds a lone surrogate '\\udbff' at character 0",
        ),
    ],
)
def test_every_string_of_a_task_is_checked_for_lone_surrogates(
    row: dict[str, object], error: str, tmp_path: Path, agent: Agent
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(_line(id="fine") + "\n" + json.dumps(row) + "\n", encoding="utf-8")  # JSON's \\ud800 escapes
    assert "\\ud" in path.read_text(encoding="utf-8")
    assert _refused(path, agent) == f"{path}, line 2{error}; it is not valid Unicode text"


def _escaping_agent() -> Agent:
    """Servers and tools whose names hold ':' and '%' (legal in code: ItemKey escapes them), and a server
    named as a kind (so its tools' SERVER:TOOL reads as a key of that kind)."""
    agent = Agent(name="escapes")
    for server in ("s:v", "tool"):
        agent.add_server(McpServer(server))
    for server, name in (("s:v", "a:b"), ("s:v", "x%3Ay"), ("tool", "run")):
        agent.upsert(Tool(server, name, f"The {name} tool", {"type": "object"}))
    return agent


@pytest.mark.parametrize(
    ("refused", "hint", "key"),
    [
        ("s:v:a:b", "s%3Av:a%3Ab", ("s:v", "a:b")),  # was: did you mean 's:v:a:b' (the refused name itself)
        ("s%3Av:x%3Ay", "s%3Av:x%253Ay", ("s:v", "x%3Ay")),  # was: 's:v:x%3Ay' (refused too)
        ("tool:s:v:x%3Ay", "s%3Av:x%253Ay", ("s:v", "x%3Ay")),
        ("tool:run", "tool:tool:run", ("tool", "run")),  # 'tool:run' is no key: the whole key is offered
    ],
)
def test_the_hint_for_a_tool_named_with_colons_or_percents_is_a_name_the_reader_accepts(
    refused: str, hint: str, key: tuple[str, str], tmp_path: Path
) -> None:
    agent = _escaping_agent()
    path = tmp_path / "escapes.jsonl"
    path.write_text(_line(tools=(refused,)) + "\n", encoding="utf-8")
    assert _refused(path, agent) == f"{path}, line 1: the agent has no tool {refused!r} (did you mean {hint!r}?){HOW}"
    path.write_text(_line(tools=(hint,)) + "\n", encoding="utf-8")  # copying the hint works
    assert read_tasks(path, agent)[0].needs == ((ItemKey(ItemKind.TOOL, key[1], key[0]),),)


def test_the_hint_still_names_a_plain_tool_and_no_hint_when_nothing_is_close(tmp_path: Path, agent: Agent) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(_line(tools=("helpdesk:track_parcels",)) + "\n", encoding="utf-8")
    no_tool = f"{path}, line 1: the agent has no tool"
    assert _refused(path, agent) == f"{no_tool} 'helpdesk:track_parcels' (did you mean 'helpdesk:track_parcel'?){HOW}"
    path.write_text(_line(tools=("zzzzzzzzzzzzzzzzzzzzzz:qqqqqqqqqqqqq",)) + "\n", encoding="utf-8")
    assert _refused(path, agent) == f"{no_tool} 'zzzzzzzzzzzzzzzzzzzzzz:qqqqqqqqqqqqq'{HOW}"
    for shouted in ("HELPDESK:TRACK_PARCEL", "Helpdesk_Track_Parcel"):  # had no hint: too far apart for difflib
        path.write_text(_line(tools=(shouted,)) + "\n", encoding="utf-8")
        hint = "helpdesk:track_parcel" if ":" in shouted else "helpdesk_track_parcel"
        assert _refused(path, agent) == f"{no_tool} {shouted!r} (did you mean {hint!r}?){HOW}"


def test_a_line_longer_than_the_limit_is_refused_and_one_at_the_limit_is_read(tmp_path: Path, agent: Agent) -> None:
    path = tmp_path / "long.jsonl"
    base = _line(message="Where is parcel 4512?")
    full = base.replace("4512?", "4512?" + " " * (MAX_LINE_BYTES - len(base.encode())))
    assert len(full.encode()) == MAX_LINE_BYTES
    path.write_bytes(full.encode() + b"\r\n" + full.encode())  # at the limit, with and without its end
    assert [t.message.rstrip() for t in read_tasks(path, agent)] == ["Where is parcel 4512?"] * 2
    over = full.replace("?", "? ", 1).encode()
    path.write_bytes(full.encode() + b"\n" + over + b"\n")
    assert _refused(path, agent) == (
        f"{path}, line 2: longer than {MAX_LINE_BYTES:,} bytes, the limit for one task (each line is one task)"
    )
    assert MAX_LINE_BYTES == 8 * 1024 * 1024


def test_a_huge_file_without_a_line_end_is_refused_with_memory_for_one_line(tmp_path: Path, agent: Agent) -> None:
    path = tmp_path / "sparse.jsonl"
    with path.open("wb") as f:
        f.truncate(256 * 1024 * 1024)  # sparse: 256 MiB of zero bytes on no disk
    tracemalloc.start()
    try:
        message = _refused(path, agent)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (
        message
        == f"{path}, line 1: longer than {MAX_LINE_BYTES:,} bytes, the limit for one task (each line is one task)"
    )
    assert peak < 4 * MAX_LINE_BYTES, peak  # reading the file whole took more than the file's size


def test_a_file_larger_than_the_line_limit_of_valid_lines_is_read_whole(tmp_path: Path, agent: Agent) -> None:
    path = tmp_path / "many.jsonl"
    pad = "x" * 1000
    with path.open("w", encoding="utf-8") as f:
        for i in range(12_000):
            f.write(_line(f"Where is parcel {i}? {pad}", id=f"t{i}") + "\n")
    assert os.path.getsize(path) > MAX_LINE_BYTES
    tasks = read_tasks(path, agent)
    assert len(tasks) == 12_000 and tasks[-1].id == "t11999" and tasks[-1].needs == ((TRACK,),)


def test_text_that_is_not_utf8_names_its_line(tmp_path: Path, agent: Agent) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(_line().encode() + b"\n" + _line("Wo ist Paket 4512? Gr\xfc\xdfe").encode("latin-1") + b"\n")
    assert _refused(path, agent) == (
        f"{path}, line 2: cannot read the task file as UTF-8 text: 'utf-8' codec can't decode byte 0xfc in "
        "position 34: invalid start byte"
    )
    assert _refused(tmp_path / "none.jsonl", agent).startswith(f"cannot read the task file {tmp_path / 'none.jsonl'}: ")


def test_a_byte_order_mark_before_the_first_line_is_dropped(tmp_path: Path, agent: Agent) -> None:
    """Issue: a task file saved by a Windows editor (UTF-8 with a BOM) was "not JSON" at line 1. Only the
    file's start may hold one: a BOM opening a later line is still an error naming that line."""
    plain, marked = tmp_path / "plain.jsonl", tmp_path / "bom.jsonl"
    text = _line() + "\r\n" + _line("Show me the git log.", ("git:git_log",)) + "\r\n"
    plain.write_text(text, encoding="utf-8")
    marked.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    assert read_tasks(marked, agent) == read_tasks(plain, agent)
    assert [t.steps[0].message for t in read_tasks(marked, agent)] == ["Where is parcel 4512?", "Show me the git log."]
    later = tmp_path / "later.jsonl"
    later.write_bytes((_line() + "\n").encode() + b"\xef\xbb\xbf" + (_line() + "\n").encode())
    assert _refused(later, agent).startswith(f"{later}, line 2: not JSON (")


def test_an_id_names_one_task(tmp_path: Path, agent: Agent) -> None:
    """Issue: two tasks of one id were accepted, so the report's missed-task ids were ambiguous."""
    path = tmp_path / "dup.jsonl"
    path.write_text(_line(id="parcel") + "\n\n" + _line("Show me the git log.", ("git:git_log",), id="parcel") + "\n")
    assert (
        _refused(path, agent) == f"{path}, line 3: the id 'parcel' is the task's of line 1 too; ids name one task each"
    )
    path.write_text(_line(id="parcel") + "\n" + _line("Show me the git log.", ("git:git_log",)) + "\n")
    assert [t.id for t in read_tasks(path, agent)] == ["parcel", "line 2"]


def test_a_key_given_twice_is_refused_and_a_default_id_clash_says_whose_it_is(tmp_path: Path, agent: Agent) -> None:
    """Issues (a hostile probe): a line giving "message" or "tools" twice was read with the last value
    silently (the agent file's loader refuses duplicate keys); an id clashing with a line's default id
    blamed the line that gave none without saying so."""
    path = tmp_path / "twice.jsonl"
    path.write_text(
        '{"message": "Where is my parcel?", "message": "Roll back the payments service", '
        '"tools": ["helpdesk:track_parcel"]}\n'
    )
    assert _refused(path, agent) == f"{path}, line 1: the key 'message' is given twice in one object; {SHAPES}"
    path.write_text('{"steps": [{"message": "a", "tools": [], "tools": ["helpdesk:track_parcel"]}]}\n')
    assert "the key 'tools' is given twice" in _refused(path, agent)
    path.write_text(_line(id="line 2") + "\n" + _line("Show me the git log.", ("git:git_log",)) + "\n")
    assert _refused(path, agent) == (
        f"{path}, line 2: the id 'line 2' (this line's own, as it gives none) is the task's of line 1 too; "
        "ids name one task each"
    )
