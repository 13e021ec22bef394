"""The stash's fixtures: every store test runs on both backends (a SQLite file and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextsieve.stash.store import StashStore
from tests.helpers.stash_store import fake


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_uri"))
    return str(tmp_path / "stash.db")


@pytest.fixture
def store(location: str):  # noqa: ANN201
    s = StashStore.open(location, fake())
    yield s
    s.close()
