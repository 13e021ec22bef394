"""What the CLI is given, checked before anything is changed or read whole: ``history --tool`` names a tool
of the agent or of its history (never "no tool", which forgot everything), a file named on the command line
(``--tools``, ``--message-file``, ``--session``, the task file) or standard input is read only when it is a
regular file and at most 64 MiB, a tool catalog of another shape is one clear error (CLI and API), and every
warning of contextsieve prints as one ``contextsieve: warning:`` line."""

from __future__ import annotations

import json
import os
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from contextsieve import Engine, errors, example_agent_path, load_agent
from contextsieve.agent.items import ItemKey
from contextsieve.agent.registry import AgentRegistry
from contextsieve.cli.main import _show_warning, main
from contextsieve.errors import InputError
from contextsieve.evaluation.tasks import example_tasks_path
from contextsieve.fileio import DATA_ENV, MAX_INPUT_BYTES
from contextsieve.models.cache import CACHE_ENV

AGENT = str(example_agent_path())
TASKS = str(example_tasks_path())
SHAPE = '{"SERVER": [{"name": "TOOL", "description": "...", "inputSchema": {...}}, ...], ...}'
HOW = "name a tool as SERVER:TOOL or by the name offered to the model (SERVER_TOOL)"


@pytest.fixture(autouse=True)
def tmp_cache(model_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(model_cache))  # the session's model cache: graphs are built once
    return model_cache


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own data folder (agent registry, learned history)."""
    folder = tmp_path / "data"
    monkeypatch.setenv(DATA_ENV, str(folder))
    return folder


def _agent_file(path: Path, servers: dict[str, list[str]]) -> Path:
    """An agent file whose servers declare the named tools (each with a description)."""
    doc = {
        "name": "ops-desk",
        "systemPrompt": "You run operations.",
        "mcpServers": {
            server: {
                "type": "stdio",
                "command": f"{server}-mcp",
                "serverToolDefaults": {"include": "agent"},
                "tools": {t: {"description": f"{t} of {server}", "inputSchema": {"type": "object"}} for t in tools},
            }
            for server, tools in servers.items()
        },
    }
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def _record(path: Path, calls: dict[str, str]) -> None:
    """Record each message with its tool, as a host does, in the agent's kept history."""
    engine = Engine.from_file(path, registry=AgentRegistry())
    for message, tool in calls.items():
        engine.record_tool_calls(message, [tool])


