"""ONNX Runtime is imported with its telemetry off (``contextsieve.models.runtime``): ONNX Runtime 1.29+
on Linux writes a device identifier and an event queue for upload at import unless
``ORT_DISABLE_TELEMETRY=1`` is set before it starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contextsieve.models import runtime

EMBED = """
import json, os, sys
from contextsieve import Embedder
vectors = Embedder().embed(["a sentence"])
print(json.dumps({"dim": int(vectors.shape[1]), "env": os.environ.get("ORT_DISABLE_TELEMETRY")}))
"""


def test_embedding_writes_no_telemetry_identifier_or_event_queue(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in (runtime.TELEMETRY_ENV, "XDG_CACHE_HOME")}
    env.update(HOME=str(home), PYTHONDONTWRITEBYTECODE="1")
    if "CONTEXTSIEVE_CACHE" not in env:  # the built graph stays where the test run keeps it
        env["CONTEXTSIEVE_CACHE"] = str(Path.home() / ".cache" / "contextsieve")
    out = subprocess.run([sys.executable, "-c", EMBED], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"dim": 384, "env": "1"}
    assert not [str(p) for p in home.rglob("*") if "Microsoft" in p.parts or "onnxruntime" in p.name.lower()]
    assert "telemetry" not in out.stderr


def test_a_user_s_own_setting_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime.onnxruntime()  # imported already in this process: nothing starts again
    monkeypatch.setenv(runtime.TELEMETRY_ENV, "0")
    assert runtime.onnxruntime().__name__ == "onnxruntime"
    assert os.environ[runtime.TELEMETRY_ENV] == "0"


@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_setting_is_no_choice_and_turns_the_telemetry_off(monkeypatch: pytest.MonkeyPatch, blank: str) -> None:
    """``ORT_DISABLE_TELEMETRY=`` (set, empty: a shell line or a .env file left blank) was kept as the
    user's choice, and ONNX Runtime then recorded its telemetry."""
    monkeypatch.setenv(runtime.TELEMETRY_ENV, blank)
    runtime.onnxruntime()
    assert os.environ[runtime.TELEMETRY_ENV] == "1"
