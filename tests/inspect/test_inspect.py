"""`contextsieve inspect`: the page's JSON endpoints on a real server on 127.0.0.1 (answers equal to what
the session selects, errors), the CLI, and the page itself in headless Chromium driven by Selenium.

The real model (the int8 graph) on the bundled example agent; every cache, profile and screenshot in
tmp dirs; servers and the browser are stopped by their fixtures."""

from __future__ import annotations

import http.client
import json
import os
import random
import re
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from contextsieve import Engine, StashStore, example_agent_path
from contextsieve.cli.main import main
from contextsieve.inspect.inspector import MAX_BODY_BYTES, MAX_MESSAGE_CHARS, Inspector
from contextsieve.inspect.server import InspectServer
from contextsieve.inspect.views import prefix_digests
from contextsieve.models.cache import CACHE_ENV

MESSAGES = (
    "My parcel is late. Can I get my money back?",
    "@ref:oncall Checkout is failing with 502 errors since the deploy ten minutes ago!",
    "Please open a pull request for the cart rounding fix.",
)
COLUMNS = ("rules", "references", "tools")


@pytest.fixture(autouse=True)
def tmp_dirs(model_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(model_cache))  # the session's model cache: graphs are built once
    monkeypatch.setenv("CONTEXTSIEVE_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("CONTEXTSIEVE_VARIANT", "int8")  # engines the CLI makes: the fixture's graph, no measuring
    random.seed(30)


@pytest.fixture(scope="module")
def engine(int8: Any, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    e = Engine.from_file(example_agent_path(), embedder=int8, cache_dir=tmp_path_factory.mktemp("inspect-cache"))
    e.index()
    return e


@contextmanager
def serving(inspector: Inspector) -> Iterator[str]:
    server = InspectServer(inspector, port=0)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def call(
    url: str,
    method: str,
    path: str,
    body: Any = None,
    *,
    raw: Any = None,
    headers: dict[str, str] | None = None,
    chunked: bool = False,
) -> tuple[int, dict[str, str], bytes]:
    """One request with the standard library's client (so Host, Origin and the body are as given)."""
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=120)
    hdrs = {"Content-Type": "application/json"} if method == "POST" else {}
    hdrs.update(headers or {})
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    try:
        conn.request(method, path, body=data, headers=hdrs, encode_chunked=chunked)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def select(url: str, message: str) -> dict[str, Any]:
    status, _, body = call(url, "POST", "/api/select", {"message": message})
    assert status == 200, body
    return json.loads(body)


def grouped(text: str) -> dict[str, list[str]]:
    """The bullets of `contextsieve select`'s text view (RequestContext.grouped_text), per column."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        head = re.match(r"^(Rules|References|Tools) \(\d+\):$", line)
        if head:
            current = head.group(1).lower()
            out[current] = []
        elif line.startswith("  • ") and current is not None:
            out[current].append(line.strip())
    return out


def bullet(item: dict[str, Any]) -> str:
    """An item of the page's JSON written as grouped_text writes it."""
    prio = f" (priority {item['priority']})" if item["priority"] is not None else ""
    badge = f"Agent - {item['score']:.2f}" if item["mode"] == "agent" else item["mode"].capitalize()
    return f"• {item['label']}{prio} [{badge}]"


# -- the JSON endpoints ---------------------------------------------------------------------------


def test_select_answers_what_the_session_selects(engine: Engine) -> None:
    reference = engine.session()  # the page's session sees the same messages in the same order
    answers = []
    with serving(Inspector(engine)) as url:
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0/")
        status, headers, page = call(url, "GET", "/")
        assert status == 200 and headers["content-type"].startswith("text/html")
        assert b'<label for="message">Message</label>' in page and b'<textarea id="message"' in page
        assert "script-src 'self'" in headers["content-security-policy"]
        status, _, info = call(url, "GET", "/api/info")
        assert status == 200 and json.loads(info)["counts"] == {"rules": 10, "references": 10, "tools": 31}
        for message in MESSAGES:
            got = select(url, message)
            req = reference.build_request(message)
            ctx = req.context
            assert got["context"] == json.loads(json.dumps(ctx.to_dict()))  # items, modes, scores, settings
            assert got["summary"] == ctx.summary()
            shown = [(i["key"], i["mode"]) for c in COLUMNS for i in got["columns"][c]]
            assert sorted(shown) == sorted((str(e.key), e.mode.value) for e in ctx.entries)
            assert {c: [bullet(i) for i in got["columns"][c]] for c in COLUMNS} == grouped(ctx.grouped_text())
            assert got["offer"]["mode"] == "request" and got["offer"]["offered"] == [t["name"] for t in req.tools]
            assert got["offer"]["deferred"]["declared"] == len(req.catalog) + 1  # and the search tool
            # near misses: left out by the cut, with the reasons session.explain gives
            assert got["near_misses"], message
            keys = {str(e.key) for e in ctx.entries}
            for miss in got["near_misses"]:
                ex = reference.explain(message, miss["key"])
                assert miss["key"] not in keys and not miss["included"] and not ex.included
                assert miss["reasons"] == list(ex.reasons) and miss["explanation"] == str(ex)
            for d in {m["domain"] for m in got["near_misses"]}:
                ranks = [m["rank"] for m in got["near_misses"] if m["domain"] == d]
                assert ranks == sorted(ranks) and len(ranks) <= 3
            assert got["stash"] is None
            reference.record_reply(req, "")
            answers.append((got, prefix_digests(req)))
    deferred = [a["prefix"]["deferred"] for a, _ in answers]
    offered = [a["prefix"]["selected"] for a, _ in answers]
    assert [d["same_as_previous"] for d in deferred] == [None, True, True]  # one cached prefix for the session
    assert [o["same_as_previous"] for o in offered] == [None, False, False]  # each message offers its own tools
    assert all(a["prefix"]["deferred"]["sha256"] == p["deferred"]["sha256"] for a, p in answers)
    assert len({o["sha256"] for o in offered}) == 3


def test_a_stable_offer_grows_and_reset_starts_again(engine: Engine) -> None:
    inspector = Inspector(engine, offer="stable")
    with serving(inspector) as url:
        first, second = select(url, MESSAGES[0]), select(url, MESSAGES[2])
        assert first["offer"]["mode"] == "stable"
        n = len(first["offer"]["offered"])
        assert second["offer"]["offered"][:n] == first["offer"]["offered"]  # a tool once offered stays
        assert len(second["offer"]["offered"]) > n
        assert call(url, "POST", "/api/reset", {})[0] == 200
        again = select(url, MESSAGES[2])
        assert again["prefix"]["deferred"]["same_as_previous"] is None  # a new session: nothing before it
        assert again["offer"]["offered"] != second["offer"]["offered"]


def test_bad_requests_get_a_clear_4xx_json_error(engine: Engine) -> None:
    rng = random.Random(30)
    huge_message = "".join(rng.choice("abcdef ") for _ in range(MAX_MESSAGE_CHARS + 1))
    post = "/api/select"
    cases: list[tuple[str, dict[str, Any], int, str]] = [
        ("empty message", {"body": {"message": ""}}, 400, "message is empty"),
        ("blank message", {"body": {"message": "  \n\t"}}, 400, "message is empty"),
        ("not a string", {"body": {"message": ["hi"]}}, 400, "must be a string"),
        ("no message", {"body": {"text": "hi"}}, 400, 'no "message"'),
        ("not an object", {"body": ["hi"]}, 400, "must be a JSON object"),
        ("bad JSON", {"raw": b'{"message": "hi"'}, 400, "not valid JSON"),
        ("not UTF-8", {"raw": b'{"message": "\xff\xfe"}'}, 400, "not valid JSON"),
        ("deep JSON", {"raw": b"[" * 100_000 + b"]" * 100_000}, 400, "not valid JSON"),
        ("lone surrogate", {"raw": b'{"message": "\\ud800 hi"}'}, 400, "lone surrogate"),
        ("message too long", {"body": {"message": huge_message}}, 400, f"limit is {MAX_MESSAGE_CHARS}"),
        ("unknown mention", {"body": {"message": "@rule:nope hello"}}, 400, "no rule:nope"),
        ("form post", {"raw": b"message=hi", "headers": {"Content-Type": "text/plain"}}, 415, "application/json"),
        ("huge body", {"raw": b"x" * (MAX_BODY_BYTES + 1)}, 413, f"over {MAX_BODY_BYTES} bytes"),
        ("huge chunked body", {"raw": iter([b"x" * 65536] * 5), "chunked": True}, 413, "over"),
        ("other origin", {"body": {"message": "hi"}, "headers": {"Origin": "http://evil.example"}}, 403, "origin"),
        ("other host", {"body": {"message": "hi"}, "headers": {"Host": "evil.example"}}, 403, "127.0.0.1"),
    ]
    with serving(Inspector(engine)) as url:
        for name, kw, status, words in cases:
            got, headers, body = call(url, "POST", post, **kw)
            assert got == status, (name, body)
            assert headers["content-type"] == "application/json", name
            error = json.loads(body)["error"]
            assert words in error and "Traceback" not in error, (name, error)
        for method, path, status in (("GET", post, 405), ("GET", "/nope", 404), ("POST", "/api/info", 405)):
            got, headers, body = call(url, method, path, {} if method == "POST" else None)
            assert got == status and "error" in json.loads(body) and headers["content-type"] == "application/json"
        assert select(url, MESSAGES[0])["summary"]  # the server still answers
    u = urlsplit(url)
    with pytest.raises(OSError):  # stopped: nothing listens there any more
        socket.create_connection((u.hostname, u.port), timeout=2).close()


def test_turns_of_a_saved_session_with_a_stash(engine: Engine, int8: Any, tmp_path: Path) -> None:
    with StashStore.open(tmp_path / "stash.db", int8) as stash:
        stash.stash(
            [
                "Anna's parcel 4411 was lost by the carrier; we promised her a refund on Monday.",
                "The deploy of cart-service broke checkout with 502 errors; we rolled it back.",
            ],
            session="chat-1",
        )
        stash.stash(["Unrelated: the office plants need water on Fridays."], session="other")
        session = engine.session(stash=stash, stash_session="chat-1")
        recorded = []
        for message in MESSAGES:
            req = session.build_request(message)
            session.record_reply(req, "done")
            recorded.append(req)
        session.save(tmp_path / "chat.json")
        inspector = Inspector(engine, session_file=tmp_path / "chat.json", stash=stash)
        with serving(inspector) as url:
            info = json.loads(call(url, "GET", "/api/info")[2])
            assert info["turns"] == 3 and info["stash"]["session"] == "chat-1"
            status, _, body = call(url, "GET", "/api/turns")
            assert status == 200
            turns = json.loads(body)["turns"]
            assert [t["turn"] for t in turns] == [1, 2, 3]
            for turn, req in zip(turns, recorded):
                assert turn["message"] == req.message
                assert turn["context"] == json.loads(json.dumps(req.context.to_dict()))  # as recorded
                assert turn["recorded"]["same_items"], turn["recorded"]  # and a replay now agrees
                assert [s["segment_id"] for s in turn["stashed"]] == [e.segment_id for e in req.context.stashed]
                hits = turn["stash"]["hits"]
                assert hits and turn["stash"]["cross_session"]
                brought = {e.segment_id for e in req.context.stashed}
                assert {h["segment_id"] for h in hits if h["in_request"]} == brought
            assert turns[0]["stashed"] and "Anna" in turns[0]["stashed"][0]["preview"]
            assert [t["prefix"]["deferred"]["same_as_previous"] for t in turns] == [None, True, True]
            assert any(
                col["key"] == "reference:oncall" and col["mode"] == "manual"
                for col in turns[1]["columns"]["references"]
            )
            # typed messages continue the saved session: its manual item, its stash session
            more = select(url, "Has Anna's refund gone out yet?")
            assert ("reference:oncall", "manual") in [(i["key"], i["mode"]) for i in more["columns"]["references"]]
            assert more["prefix"]["deferred"]["same_as_previous"] is True
            assert more["stash"]["hits"][0]["preview"].startswith("Anna's parcel")


def test_turns_name_items_the_agent_no_longer_has(engine: Engine, int8: Any, tmp_path: Path) -> None:
    import yaml

    session = engine.session()
    req = session.build_request(MESSAGES[0])
    session.record_reply(req, "ok")
    session.save(tmp_path / "chat.json")
    assert ("rule:shipping-delays", "agent") in [(str(e.key), e.mode.value) for e in req.context.entries]
    doc = yaml.safe_load(example_agent_path().read_text(encoding="utf-8"))
    doc["rules"] = [r for r in doc["rules"] if r["name"] != "shipping-delays"]
    doc["rules"][0]["description"] = '<script>alert("agent text")</script>'  # data, whatever it holds
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    changed = Engine.from_file(tmp_path / "agent.yaml", embedder=int8, cache_dir=tmp_path / "cache")
    (turn,) = Inspector(changed, session_file=tmp_path / "chat.json").turns()
    gone = [i for i in turn["columns"]["rules"] if i["key"] == "rule:shipping-delays"]
    assert gone and gone[0]["known"] is False and gone[0]["mode"] == "agent"  # as recorded, marked
    assert "rule:shipping-delays [agent]" in turn["recorded"]["only_recorded"] and not turn["recorded"]["same_items"]
    assert "rule:shipping-delays" not in [m["key"] for m in turn["near_misses"]]
    described = {i["name"]: i["description"] for i in turn["columns"]["rules"]}
    assert described[doc["rules"][0]["name"]] == '<script>alert("agent text")</script>'


# -- the command line -----------------------------------------------------------------------------


def test_the_cli_prints_the_url_and_serves(int8: Any, model_cache: Path, tmp_path: Path) -> None:
    env = {
        **os.environ,
        CACHE_ENV: str(model_cache),
        "CONTEXTSIEVE_DATA": str(tmp_path / "data"),
        "CONTEXTSIEVE_VARIANT": "int8",
    }
    cmd = [sys.executable, "-m", "contextsieve", "inspect", str(example_agent_path()), "--port", "0"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(180, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"at (http://127\.0\.0\.1:(\d+)/) ", line)
        assert found and int(found.group(2)) > 0, (line, proc.stderr.read() if proc.poll() is not None else "")
        url = found.group(1)
        status, _, page = call(url, "GET", "/")
        assert status == 200 and b"contextsieve inspect" in page
        got = select(url, MESSAGES[0])
        assert ("rule:shipping-delays", "agent") in [(i["key"], i["mode"]) for i in got["columns"]["rules"]]
    finally:
        watchdog.cancel()
        proc.terminate()
        proc.wait(timeout=20)


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    agent = str(example_agent_path())
    assert main(["inspect", agent, "--stash", str(tmp_path / "typo" / "missing.db")]) == 1  # issue 47 defect 6
    assert "no stash store at" in capsys.readouterr().err and not (tmp_path / "typo").exists()
    assert main(["inspect", agent, "--session", str(tmp_path / "missing.json")]) == 1
    assert "no such file" in capsys.readouterr().err.lower()
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    assert main(["inspect", agent, "--session", str(tmp_path / "bad.json")]) == 1
    assert "cannot load session" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["inspect", agent, "--port", "70000"])
    assert e.value.code == 2
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        assert main(["inspect", agent, "--port", str(taken.getsockname()[1])]) == 1
        assert "cannot listen on 127.0.0.1" in capsys.readouterr().err


# -- the page in a real browser -------------------------------------------------------------------

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()):
        pytest.skip("needs Debian's chromium and chromium-driver: `make browser` installs them")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    home = tmp_path_factory.mktemp("chromium-home")
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-crash-reporter",
        "--window-size=1280,1800",
        f"--user-data-dir={home / 'profile'}",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"), "XDG_CACHE_HOME": str(home)}
    service = Service(str(CHROMEDRIVER), log_output=subprocess.DEVNULL, env=env)
    driver = webdriver.Chrome(options=opts, service=service)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: Any, what: str, until: Any, seconds: float = 120) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, seconds, poll_frequency=0.05).until(until, what)