def _history(path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The tool lines ``contextsieve history`` prints (after the heading)."""
    assert main(["history", str(path)]) == 0
    return capsys.readouterr().out.splitlines()[1:]


def _run(*args: str, stdin: int | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own (a FIFO or a device opened by mistake hangs that one, not the tests)."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-m", "contextsieve", *args],
        stdin=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


# -- history --tool ---------------------------------------------------------------------------------------


def test_history_tool_is_checked_and_a_bad_one_forgets_nothing(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue: `history AGENT --forget --tool ""` forgot the agent's whole history, and `nope:x`, `:b` or
    `ops:rollback%zz` said "forgot 0" with exit 0."""
    path = _agent_file(tmp_path / "agent.yaml", {"ops": ["rollback", "restart"], "ci": ["rerun"]})
    _record(path, {"undo the checkout deploy": "ops:rollback", "rerun the release pipeline": "ci:rerun"})
    both = ["tool:ci:rerun\t1 examples\t0 misses", "tool:ops:rollback\t1 examples\t0 misses"]
    assert _history(path, capsys) == both
    unknown = "the agent has no such tool and its history holds no records of one"
    tail = f"{HOW}: `contextsieve tools AGENT` lists the agent's tools, `contextsieve history AGENT` the recorded ones"
    cases = {
        "": f"--tool is empty: {HOW} (`contextsieve history AGENT --forget` forgets every tool's)",
        " ": f"--tool is empty: {HOW} (`contextsieve history AGENT --forget` forgets every tool's)",
        "nope:x": f"--tool 'nope:x': {unknown}; {tail}",
        ":b": f"--tool ':b': {unknown}; {tail}",
        "ops:rollback%zz": f"--tool 'ops:rollback%zz': {unknown} (did you mean 'ops:rollback'?); {tail}",
        "ops:rolback": f"--tool 'ops:rolback': {unknown} (did you mean 'ops:rollback'?); {tail}",
        "ops_rolback": f"--tool 'ops_rolback': {unknown} (did you mean 'ops_rollback'?); {tail}",
        "rule:tone": f"--tool 'rule:tone': {unknown}; {tail}",
        "tool:ops": f"--tool 'tool:ops': {unknown}; {tail}",
    }
    for text, error in cases.items():
        for forget in (["--forget"], []):
            assert main(["history", str(path), "--tool", text, *forget]) == 1, text
            captured = capsys.readouterr()
            assert (captured.out, captured.err) == ("", f"contextsieve: error: {error}\n"), text
    assert _history(path, capsys) == both  # nothing was forgotten
    assert main(["history", str(path), "--tool", "tool:ci:rerun"]) == 0  # a listing of one tool
    assert capsys.readouterr().out.splitlines()[1:] == both[:1]
    assert main(["history", str(path), "--tool", "ops:restart"]) == 0  # the agent's, nothing recorded
    assert capsys.readouterr().out.splitlines()[1:] == []
    for offered in ("ops_rollback", "tool:ci:rerun"):  # the offered name and the key form
        assert main(["history", str(path), "--forget", "--tool", offered]) == 0
        key = "tool:ops:rollback" if offered == "ops_rollback" else offered
        assert capsys.readouterr().out.startswith(f"forgot 1 recorded requests of tool {key} (")
    assert _history(path, capsys) == []


def test_the_history_of_a_tool_the_agent_no_longer_has_can_be_forgotten(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tool taken out of the agent file keeps its records: they can be forgotten by its key or by the name
    it was offered under, while a tool that is neither the agent's nor in its history is refused."""
    path = _agent_file(tmp_path / "agent.yaml", {"ops": ["rollback"], "ci": ["rerun", "deploy"]})
    _record(path, {"rerun the release pipeline": "ci_rerun", "deploy the release": "ci_deploy"})  # offered names
    _agent_file(path, {"ops": ["rollback"]})  # the ci server is gone from the file
    assert _history(path, capsys) == ["tool:ci:deploy\t1 examples\t0 misses", "tool:ci:rerun\t1 examples\t0 misses"]
    assert main(["history", str(path), "--forget", "--tool", "ci:rerun"]) == 0
    assert capsys.readouterr().out.startswith("forgot 1 recorded requests of tool tool:ci:rerun (")
    assert main(["history", str(path), "--forget", "--tool", "ci:rerun"]) == 1  # neither the agent's nor recorded
    assert capsys.readouterr().err.startswith("contextsieve: error: --tool 'ci:rerun': the agent has no such tool")
    assert (
        main(["history", str(path), "--forget", "--tool", "ci_deploy"]) == 0
    )  # its offered name, kept by the registry
    assert capsys.readouterr().out.startswith("forgot 1 recorded requests of tool tool:ci:deploy (")
    assert _history(path, capsys) == []


def test_history_says_whether_the_file_holds_request_text(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue (a hostile probe): `history AGENT` said "without request text" of a file that held the words
    a `--remember-requests` gateway recorded (it printed its own engine's setting)."""
    path = _agent_file(tmp_path / "agent.yaml", {"ops": ["rollback"], "ci": ["rerun"]})
    _record(path, {"undo the checkout deploy": "ops:rollback"})
    assert main(["history", str(path)]) == 0
    assert ", holding no request text" in capsys.readouterr().out.splitlines()[0]
    engine = Engine.from_file(path, registry=AgentRegistry(), remember_requests=True)
    engine.record_tool_calls("rerun the release pipeline", ["ci:rerun"])
    assert main(["history", str(path)]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.endswith(", holding the text of 1 recorded requests (kept with --remember-requests)"), head


def test_the_history_of_an_agent_whose_file_is_gone_is_listed_and_forgotten_by_identity(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue (a hostile probe): the history of a deleted agent file stayed in history.sqlite with no command
    to name it (`contextsieve history` took an agent file), so it could not be forgotten. `history` alone
    lists every agent the file holds records of, with its file, and `history agent:<identity>` shows or
    forgets one; another agent's history is untouched, and a wrong identity or tool forgets nothing."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    gone = _agent_file(tmp_path / "a" / "agent.yaml", {"ops": ["rollback"], "ci": ["rerun"]})
    _record(gone, {"undo the checkout deploy": "ops:rollback", "rerun the release pipeline": "ci:rerun"})
    kept = _agent_file(tmp_path / "b" / "agent.yaml", {"ops": ["rollback"]})
    kept.write_text(kept.read_text().replace("ops-desk", "night-desk"))
    _record(kept, {"roll the deploy back": "ops:rollback"})
    ids = {p: Engine.from_file(p, registry=AgentRegistry()).agent.identity for p in (gone, kept)}
    assert len(set(ids.values())) == 2
    capsys.readouterr()
    gone.unlink()
    assert main(["history"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"history in {data / 'history.sqlite'}: 2 agents", out
    lines = {line.split("\t")[0]: line.split("\t")[1:] for line in out[1:-1]}
    assert lines[f"agent:{ids[gone]}"][:2] == ["2 examples", "0 misses"]
    assert lines[f"agent:{ids[gone]}"][3] == f"agent 'ops-desk' at {gone.resolve()} (the file is gone)"
    assert lines[f"agent:{ids[kept]}"][3] == f"agent 'night-desk' at {kept.resolve()}"
    assert main(["history", f"agent:{ids[gone]}"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "tool:ci:rerun\t1 examples\t0 misses",
        "tool:ops:rollback\t1 examples\t0 misses",
    ]
    for wrong in ([f"agent:{ids[gone]}x", "--forget"], [f"agent:{ids[gone]}", "--forget", "--tool", "ci:deploy"]):
        assert main(["history", *wrong]) == 1
        assert "holds no records of" in capsys.readouterr().err
    assert main(["history", "--forget"]) == 1  # forgetting needs an agent named
    assert "name the agent" in capsys.readouterr().err
    assert main(["history", "", "--forget"]) == 1  # not the current folder's agent
    assert "AGENT is empty" in capsys.readouterr().err
    assert main(["history", f"agent:{ids[gone]}", "--forget", "--tool", "ci:rerun"]) == 0
    assert main(["history", f"agent:{ids[gone]}", "--forget"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith(f"forgot 1 recorded requests of agent:{ids[gone]} (")
    assert main(["history"]) == 0
    assert [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()[1:-1]] == [f"agent:{ids[kept]}"]
    assert _history(kept, capsys) == ["tool:ops:rollback\t1 examples\t0 misses"]


def test_the_list_of_histories_holds_damaged_times_odd_names_and_replaced_files(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue (a hostile probe of the list): a record time far in the future crashed `contextsieve history`
    (`datetime` overflow), an identity with a newline broke its one line per agent, a name stored as bytes
    that are not text was listed and then "forgot 0" with success, and an agent whose path now holds
    another agent's file was shown at that file as if it were still its own."""
    from contextsieve.agent.usage import UsageLog

    first = _agent_file(tmp_path / "agent.yaml", {"ops": ["rollback"]})
    _record(first, {"undo the checkout deploy": "ops:rollback"})
    old = Engine.from_file(first, registry=AgentRegistry()).agent.identity
    first.unlink()
    _agent_file(first, {"ci": ["rerun"]}).write_text(first.read_text().replace("ops-desk", "ci-desk"))
    _record(first, {"rerun the release pipeline": "ci:rerun"})
    log = UsageLog(data / "history.sqlite", keep_text=True)
    rollback = ItemKey.parse("tool:ops:rollback")
    for scope in ("odd\nname", "future", "bytes"):
        log.record(scope, "hello", [rollback])
    db = sqlite3.connect(data / "history.sqlite")
    db.execute("UPDATE examples SET at = 1e300 WHERE agent = 'future'")
    db.execute("UPDATE examples SET agent = CAST(x'627974657380' AS TEXT) WHERE agent = 'bytes'")
    db.commit()
    db.close()
    capsys.readouterr()
    assert main(["history"]) == 0
    lines = {line.split("\t")[0]: line.split("\t")[1:] for line in capsys.readouterr().out.splitlines()[1:-1]}
    assert len(lines) == 5, lines
    assert lines["agent:future"][2] == "last an unknown day"
    assert "$'agent:odd\\x0aname'" in lines  # a shell word on its one line, to paste into `history`
    new = Engine.from_file(first, registry=AgentRegistry()).agent.identity
    assert (
        lines[f"agent:{old}"][3] == f"agent 'ops-desk' at {first.resolve()} (another agent's file since: agent:{new})"
    )
    assert lines[f"agent:{new}"][3] == f"agent 'ci-desk' at {first.resolve()}"
    (damaged,) = shlex.split(next(k for k in lines if "agent:bytes" in k))  # as a shell reads it
    assert main(["history", damaged, "--forget"]) == 1
    assert "are stored under a damaged name (bytes that are not valid text)" in capsys.readouterr().err
    assert main(["history", f"agent:{old}", "--forget", "--tool", " "]) == 1
    assert "--tool is empty" in capsys.readouterr().err


# -- files named on the command line ------------------------------------------------------------------------


def _deep(depth: int) -> str:
    return '{"x":' + "[" * depth + "]" * depth + "}"


CATALOGS = {  # the file's text -> the end of the one error line
    "[1]": f" must be an object {SHAPE}, got [1]",
    '{"helpdesk": 5}': ": server 'helpdesk' must map to a list of tools, got 5",
    '{"helpdesk": "track_parcel"}': ": server 'helpdesk' must map to a list of tools, got 'track_parcel'",
    '{"helpdesk": [1]}': ": tool 0 of server 'helpdesk' must be an object with a non-empty string \"name\" "
    "(an MCP tools/list entry), got 1",
    '{"helpdesk": [{"name": "get_ticket"}, {"description": "x"}]}': ": tool 1 of server 'helpdesk' must be an "
    "object with a non-empty string \"name\" (an MCP tools/list entry), got {'description': 'x'}",
    "{": ": not a JSON tool catalog (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
    _deep(100_000): ": not a JSON tool catalog (nested too deeply)",
}


@pytest.mark.parametrize("text", sorted(CATALOGS), ids=lambda t: t[:30])
def test_a_tool_catalog_of_another_shape_is_one_clear_error(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue: `--tools` with `[1]` raised AttributeError, a deeply nested file RecursionError."""
    catalog = tmp_path / "catalog.json"
    catalog.write_text(text, encoding="utf-8")
    for command in (["select", AGENT, "hi", "--offline"], ["eval", AGENT, TASKS], ["index", AGENT]):
        assert main([*command, "--tools", str(catalog)]) == 1
        captured = capsys.readouterr()
        assert (captured.out, captured.err) == ("", f"contextsieve: error: --tools {catalog}{CATALOGS[text]}\n")


def test_the_api_refuses_a_catalog_of_another_shape() -> None:
    """`Engine.from_file(path, tools=[1])` raised AttributeError; every loader of a catalog checks it."""
    with pytest.raises(InputError) as e:
        Engine.from_file(AGENT, tools=[1])  # type: ignore[arg-type]
    assert str(e.value) == f"tools must be an object {SHAPE}, got [1]"
    with pytest.raises(InputError) as e:
        load_agent(AGENT, tools={"helpdesk": [{"name": ""}]})
    assert str(e.value) == (
        "tools: tool 0 of server 'helpdesk' must be an object with a non-empty string \"name\" (an MCP tools/list "
        "entry), got {'name': ''}"
    )
    agent = load_agent(AGENT, tools={"helpdesk": [{"name": "escalate", "description": "Escalate a ticket"}]})
    assert "escalate" in {t.name for t in agent.tools if t.server == "helpdesk"}  # a good one still loads


def test_a_catalog_or_message_file_over_the_limit_is_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(MAX_INPUT_BYTES + 1)  # sparse: nothing written to the disk
    size = f"{MAX_INPUT_BYTES + 1:,}"
    assert main(["select", AGENT, "hi", "--tools", str(big)]) == 1
    assert capsys.readouterr().err == f"contextsieve: error: --tools {big} is {size} bytes, over the limit of 64 MiB\n"
    assert main(["select", AGENT, "--message-file", str(big)]) == 1
    assert capsys.readouterr().err == (
        f"contextsieve: error: --message-file {big} is {size} bytes, over the limit of 64 MiB\n"
    )
    assert main(["select", AGENT, "hi", "--tools", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"contextsieve: error: --tools {tmp_path} is a folder, not a regular file\n"
    assert main(["select", AGENT, "hi", "--tools", str(tmp_path / "none.json")]) == 1
    assert capsys.readouterr().err == (
        f"contextsieve: error: cannot read --tools {tmp_path / 'none.json'} (No such file or directory)\n"
    )
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9")
    assert main(["select", AGENT, "hi", "--tools", str(tmp_path / "latin1.txt")]) == 1
    assert "not a JSON tool catalog ('utf-8' codec can't decode byte 0xe9" in capsys.readouterr().err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_is_refused_unopened(tmp_path: Path) -> None:
    """Issue: a FIFO with no writer given to --tools or --message-file hung forever."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases = {
        ("select", AGENT, "hi", "--tools", str(fifo)): "--tools",
        ("eval", AGENT, TASKS, "--tools", str(fifo)): "--tools",
        ("select", AGENT, "--message-file", str(fifo)): "--message-file",
        ("inspect", AGENT, "--session", str(fifo)): "--session",
    }
    for args, what in cases.items():
        done = _run(*args)
        assert (done.returncode, done.stdout) == (1, ""), args
        assert done.stderr == f"contextsieve: error: {what} {fifo} is a FIFO (named pipe), not a regular file\n"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_an_agent_folder_whose_file_is_a_fifo_or_a_link_loop_says_so(tmp_path: Path) -> None:
    """Issue (a hostile probe): an agent folder whose tsagent.yaml is a FIFO, a folder, a link loop or a
    link to nothing was reported as holding no agent file; each is named now, and the FIFO is not opened."""
    cases: dict[str, str] = {}
    for name, how in (("fifo", "not a regular file"), ("folder", "not a regular file"), ("loop", "loop")):
        folder = tmp_path / name
        folder.mkdir()
        if name == "fifo":
            os.mkfifo(folder / "tsagent.yaml")
        elif name == "folder":
            (folder / "tsagent.yml").mkdir()
        else:
            (folder / "tsagent.yaml").symlink_to(folder / "other")
            (folder / "other").symlink_to(folder / "tsagent.yaml")
        cases[str(folder)] = how
    (tmp_path / "gone").mkdir()
    (tmp_path / "gone" / "tsagent.json").symlink_to(tmp_path / "nowhere")
    cases[str(tmp_path / "gone")] = "gone"
    for folder, how in cases.items():
        done = _run("tools", folder)
        assert (done.returncode, done.stdout) == (1, ""), folder
        named = next(p for p in Path(folder).iterdir() if p.name.startswith("tsagent"))
        if how in ("loop", "gone"):
            want = f"{named}: a link that leads to no file (a loop, or its target is gone)"
        else:
            want = f"{named}: {how}"
        assert done.stderr == f"contextsieve: error: {want}\n", done.stderr


def test_a_command_started_with_its_output_closed_fails_and_says_so() -> None:
    """Issue (a hostile probe): `contextsieve eval ... >&-` exited 0 with every line lost (Python sets a
    closed standard output to None, and print writes nowhere)."""
    shell = 'exec "$0" -m contextsieve tools "$1" >&-'
    done = subprocess.run(
        ["sh", "-c", shell, sys.executable, AGENT], capture_output=False, stderr=subprocess.PIPE, text=True, timeout=120
    )
    assert done.returncode == 1
    assert done.stderr == "contextsieve: error: standard output is closed, so nothing could be printed\n"


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_an_endless_device_or_stdin_is_not_read_whole() -> None:
    """Issue: `--tools /dev/zero` and `--message-file /dev/zero` grew to GBs of memory."""
    for option in ("--tools", "--message-file"):
        args = (
            ("select", AGENT, "hi", option, "/dev/zero")
            if option == "--tools"
            else ("select", AGENT, option, "/dev/zero")
        )
        done = _run(*args)
        assert (done.returncode, done.stderr) == (
            1,
            f"contextsieve: error: {option} /dev/zero is a device, not a regular file\n",
        )
    with open("/dev/zero", "rb") as zero:
        done = _run("select", AGENT, "-", stdin=zero.fileno())
    assert (done.returncode, done.stderr) == (
        1,
        "contextsieve: error: the message on standard input holds more than 64 MiB, the most contextsieve reads\n",
    )


# -- warnings -------------------------------------------------------------------------------------------------


def test_every_contextsieve_warning_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    own = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, Warning)]
    assert all(issubclass(c, errors.ContextSieveWarning) for c in own)
    assert len(own) >= 7 and errors.UsageLogWarning in own  # the base and its six
    passed_on: list[type[Warning]] = []  # what Python's own printing (the previous showwarning) is given
    show = _show_warning(lambda message, category, *rest, **kw: passed_on.append(category))
    for category in own:
        show(category(f"what {category.__name__} says"), category, "/x/engine/agent/usage.py", 316)
        assert capsys.readouterr().err == f"contextsieve: warning: what {category.__name__} says\n"
    assert passed_on == []
    show(DeprecationWarning("a library's own"), DeprecationWarning, "/x/lib.py", 3)  # not ours: as Python would
    assert passed_on == [DeprecationWarning] and capsys.readouterr().err == ""


def test_a_damaged_history_warns_in_one_line(tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue: `contextsieve history` printed UsageLogWarning as Python does (file, line, source line)."""
    path = _agent_file(tmp_path / "agent.yaml", {"ops": ["rollback"], "ci": ["rerun"]})
    _record(path, {"undo the checkout deploy": "ops:rollback", "rerun the release pipeline": "ci:rerun"})
    db = sqlite3.connect(data / "history.sqlite")
    db.execute("UPDATE examples SET at = 'noon' WHERE tool = 'rerun'")  # a hand edit
    db.commit()
    db.close()
    assert main(["history", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[1:] == ["tool:ops:rollback\t1 examples\t0 misses"]
    assert captured.err.startswith(f"contextsieve: warning: the usage log {data / 'history.sqlite'} holds damaged")
    assert len(captured.err.splitlines()) == 1 and "UsageLogWarning" not in captured.err


def test_a_good_catalog_still_loads_through_the_guarded_reader(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The catalog's tool is the agent's: `--explain` finds it (an unknown key would be an error)."""
    catalog = tmp_path / "catalog.json"
    entry = {"name": "escalate_ticket", "description": "Escalate a support ticket to the on-call engineer"}
    catalog.write_text(json.dumps({"helpdesk": [entry]}), encoding="utf-8")
    key = "tool:helpdesk:escalate_ticket"
    assert main(["select", AGENT, "Escalate ticket 4411 now.", "--tools", str(catalog), "--explain", key]) == 0
    assert f"\n{key}: " in capsys.readouterr().out
    assert main(["select", AGENT, "Escalate ticket 4411 now.", "--explain", key]) == 1  # not the agent's without it
    assert "contextsieve: error: " in capsys.readouterr().err


def test_a_byte_order_mark_opens_a_catalog_or_message_file_as_without_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue: a catalog saved by a Windows editor (UTF-8 with a BOM) was "not a JSON tool catalog", and a
    message file's BOM became part of the message."""
    entry = {"name": "escalate_ticket", "description": "Escalate a support ticket to the on-call engineer"}
    outputs = []
    for bom in (b"", b"\xef\xbb\xbf"):
        catalog, message = tmp_path / f"catalog{len(bom)}.json", tmp_path / f"message{len(bom)}.txt"
        catalog.write_bytes(bom + json.dumps({"helpdesk": [entry]}).encode())
        message.write_bytes(bom + "Escalate ticket 4411 now.".encode())
        args = ["select", AGENT, "--message-file", str(message), "--tools", str(catalog), "--json"]
        assert main(args) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    with_bom = outputs[1]["context"]
    assert with_bom["query"] == "Escalate ticket 4411 now."
    assert "escalate_ticket" in {i["name"] for i in with_bom["items"] if i["type"] == "tool"}
    assert outputs[0]["context"]["items"] == with_bom["items"]


# -- what no check names --------------------------------------------------------------------------------------


def test_a_path_too_long_to_look_up_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue: a name over the system's limit (ENAMETOOLONG, or a folder that may not be searched) stopped
    `eval`, `history` and a data folder's history with an OSError traceback."""
    long = "a" * 300
    assert main(["eval", AGENT, str(tmp_path / f"{long}.jsonl")]) == 1
    assert (
        capsys.readouterr().err
        == f"contextsieve: error: cannot read the task file {tmp_path / long}.jsonl: File name too long\n"
    )
    assert main(["history", str(tmp_path / f"{long}.yaml")]) == 1
    assert capsys.readouterr().err == f"contextsieve: error: {tmp_path / long}.yaml: cannot read: File name too long\n"
    monkeypatch.setenv("CONTEXTSIEVE_DATA", str(tmp_path / long))
    assert main(["history", AGENT]) == 1
    err = capsys.readouterr().err.splitlines()
    assert (
        err[-1]
        == f"contextsieve: error: cannot open the usage log {tmp_path / long / 'history.sqlite'}: File name too long"
    )


def test_output_that_cannot_be_written_or_shown_is_no_traceback(tmp_path: Path) -> None:
    """Issue: stdout on a full disk stopped `history` with an OSError traceback, and a name the terminal's
    encoding cannot show (PYTHONIOENCODING=ascii) with UnicodeEncodeError."""
    env = {**os.environ, "CONTEXTSIEVE_DATA": str(tmp_path / "data")}
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "contextsieve", "history", AGENT],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=120,
        )
    assert (done.returncode, done.stderr) == (1, "contextsieve: error: [Errno 28] No space left on device\n")
    agent = tmp_path / "agent.yaml"
    agent.write_text(
        Path(AGENT).read_text(encoding="utf-8").replace("name: Acme Shop assistant", "name: Acme 日本"),
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "contextsieve", "history", str(agent)],
        capture_output=True,
        env={**env, "PYTHONIOENCODING": "ascii"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"agent 'Acme \\u65e5\\u672c' (")


def test_eval_never_opens_the_agent_s_own_history(capsys: pytest.CaptureFixture[str], data: Path) -> None:
    """Issue: `eval` said the agent's history is neither used nor changed, but indexing the agent read it
    (a damaged file printed a warning; a file of another schema was altered)."""
    data.mkdir()
    history = data / "history.sqlite"
    history.write_bytes(b"not a database " * 100)
    assert main(["eval", AGENT, TASKS, "--folds", "0"]) == 0
    captured = capsys.readouterr()
    assert "| cold |" in captured.out and "usage log" not in captured.err
    assert history.read_bytes() == b"not a database " * 100
    assert not [p.name for p in data.iterdir() if p.name.startswith("history.sqlite-")]  # no WAL of it either


def test_a_long_evaluation_says_how_far_it_is(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue: 20,000 tasks ran for minutes with nothing on stderr. Here every task run is "long" (a note at
    each), so the notes count every run and every recorded task."""
    from contextsieve.evaluation import runner

    monkeypatch.setattr(runner, "PROGRESS_EVERY", 0.0)
    assert main(["eval", AGENT, TASKS, "--folds", "2"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("contextsieve: evaluating: ")]
    assert notes[-1] == "contextsieve: evaluating: 24 of 24 task runs, 12 of 12 tasks recorded as history"
    runs = [int(line.split()[2]) for line in notes]
    assert runs == sorted(runs) and len(notes) == 24 + 4  # a note per task run and per fold's engine
    monkeypatch.setattr(runner, "PROGRESS_EVERY", 3600.0)
    assert main(["eval", AGENT, TASKS, "--folds", "0"]) == 0
    assert "evaluating" not in capsys.readouterr().err  # a short run says nothing
