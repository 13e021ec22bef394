"""The embedder, the chunk store, the agent and sessions used from several threads at once (issue 10 item 1).

Phase 1 runs requests of several sessions in parallel on a fixed agent and compares every result with
the same request run alone; phase 2 adds threads that change the agent, share one session, and count
tokens and embed directly, and asserts that nothing but typed errors ever escapes and that the store
ends in step with the agent.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from contextsieve.agent.items import IncludeMode, Rule
from contextsieve.engine import Engine
from contextsieve.session.session import Session
from tests.helpers.agents import make_agent

MESSAGES = [
    "how many days until refunds after the parcel arrives",
    "the site is down, who do I call?",
    "what does the team plan cost",
    "please read the config file and fetch the docs page",
    "I forgot my password. Also, what is the refund policy? And the price of Basic?",
    "word " * 300,  # past the model's window: truncated in embed, counted in full by count_tokens
]


def picked(session: Session, message: str) -> list[tuple[str, float | None]]:
    entries = session.build_request(message).context.entries
    return [(str(e.key), None if e.score is None else round(e.score, 5)) for e in entries]


def hammer(workers: list[Callable[[random.Random], None]], rounds: int) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(len(workers))

    def run(work: Callable[[random.Random], None], seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        for _ in range(rounds):
            try:
                work(rng)
            except BaseException as e:  # noqa: BLE001 - collected and reported by the test
                errors.append(e)
                return

    threads = [threading.Thread(target=run, args=(w, i)) for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a worker hangs"
    return errors


@pytest.fixture()
def engine(int8, tmp_path: Path) -> Engine:  # noqa: ANN001
    return Engine(make_agent(), embedder=int8, cache_dir=tmp_path)


def test_parallel_requests_equal_serial_ones(engine: Engine) -> None:
    serial = {m: picked(engine.session(), m) for m in MESSAGES}
    sessions = [engine.session() for _ in range(4)]

    def request(i: int) -> Callable[[random.Random], None]:
        def work(rng: random.Random) -> None:
            m = rng.choice(MESSAGES)
            got = picked(sessions[i], m)
            assert got == serial[m], (m, got, serial[m])

        return work

    assert hammer([request(i) for i in range(4)], rounds=40) == []


def test_agent_changes_shared_sessions_and_direct_embedding_at_once(engine: Engine, int8) -> None:  # noqa: ANN001
    agent = engine.agent
    shared = engine.session()
    own = [engine.session() for _ in range(2)]
    long_texts = ["word " * 400 + str(i) for i in range(3)]
    counts = int8.count_tokens(long_texts)

    def change_agent(rng: random.Random) -> None:
        name = f"extra{rng.randrange(6)}"
        if agent.has(f"rule:{name}") and rng.random() < 0.5:
            agent.delete(f"rule:{name}")  # the only thread that changes the agent: it must exist
        else:
            text = f"Rule {name}: refunds over {rng.randrange(99)} dollars need approval."
            agent.upsert(Rule(name, text, "", 300, IncludeMode.AGENT))

    def use_shared(rng: random.Random) -> None:
        op = rng.randrange(4)
        if op == 0:
            shared.add("rule:legal")
        elif op == 1:
            shared.remove("rule:legal")
        elif op == 2:
            shared.explain(rng.choice(MESSAGES), "rule:refunds")
        else:
            req = shared.build_request(rng.choice(MESSAGES))
            shared.record_reply(req, "ok")

    def use_own(i: int) -> Callable[[random.Random], None]:
        def work(rng: random.Random) -> None:
            own[i].build_request(rng.choice(MESSAGES))
            own[i].expand_from("the refund took ten days; the team plan costs forty dollars")

        return work

    def embed_directly(rng: random.Random) -> None:
        assert int8.count_tokens(long_texts) == counts
        assert int8.embed(long_texts[: rng.randrange(1, 4)]).shape[1] == 384

    workers = [change_agent, use_shared, use_shared, use_own(0), use_own(1), embed_directly]
    assert hammer(workers, rounds=60) == []
    # the store ends in step with the agent: a fresh engine over the same items selects the same
    fresh = Engine(agent, embedder=int8, cache_dir=False)
    for m in MESSAGES[:4]:
        assert picked(engine.session(), m) == picked(fresh.session(), m)
    assert len(shared.history) % 2 == 0
