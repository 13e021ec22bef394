"""Secrets kept out of the stash: credentials of known shapes are replaced by a typed placeholder
(``[REDACTED:github_token]``) before a segment is embedded, hashed or stored (seed 004, open
question 6). On by default (``StashConfig.redact``); the stash result counts what was replaced by
kind, never the secret.

What is caught (:data:`RULES`, in this order; each a regular expression over the segment's text):
private key blocks (PEM and OpenSSH), JSON web tokens, ``Authorization: Bearer`` / ``Basic`` values,
passwords in URLs (``scheme://user:password@host``: the password only), provider keys of shapes
that cannot occur in prose (Anthropic ``sk-ant-``, OpenAI ``sk-`` / ``sk-proj-``, AWS access key ids
``AKIA``/``ASIA``, GitHub ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``/``github_pat_``, GitLab
``glpat-``, Slack ``xox?-``, Stripe ``sk_live_``/``rk_live_``/``sk_test_``, Google ``AIza``, Hugging
Face ``hf_``, npm ``npm_``, SendGrid ``SG.``), and assignments whose name says secret
(``.env`` / shell / config lines such as ``DB_PASSWORD=...``, ``"api_key": "..."``, ``aws_secret_access_key
= ...``: the value only). What is not caught: secrets of no known shape in free prose ("the password
is hunter2"), which no pattern can tell from ordinary words.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

__all__ = ["Redaction", "RULES", "KINDS", "redact"]

_NAME = (  # bounded repeats throughout: every rule runs in linear time on a 1 MB segment
    r"[A-Za-z0-9_.-]{0,64}(?:secret|passwd|password|pwd|token|api[_-]?key|apikey|private[_-]?key|access[_-]?key)"
    r"[A-Za-z0-9_.-]{0,64}"
)

_KEY_BEGIN = re.compile(r"-----BEGIN (?:[A-Z0-9]{1,16} ){0,4}PRIVATE KEY(?: BLOCK)?-----")
_KEY_END = re.compile(r"-----END (?:[A-Z0-9]{1,16} ){0,4}PRIVATE KEY(?: BLOCK)?-----")

#: (kind, pattern, group to replace or 0 for the whole match), tried in this order after private
#: key blocks (which are paired BEGIN to the next END in one pass, see :func:`redact`).
RULES: tuple[tuple[str, re.Pattern[str], int], ...] = (
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), 0),
    ("bearer_token", re.compile(r"(?i)\b(?:bearer|basic)\s+([A-Za-z0-9._~+/-]{16,}=*)"), 1),
    ("url_password", re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]{0,30}://[^\s:/@]{1,256}:([^\s@/]{1,256})@"), 1),
    ("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}"), 0),
    ("openai_key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"), 0),
    ("aws_access_key_id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), 0),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"), 0),
    ("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), 0),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), 0),
    ("stripe_key", re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"), 0),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), 0),
    ("huggingface_token", re.compile(r"\bhf_[A-Za-z0-9]{30,}"), 0),
    ("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{36}"), 0),
    ("sendgrid_key", re.compile(r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"), 0),
    (
        "secret_assignment",
        re.compile(
            rf"(?im)(?:^|[\s{{,;]|\bexport\s+)[\"']?{_NAME}[\"']?\s*[:=]\s*[\"']?([^\s\"',;}}]{{6,}})",
        ),
        1,
    ),
)

#: Every kind :func:`redact` reports.
KINDS = ("private_key", *(kind for kind, _, _ in RULES))

_PLACEHOLDER = re.compile(r"\[REDACTED:[a-z_]+\]")


@dataclass(frozen=True)
class Redaction:
    """A text with its secrets replaced, and how many of each kind were replaced."""

    text: str
    counts: dict[str, int]


def redact(text: str) -> Redaction:
    """``text`` with every match of :data:`RULES` replaced by ``[REDACTED:<kind>]`` (a placeholder
    already there is left alone, so redacting twice changes nothing)."""
    counts: Counter[str] = Counter()
    text = _private_keys(text, counts)
    for kind, pattern, group in RULES:

        def swap(m: re.Match[str], kind: str = kind, group: int = group) -> str:
            if _PLACEHOLDER.fullmatch(m.group(group)):
                return m.group(0)
            counts[kind] += 1
            start, end = m.start(group) - m.start(0), m.end(group) - m.start(0)
            whole = m.group(0)
            return whole[:start] + f"[REDACTED:{kind}]" + whole[end:]

        text = pattern.sub(swap, text)
    return Redaction(text, dict(counts))


def _private_keys(text: str, counts: Counter[str]) -> str:
    """PEM / OpenSSH private key blocks, each BEGIN paired with the next END after it (one pass over
    both marker lists, so many BEGINs without an END cost linear time, not a scan to the end each)."""
    if "PRIVATE KEY" not in text:
        return text
    ends = [m.end() for m in _KEY_END.finditer(text)]
    out: list[str] = []
    at = 0
    j = 0
    for m in _KEY_BEGIN.finditer(text):
        if m.start() < at:
            continue  # inside a block already replaced
        while j < len(ends) and ends[j] <= m.end():
            j += 1
        if j == len(ends):
            break
        out.append(text[at : m.start()])
        out.append("[REDACTED:private_key]")
        counts["private_key"] += 1
        at = ends[j]
    out.append(text[at:])
    return "".join(out)
