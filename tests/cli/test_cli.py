"""The CLI on the bundled example agent, with the real model (caches in tmp dirs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextsieve import example_agent_path
from contextsieve.cli.agent_commands import DEMO_MESSAGES
from contextsieve.cli.main import main
from contextsieve.models.cache import CACHE_ENV


@pytest.fixture(autouse=True)
def tmp_cache(model_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(model_cache))  # the session's model cache: graphs are built once
    return model_cache


def test_select_json_picks_the_shipping_rule(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["select", str(example_agent_path()), "My parcel is late and has not moved for a week.", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    items = {(i["type"], i["name"]): i for i in out["context"]["items"]}  # the reference's RequestContextItem
    assert (
        items[("rule", "tone")]["includeMode"] == "always" and items[("rule", "no-secrets")]["includeMode"] == "always"
    )
    agent_items = [i for i in out["context"]["items"] if i["includeMode"] == "agent"]
    assert (agent_items[0]["type"], agent_items[0]["name"]) == ("rule", "shipping-delays")
    assert 0 < agent_items[0]["similarityScore"] <= 1 and "query_chunk" in agent_items[0]["contextsieve"]
    assert out["request"]["messages"][0]["role"] == "system" and out["request"]["messages"][-1]["content"].startswith(
        "My parcel"
    )


def test_select_text_view_and_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "select",
                str(example_agent_path()),
                "Checkout fails with 502 after the deploy",
                "--top-n",
                "1",
                "--tool-top-n",
                "1",
                "--include-score",
                "1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("Context Used:") and out.count("[Agent - ") == 2  # one rule or reference, one tool


def test_select_with_preset_and_budget(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "select",
                str(example_agent_path()),
                "Checkout fails with 502 after the deploy",
                "--preset",
                "aggressive",
                "--token-budget",
                "60",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["context"]["settings"]["top_n"] == 3 and out["context"]["settings"]["token_budget"] == 60
    assert out["context"]["tokens"] <= 60 or out["context"].get("notes")


def test_select_explains_items(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "select",
                str(example_agent_path()),
                "My parcel is late.",
                "--explain",
                "rule:shipping-delays",
                "--explain",
                "reference:style-guide",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "rule:shipping-delays: included (agent, via query)" in out
        and "reference:style-guide: not included" in out
        and "include mode is manual" in out
    )
    assert main(["select", str(example_agent_path()), "hi", "--explain", "rule:nope"]) == 1


def test_select_with_generic_settings(capsys: pytest.CaptureFixture[str]) -> None:
    msg = "Checkout fails with 502 after the deploy"
    assert (
        main(
            [
                "select",
                str(example_agent_path()),
                msg,
                "--json",
                "--set",
                "context_top_n=1",
                "--set",
                "context_include_score=1",
                "--set",
                'tool_settings={"context_top_n": 2, "context_include_score": 1}',
            ]
        )
        == 0
    )
    items = json.loads(capsys.readouterr().out)["context"]["items"]
    searched = [i for i in items if i["includeMode"] == "agent"]
    assert sum(1 for i in searched if i["type"] == "tool") == 2 and sum(1 for i in searched if i["type"] != "tool") == 1
    assert main(["select", str(example_agent_path()), msg, "--set", "expansion_source=magic"]) == 1
    assert "expansion_source" in capsys.readouterr().err
    assert main(["select", str(example_agent_path()), msg, "--set", "no_equals_sign"]) == 1


def test_index_then_restart_uses_the_disk_cache(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["index", str(example_agent_path())]) == 0
    assert main(["index", str(example_agent_path())]) == 0
    second = capsys.readouterr().out.strip().splitlines()[-1]
    assert " 0 embedded now" in second


def test_demo_runs_every_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert out.count("> ") >= len(DEMO_MESSAGES) and "style-guide" in out  # the @ref mention was honoured


def test_errors_exit_1_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["select", str(tmp_path / "missing.yaml"), "hi"]) == 1
    assert "no such agent file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["select"])


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import contextsieve

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"contextsieve {contextsieve.__version__}"


def test_a_closed_pipe_ends_the_cli_quietly(model_cache: Path) -> None:
    """`contextsieve embed ... | head -c 20`: no traceback, the SIGPIPE exit code."""
    import os
    import subprocess
    import sys

    texts = [f"text number {i}" for i in range(400)]  # ~1.5 MB of JSON: more than a pipe buffer holds
    proc = subprocess.Popen(
        [sys.executable, "-m", "contextsieve", "embed", *texts],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, CACHE_ENV: str(model_cache)},
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.read(20)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141, err
    assert first.startswith(b'{"text"') and "Traceback" not in err and "BrokenPipe" not in err


def test_a_tool_without_a_schema_is_offered_as_an_object() -> None:
    from contextsieve.agent.items import Tool
    from contextsieve.agent.toolnames import tool_names
    from contextsieve.session.assembly import tool_definition

    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    restart, scale = Tool("ops", "restart", "restart it"), Tool("ops", "scale", "scale it", schema)
    names = tool_names([restart.key, scale.key])
    assert tool_definition(restart, names) == {
        "name": "ops_restart",
        "description": "restart it",
        "input_schema": {"type": "object"},
    }
    assert tool_definition(scale, names)["input_schema"] == schema


def test_stash_rebuild_of_a_current_store_shows_no_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from contextsieve.stash.store import StashStore

    with StashStore.open(tmp_path / "s.db") as store:
        store.stash(["one segment"])
    capsys.readouterr()
    assert main(["stash", "rebuild", str(tmp_path / "s.db")]) == 0
    captured = capsys.readouterr()
    assert "re-embedding" not in captured.err and "0/1" not in captured.err


@pytest.mark.parametrize("action", ["stats", "cleanup", "rebuild", "export", "migrate"])
def test_a_stash_command_on_a_missing_store_says_so_and_creates_nothing(
    action: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 47 defect 6: `stash stats PATH` at a mistyped or missing path made a store there (aimed at the
    data folder on a fresh machine, it made a file where serve wants a folder). Every action but import,
    and migrate's source, needs an existing store: one line on stderr, exit 1, no file or folder made
    (neither the store, its folder, nor export's or migrate's target)."""
    missing = tmp_path / "typo" / "stash.db"
    target = {"export": [str(tmp_path / "out.jsonl")], "migrate": [str(tmp_path / "copy.db")]}.get(action, [])
    assert main(["stash", action, str(missing), *target]) == 1
    err = capsys.readouterr().err
    assert (
        err == f"contextsieve: error: no stash store at {missing} (no such file); nothing was created (a store is "
        "made by its first writer: serve, stash import or stash migrate)\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_stash_stats_on_the_data_folder_and_serve_with_a_file_there(tmp_path: Path) -> None:
    """Issue 47 defect 6, as it was met: `stash stats $CONTEXTSIEVE_DATA` on a fresh machine made a file
    where the data folder belongs, and every later `serve` died with a NotADirectoryError traceback. Now
    stats makes nothing, and serve facing such a file (or a file named stash in the data folder) says
    which path is in the way on one line, exit 1, no traceback."""
    import os
    import subprocess
    import sys

    data = tmp_path / "data"
    env = {**os.environ, "CONTEXTSIEVE_DATA": str(data), "PYTHONIOENCODING": "utf-8"}
    cli = [sys.executable, "-m", "contextsieve"]
    stats = subprocess.run([*cli, "stash", "stats", str(data)], capture_output=True, text=True, env=env, timeout=300)
    assert stats.returncode == 1 and stats.stderr.startswith(f"contextsieve: error: no stash store at {data} ")
    assert not data.exists()
    serve = [*cli, "serve", str(example_agent_path()), "--offline"]
    for blocker in (data, data / "stash"):  # what `stash stats DATA` and `stash stats DATA/stash` used to leave
        blocker.parent.mkdir(parents=True, exist_ok=True)
        blocker.write_bytes(b"")
        run = subprocess.run(serve, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=300)
        errors = [line for line in run.stderr.splitlines() if line.startswith("contextsieve: error:")]
        assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
        assert len(errors) == 1 and f"{blocker} is a file, not a folder" in errors[0], run.stderr[-2000:]
        blocker.unlink()


def test_the_bundled_example_is_quick_and_quiet_without_offline(capsys: pytest.CaptureFixture[str]) -> None:
    """Its servers belong to a fictional company and cannot start anywhere: select reads it offline
    instead of trying eight servers and printing their failures (issue 27 item 16)."""
    assert main(["select", str(example_agent_path()), "My parcel is late."]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "Context Used" in captured.out  # no server tried, no failure listed


def test_a_key_nobody_reads_is_one_warning_line_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 40 item 3: `rulez:` loads (the key is kept), and the CLI says so once on stderr, with its likely
    meaning; stdout is untouched (serve's stdio protocol runs there)."""
    agent = tmp_path / "agent.yaml"
    agent.write_text("name: shop\nrulez:\n  - name: tone\n    text: Be brief.\n    include: always\n")
    assert main(["select", str(agent), "hello", "--offline"]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if "warning" in line]
    assert lines == [
        f"contextsieve: warning: {agent}: rulez: unknown key (did you mean 'rules'?); "
        "it is kept in the file but not read"
    ]
    assert "rulez" not in captured.out and "Rules (0)" in captured.out


def test_select_reads_the_message_from_stdin_or_a_file(tmp_path: Path) -> None:
    """Issue 40 item 4: `select AGENT -` reads standard input and `--message-file` a file, so a long
    message never meets the shell's argument limit (200 KB did: "Argument list too long")."""
    import os
    import subprocess
    import sys

    long = "My parcel is late and has not moved for a week. " * 4_000  # ~200 KB
    cmd = [sys.executable, "-m", "contextsieve", "select", str(example_agent_path())]
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    piped = subprocess.run([*cmd, "-"], input=long, capture_output=True, text=True, env=env, timeout=300)
    assert piped.returncode == 0, piped.stderr[-2000:]
    (tmp_path / "message.txt").write_text(long, encoding="utf-8")
    filed = subprocess.run(
        [*cmd, "--message-file", str(tmp_path / "message.txt")], capture_output=True, text=True, env=env, timeout=300
    )
    assert filed.returncode == 0, filed.stderr[-2000:]
    first = [line for line in piped.stdout.splitlines() if "(" not in line or "ms)" not in line]
    assert first == [line for line in filed.stdout.splitlines() if "(" not in line or "ms)" not in line]
    assert "track_parcel" in piped.stdout and "shipping-delays" in piped.stdout  # the message was read whole


def test_select_without_a_message_and_example_agent(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["select", str(example_agent_path())]) == 1
    assert "select needs a message" in capsys.readouterr().err
    (tmp_path / "m.txt").write_text("hello")
    assert main(["select", str(example_agent_path()), "hi", "--message-file", str(tmp_path / "m.txt")]) == 1
    assert "not both" in capsys.readouterr().err
    assert main(["example-agent"]) == 0
    assert capsys.readouterr().out.strip() == str(example_agent_path())


def test_tools_on_the_example_agent_starts_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """Its servers are a fictional company's (npx/uvx packages, *.example.internal hosts): `tools` says so
    and lists the tools the file declares, offline, exit 0 (it used to start them and resolve the hosts)."""
    assert main(["tools", str(example_agent_path())]) == 0
    captured = capsys.readouterr()
    assert "placeholders of a fictional company" in captured.err
    assert "helpdesk: 5 tools (get_ticket, " in captured.out and "example.internal" not in captured.out


def test_build_compiles_the_scoring_kernels_once_per_machine(tmp_path: Path) -> None:
    """Issue 40, first run: `contextsieve build` leaves nothing for a first request to wait for: the
    scoring kernels are compiled (a first build) or loaded (a second), into the cache it names."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "CONTEXTSIEVE_"))}
    env["CONTEXTSIEVE_CACHE"] = str(tmp_path / "cache")
    cmd = [sys.executable, "-m", "contextsieve", "build", "--variant", "int8"]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "compiling the scoring kernels for this CPU" in first.stdout
    assert (
        "scoring kernels: compiled score_matrix" in first.stdout and str(tmp_path / "cache" / "numba") in first.stdout
    )
    second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "scoring kernels: loaded from the cache" in second.stdout and "compiling" not in second.stdout
    threads = next(line for line in second.stdout.splitlines() if line.startswith("kernel threads: "))
    assert "omp layer, idle threads asleep" in threads or "omp layer" not in threads  # contextsieve.kernels.threads


def test_build_with_numbas_jit_off_says_the_kernels_are_not_compiled(tmp_path: Path) -> None:
    """``NUMBA_DISABLE_JIT=1``: build failed at the kernels (``'function' object has no attribute 'stats'``);
    now it builds the model and says the requests score on numpy."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "CONTEXTSIEVE_"))}
    env.update(CONTEXTSIEVE_CACHE=str(tmp_path / "cache"), NUMBA_DISABLE_JIT="1")
    cmd = [sys.executable, "-m", "contextsieve", "build", "--variant", "int8"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "scoring kernels: not compiled: Numba's JIT is off ($NUMBA_DISABLE_JIT" in out.stdout
    assert not (tmp_path / "cache" / "numba").exists()
