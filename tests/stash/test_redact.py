"""Secrets kept out of the stash (issue 28, secrets): real-shaped fake credentials of every kind are
replaced before storage and counted by kind; ordinary text, hashes and ids are left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextsieve.stash.config import StashConfig
from contextsieve.stash.redact import KINDS, redact
from contextsieve.stash.store import StashStore
from tests.helpers.fake_embedder import FakeEmbedder

#: One real-shaped fake secret per kind, inside the kind of text it turns up in.
CAUGHT = {
    "private_key": (
        "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAx4\nAbC==\n-----END RSA PRIVATE KEY-----\nend"
    ),
    "jwt": (
        "cookie eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    ),
    "bearer_token": "curl -H 'Authorization: Bearer 9f8e7d6c5b4a39f8e7d6c5b4a3' https://api.example.com",
    "url_password": "DATABASE_URL=postgres://app:S3cr3t!pass@db.internal:5432/prod",
    "anthropic_key": "ANTHROPIC_KEY sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcd in the runner",
    "openai_key": "use sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f for the eval",
    "aws_access_key_id": "the build used AKIAIOSFODNN7EXAMPLE yesterday",
    "github_token": "clone with ghp_1234567890abcdefghijABCDEFGHIJ123456 then push",
    "gitlab_token": "glpat-AbCdEfGhIjKlMnOpQrSt12 is the CI token",
    "slack_token": "bot xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx posts",
    "stripe_key": "charge with sk_live_51HbXyzAbCdEfGhIjKlMnOpQr now",
    "google_api_key": "maps AIzaSyA1bC2dE3fG4hI5jK6lM7nO8pQ9rS0tU1v key",
    "huggingface_token": "hf_abcdefghijklmnopqrstuvwxyzABCDEF12 pulls the model",
    "npm_token": "//registry.npmjs.org/:_authToken npm_abcdefghijklmnopqrstuvwxyz0123456789",
    "sendgrid_key": "mail SG.abcdefghijklmnopqrstuv.ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefg",
    "secret_assignment": "export STRIPE_SECRET=whsec_abcdef123456\nDB_PASSWORD=hunter2hunter2\nLOG_LEVEL=debug",
}
SECRETS = [
    "MIIEpAIBAAKCAQEAx4",
    "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "9f8e7d6c5b4a39f8e7d6c5b4a3",
    "S3cr3t!pass",
    "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f",
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_1234567890abcdefghijABCDEFGHIJ123456",
    "glpat-AbCdEfGhIjKlMnOpQrSt12",
    "xoxb-123456789012",
    "sk_live_51HbXyzAbCdEfGhIjKlMnOpQr",
    "AIzaSyA1bC2dE3fG4hI5jK6lM7nO8pQ9rS0tU1v",
    "hf_abcdefghijklmnopqrstuvwxyzABCDEF12",
    "npm_abcdefghijklmnopqrstuvwxyz0123456789",
    "SG.abcdefghijklmnopqrstuv",
    "whsec_abcdef123456",
    "hunter2hunter2",
]
#: Text that looks a little like secrets and must stay as it is.
KEPT = [
    "The deploy failed because the token expired; rotate the API key and set a password policy.",
    "commit 3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39 fixed task-1234 in the sk-learn docs",
    "uuid 123e4567-e89b-12d3-a456-426614174000; path /home/user/project; ask-ant-farm",
    "Set password_min_length = 12 in the policy; the token bucket holds 100 requests.",
    "See https://example.com/docs?page=2 and mailto:ops@example.com; LOG_LEVEL=debug",
    "Use `Bearer <token>` in the Authorization header (the word Bearer, then the token).",
]


@pytest.mark.parametrize("kind", list(CAUGHT))
def test_each_kind_is_caught(kind: str) -> None:
    r = redact(CAUGHT[kind])
    assert r.counts.get(kind), (kind, r)
    assert f"[REDACTED:{kind}]" in r.text
    assert not any(s in r.text for s in SECRETS), r.text
    assert redact(r.text).text == r.text  # redacting twice changes nothing


def test_every_rule_has_a_case_and_ordinary_text_is_left_alone() -> None:
    assert set(KINDS) == set(CAUGHT)
    for text in KEPT:
        assert redact(text).text == text and not redact(text).counts, text


class Recording(FakeEmbedder):
    """The fake embedder, keeping every text it was given."""

    model_id = "fake/1"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def embed(self, texts: list[str], **kwargs: object):  # noqa: ANN201
        self.seen += list(texts)
        return super().embed(texts, **kwargs)


def fake() -> Recording:
    return Recording()


def test_secrets_never_reach_storage_and_the_result_counts_them(tmp_path: Path) -> None:
    emb = fake()
    with StashStore.open(tmp_path / "s.db", emb) as store:
        result = store.stash([CAUGHT["github_token"], CAUGHT["secret_assignment"], "nothing secret"], session="s")
        assert result.redacted == {"github_token": 1, "secret_assignment": 2} and result.stashed == 3
        texts = [seg.text for seg in store.list(session="s")]
        assert not any(s in t for t in texts for s in SECRETS)
        assert any("[REDACTED:github_token]" in t for t in texts)
        assert not any(s in t for t in emb.seen for s in SECRETS)  # nor the embedder
        hit = store.retrieve("clone then push", session="s", top_k=1)[0]
        assert "ghp_" not in hit.segment.text
    raw = (tmp_path / "s.db").read_bytes()
    assert b"ghp_1234567890" not in raw and b"hunter2hunter2" not in raw
    with StashStore.open(tmp_path / "off.db", fake(), config=StashConfig(redact=False)) as off:
        kept = off.stash([CAUGHT["github_token"]], session="s")
        assert kept.redacted == {} and "ghp_1234567890" in off.list(session="s")[0].text  # opted out


def test_hostile_text_does_not_hang_redaction() -> None:
    """A rule that scans to the end of the text from each of many starting points (an unbounded URL
    scheme, a private key BEGIN without END) would take minutes on a 1 MB segment; every rule is
    bounded. A hang check with a generous budget, not a speed target (benchmarks measure speed)."""
    import time

    n = 300_000
    hostile = ["ab." * (n // 3), "a://" * (n // 4), "-----BEGIN RSA PRIVATE KEY-----" * (n // 31), "sk-" * (n // 3)]
    start = time.monotonic()
    for text in hostile:
        assert redact(text).counts.get("private_key", 0) == 0
    assert time.monotonic() - start < 20
