"""``contextsieve eval`` on the bundled example agent and its task file: the printed table and JSON agree
with a plain recomputation (sessions and requests written out here, not the evaluation package), the
agent's own history is never written, and a bad task file is one clear error naming its line."""

from __future__ import annotations

import inspect
import json
import sqlite3
import statistics
from pathlib import Path
from typing import Any

import pytest

from contextsieve import Engine, example_agent_path, load_agent
from contextsieve.cli.main import main
from contextsieve.evaluation.tasks import example_tasks_path
from contextsieve.models.cache import CACHE_ENV

AGENT = str(example_agent_path())
TASKS = str(example_tasks_path())


@pytest.fixture(autouse=True)
def tmp_cache(model_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(model_cache))  # the session's model cache: graphs are built once
    return model_cache


def _engine(cache: Path) -> Engine:
    """A fresh engine of the example agent whose learned history stays in its memory."""
    private: dict[str, Any] = {"history": False} if "history" in inspect.signature(Engine).parameters else {}
    return Engine(load_agent(example_agent_path()), cache_dir=cache, remember_requests=False, **private)


def _recomputed(cache: Path, folds: int) -> dict[str, dict[str, float]]:
    """Recall, all found, tools per request and precision of the example tasks, cold and with history,
    computed the plain way: one session per task, one request per message, ``record_reply`` after each;
    history: the other folds' tasks told with ``record_tool_calls(first message, tools)``."""
    lines = [json.loads(line) for line in Path(TASKS).read_text(encoding="utf-8").splitlines() if line.strip()]
    tasks = []
    for t in lines:
        steps = [(t["message"], t["tools"])] if "message" in t else [(s["message"], s["tools"]) for s in t["steps"]]
        needs = [set(n) if isinstance(n, list) else {n} for _, tools in steps for n in tools]
        needs = [g for i, g in enumerate(needs) if g not in needs[:i]]
        firsts = [n[0] if isinstance(n, list) else n for _, tools in steps for n in tools]
        tasks.append(([m for m, _ in steps], needs, list(dict.fromkeys(firsts))))

    def run(engine: Engine, task: tuple) -> tuple[list[set[str]], list[int]]:
        session = engine.session()
        offered, sizes = [], []
        for message in task[0]:
            request = session.build_request(message)
            session.record_reply(request, "")
            keys = [request.names[t["name"]] for t in request.tools]
            offered.append({f"{k.server}:{k.name}" for k in keys})
            sizes.append(len(request.tools))
        return offered, sizes

    def measures(runs: list[tuple[tuple, list[set[str]], list[int]]]) -> dict[str, float]:
        recall, every, precision = [], [], []
        for task, offered, _ in runs:
            got = set().union(*offered)
            recall.append(sum(bool(g & got) for g in task[1]) / len(task[1]))
            every.append(float(all(g & got for g in task[1])))
            members = set().union(*task[1])
            precision += [len(o & members) / len(o) for o in offered if o]
        sizes = [n for _, _, s in runs for n in s]
        return {
            "recall": statistics.fmean(recall),
            "all_found": statistics.fmean(every),
            "tools_per_request": statistics.fmean(sizes),
            "precision": statistics.fmean(precision),
        }

    cold = [(t, *run(_engine(cache), t)) for t in tasks]
    warm = []
    for i, task in enumerate(tasks):
        engine = _engine(cache)
        for j, other in enumerate(tasks):
            if j % folds != i % folds:
                engine.record_tool_calls(other[0][0], other[2])
        warm.append((task, *run(engine, task)))
    return {"cold": measures(cold), "history": measures(warm)}


