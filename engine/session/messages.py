"""A session's history: chat messages, tool results and the assistant replies with their request
context."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from contextsieve.errors import InputError, brief, check_text
from contextsieve.selection.context import RequestContext

__all__ = ["Message", "ROLES", "new_message"]

#: The roles a history message may have.
ROLES = ("user", "assistant", "tool")


@dataclass(frozen=True)
class Message:
    """A chat message; assistant replies carry the request context they were produced with.

    Attributes:
        role: ``user``, ``assistant`` or ``tool`` (a tool result; sent to the LLM as a user message
            ``"Tool result (<name>): ..."``).
        created: when it was written (seconds since the epoch).
        name: the tool, for tool results.
    """

    role: str
    content: str
    context: RequestContext | None = None
    created: float = field(default_factory=time.time)
    name: str | None = None

    def sent(self) -> tuple[str, str]:
        """``(role, content)`` as the LLM gets it."""
        if self.role == "tool":
            return "user", f"Tool result ({self.name or 'tool'}): {self.content}"
        return self.role, self.content

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content, "created": self.created}
        if self.name is not None:
            d["name"] = self.name
        if self.context is not None:
            d["context"] = self.context.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Message:
        ctx = RequestContext.from_dict(d["context"]) if "context" in d else None
        return cls(d["role"], d["content"], ctx, d.get("created", 0.0), d.get("name"))


def new_message(role: str, content: str, name: str | None = None) -> Message:
    """A checked history message (:meth:`Session.add_message <contextsieve.session.session.Session.add_message>`):
    :class:`InputError` for an unknown role, a content that is no str or holds lone surrogates, or a
    ``name`` on anything but a tool result."""
    if role not in ROLES:
        raise InputError(f"role must be one of {', '.join(ROLES)}, got {brief(role)}")
    if not isinstance(content, str):
        raise InputError(f"content must be a str, got {type(content).__name__}")
    check_text(content, f"the {role} message")
    if name is not None and (not isinstance(name, str) or role != "tool"):
        raise InputError("name is the tool's name, a str, for tool messages only")
    return Message(role, content, name=name)