def _state(driver: Any, name: str) -> str | None:
    return driver.find_element("tag name", "body").get_attribute(f"data-{name}")


def _active(driver: Any) -> str:
    return str(driver.execute_script("return document.activeElement && document.activeElement.id"))


def _keys(driver: Any, *keys: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).send_keys(*keys).perform()


def _shown_items(driver: Any) -> dict[str, list[tuple[str, str, str | None, str]]]:
    """Per column: (data-key, data-mode, data-score, visible text) of each item the page shows."""
    out = {}
    for col in COLUMNS:
        lis = driver.find_elements("css selector", f"#col-{col} li.item")
        out[col] = [
            (li.get_attribute("data-key"), li.get_attribute("data-mode"), li.get_attribute("data-score"), li.text)
            for li in lis
        ]
    return out


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_the_page_in_a_browser(browser: Any, engine: Engine, tmp_path: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    message = MESSAGES[0]
    with serving(Inspector(engine)) as url:
        browser.get(url)
        _wait(browser, "the page loads", lambda d: _state(d, "state") == "ready")
        assert browser.find_element(By.ID, "agent").text == engine.agent.name
        assert browser.find_element(By.CSS_SELECTOR, "label[for=message]").text == "Message"
        # keyboard: the message box comes first, then its buttons; Shift+Tab goes back
        _keys(browser, Keys.TAB)
        assert _active(browser) == "message"
        _keys(browser, Keys.TAB)
        assert _active(browser) == "submit"
        _keys(browser, Keys.TAB)
        assert _active(browser) == "reset"
        ActionChains(browser).key_down(Keys.SHIFT).send_keys(Keys.TAB, Keys.TAB).key_up(Keys.SHIFT).perform()
        assert _active(browser) == "message"
        _keys(browser, message, Keys.ENTER)  # Enter submits (Shift+Enter would be a new line)
        _wait(browser, "the context is shown", lambda d: _state(d, "shown") == "1")
        assert _active(browser) == "message"  # focus stays where the next message is typed

        req = engine.session().build_request(message)  # what `contextsieve select` prints for it
        expected = grouped(req.context.grouped_text())
        shown = _shown_items(browser)
        assert sorted((k, m) for c in COLUMNS for k, m, _, _ in shown[c]) == sorted(
            (str(e.key), e.mode.value) for e in req.context.entries
        )
        for col in COLUMNS:
            lines = []
            for key, mode, score, text in shown[col]:
                assert text.startswith(mode)  # the badge says how it got in, in words
                entry = next(e for e in req.context.entries if str(e.key) == key)
                prio = f" (priority {entry.priority})" if entry.priority is not None else ""
                label = key.split(":", 1)[1]
                if mode == "agent":
                    assert score == f"{entry.score:.2f}" and score in text  # the bar carries its number
                    lines.append(f"• {label}{prio} [Agent - {score}]")
                else:
                    assert score is None and "no score" not in text
                    lines.append(f"• {label}{prio} [{mode.capitalize()}]")
            assert lines == expected[col], col
        meters = browser.find_elements(By.CSS_SELECTOR, "#columns meter")
        assert meters and all(re.fullmatch(r"score -?\d\.\d\d", m.get_attribute("aria-label")) for m in meters)
        assert browser.find_element(By.ID, "summary").text == req.context.summary()
        near = [e.get_attribute("data-key") for e in browser.find_elements(By.CSS_SELECTOR, "#near-misses .near")]
        assert near and not set(near) & {str(e.key) for e in req.context.entries}
        assert "first message" in browser.find_element(By.ID, "prefix-deferred").text
        shot = tmp_path / "inspect.png"
        assert browser.save_screenshot(str(shot))
        width, height = _png_size(shot)
        assert width >= 800 and height >= 600 and shot.stat().st_size > 20_000

        # text from the user is shown as text, never run as markup
        hostile = '<img src=x onerror="document.body.dataset.pwned=1"><script>document.body.dataset.pwned=2</script>'
        box = browser.find_element(By.ID, "message")
        box.clear()
        box.send_keys(hostile, Keys.ENTER)
        _wait(browser, "the second context", lambda d: _state(d, "shown") == "2")
        assert browser.find_element(By.ID, "shown-message").text == hostile
        assert _state(browser, "pwned") is None and not browser.find_elements(By.CSS_SELECTOR, "#result img")
        assert "byte-identical to the previous" in browser.find_element(By.ID, "prefix-deferred").text

        # an empty message: a clear error, nothing sent
        box.clear()
        box.send_keys(Keys.ENTER)
        error = browser.find_element(By.ID, "error")
        assert error.is_displayed() and "type a message" in error.text and _state(browser, "shown") == "2"
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []  # no script error, no blocked resource (the CSP allows only the page's own files)


def test_saved_turns_in_a_browser(browser: Any, engine: Engine, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    session = engine.session()
    recorded = []
    for message in MESSAGES[:2]:
        req = session.build_request(message)
        session.record_reply(req, "ok")
        recorded.append(req.context)
    session.save(tmp_path / "chat.json")
    with serving(Inspector(engine, session_file=tmp_path / "chat.json")) as url:
        browser.get(url)
        _wait(browser, "the page loads", lambda d: _state(d, "state") == "ready")
        turns = browser.find_elements(By.CSS_SELECTOR, "#turns button")
        assert [t.text.split(":", 1)[0] for t in turns] == ["Turn 1", "Turn 2"]
        _keys(browser, Keys.TAB, Keys.TAB, Keys.TAB, Keys.TAB, Keys.TAB)  # message, two buttons, turn 1, turn 2
        assert browser.switch_to.active_element.get_attribute("data-turn") == "2"
        _keys(browser, Keys.ENTER)
        _wait(browser, "turn 2 is shown", lambda d: _state(d, "shown") == "1")
        assert _active(browser) == "result-title"  # focus moves to what was opened
        assert browser.find_element(By.ID, "result-title").text == "Turn 2 of the saved session"
        shown = _shown_items(browser)
        assert sorted((k, m) for c in COLUMNS for k, m, _, _ in shown[c]) == sorted(
            (str(e.key), e.mode.value) for e in recorded[1].entries
        )
        assert ("reference:oncall", "manual") in [(k, m) for k, m, _, _ in shown["references"]]
        assert "same items" in browser.find_element(By.ID, "recorded").text
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