def test_eval_prints_the_measures_a_plain_recomputation_gives(
    capsys: pytest.CaptureFixture[str], tmp_cache: Path
) -> None:
    assert main(["eval", AGENT, TASKS]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Acme Shop assistant: 12 tasks, 17 requests, history from 2 folds"
    assert out[1] == "| history | recall | all found | tools/request | precision |"
    want = _recomputed(tmp_cache, 2)
    for line, (name, m) in zip(out[3:], (("cold", want["cold"]), ("2-fold history", want["history"]))):
        cells = [
            f"{m['recall']:.3f}",
            f"{m['all_found']:.3f}",
            f"{m['tools_per_request']:.1f}",
            f"{m['precision']:.3f}",
        ]
        assert line == f"| {name} | " + " | ".join(cells) + " |"
    assert len(out) == 5

    assert main(["eval", AGENT, TASKS, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["agent"] == "Acme Shop assistant" and got["folds"] == 2
    for which in ("cold", "history"):
        assert got[which]["tasks"] == 12 and got[which]["requests"] == 17
        for k, v in want[which].items():
            assert got[which][k] == pytest.approx(v), (which, k)
        assert isinstance(got[which]["missed"], list)


def test_eval_with_one_fold_is_cold_only(capsys: pytest.CaptureFixture[str], tmp_cache: Path) -> None:
    assert main(["eval", AGENT, TASKS, "--folds", "1", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["history"] is None and got["folds"] == 1
    assert got["cold"]["recall"] == pytest.approx(_recomputed(tmp_cache, 2)["cold"]["recall"])
    assert main(["eval", AGENT, TASKS, "--folds", "0"]) == 0
    out = capsys.readouterr().out
    assert "cold only" in out and "history |" in out and "fold history" not in out


def _examples(folder: Path) -> dict[str, int]:
    """Rows of every learned-history table (examples, misses) of every SQLite file under ``folder``."""
    found = {}
    for path in folder.rglob("*.sqlite"):
        db = sqlite3.connect(path)
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            for table in tables & {"examples", "misses"}:
                found[f"{path.name}:{table}"] = db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        finally:
            db.close()
    return found


def test_eval_writes_no_learned_history(
    capsys: pytest.CaptureFixture[str], tmp_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("CONTEXTSIEVE_DATA", str(data))
    before = _examples(tmp_cache)
    assert main(["eval", AGENT, TASKS]) == 0
    capsys.readouterr()
    assert _examples(tmp_cache) == before
    assert all(n == 0 for n in _examples(data).values()), _examples(data)
    # and the agent, loaded as any command loads it, has learned nothing
    assert main(["eval", AGENT, TASKS, "--folds", "0", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)["cold"]
    assert again["recall"] == pytest.approx(_recomputed(tmp_cache, 2)["cold"]["recall"])


def test_example_agent_tasks_prints_the_task_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["example-agent", "--tasks"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.name == "example_tasks.jsonl" and path.is_file() and path.parent == example_agent_path().parent


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("not json\n", "line 1: not JSON"),
        ('["helpdesk:get_ticket"]\n', "line 1: expected a JSON object"),
        ('{"message": "Where is my parcel?"}\n', 'line 1: no "tools"'),
        ('{"message": "Where is my parcel?", "tools": []}\n', '"tools" is empty'),
        ('{"message": "Where is my parcel?", "tools": "helpdesk:track_parcel"}\n', '"tools" must be a list'),
        ('{"message": "", "tools": ["helpdesk:track_parcel"]}\n', '"message" must be a non-empty string'),
        ('{"msg": "Where is my parcel?", "tools": ["helpdesk:track_parcel"]}\n', "unknown field 'msg'"),
        ('{"message": "Where?", "tools": ["helpdesk:track_parcels"]}\n', "did you mean 'helpdesk:track_parcel'"),
        ('{"message": "Where?", "tools": ["rule:tone"]}\n', "the agent has no tool 'rule:tone'"),
        ('{"message": "Where?", "tools": [["helpdesk:track_parcel", 3]]}\n', "a tool is a non-empty string"),
        ('{"message": "Where?", "tools": ["git:git_log"], "steps": []}\n', "not both"),
        ('{"steps": []}\n', '"steps" must be a non-empty list'),
        ('{"steps": [{"message": "Hi", "tools": []}]}\n', "no step names a tool"),
        ('{"steps": [{"message": "Hi", "tool": ["git:git_log"]}]}\n', "step 1: unknown field 'tool'"),
        ('{"id": 3, "message": "Where?", "tools": ["git:git_log"]}\n', "id must be a string"),
        ('{"message": "Log?", "tools": ["git:git_log"]}\n\n{"message": "x", "tools": ["nope"]}\n', "line 3:"),
        ("\n\n", "holds no task"),
    ],
)
def test_a_bad_task_file_is_one_clear_error(
    text: str, error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(text, encoding="utf-8")
    assert main(["eval", AGENT, str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert err.startswith(f"contextsieve: error: {path}") and error in err, err
    assert len(err.splitlines()) == 1


def test_a_missing_task_file_and_bad_folds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", AGENT, str(tmp_path / "none.jsonl")]) == 1
    assert "cannot read the task file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["eval", AGENT, TASKS, "--folds", "-1"])
    assert e.value.code == 2
    one = tmp_path / "one.jsonl"
    one.write_text('{"message": "Show me the git log.", "tools": ["git:git_log"]}\n', encoding="utf-8")
    assert main(["eval", AGENT, str(one), "--folds", "2"]) == 1
    assert "2 folds need at least 2 tasks, got 1 (0 folds: cold only)" in capsys.readouterr().err
