"""What a framework integration's tool choice records: the tools chosen for one model call
(:class:`Choice`) or the call that failed open and got every tool (:class:`FailedChoice`), and how a
failed choice fails open (:func:`failed_choice`: one warning on the logger ``contextsieve.integrations``,
or :class:`~contextsieve.errors.ToolChoiceError` with ``fail_open=False``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from contextsieve.agent.items import ItemKey
from contextsieve.errors import InputError, ToolChoiceError, brief
from contextsieve.session.assembly import Request

__all__ = ["Choice", "FailedChoice", "error_text", "check_fail_open", "failed_choice", "logger"]

#: the logger of the integrations' warnings (one per model call whose choice failed open)
logger = logging.getLogger("contextsieve.integrations")

#: most characters of an error's text kept in a :class:`FailedChoice` record
_ERROR_CHARS = 1000


@dataclass(frozen=True)
class Choice:
    """The tools chosen for one model call.

    Attributes:
        tools: the framework's names of the tools to send (the name it listed them under in
            ``available``: the tool's own or the agent's tool name, :meth:`Agent.tool_names`), in offer
            order (``always_include`` tools first, then by score; a stable offer keeps its order across
            calls).
        request: the contextsieve request behind the choice (its ``context`` says why each item is in:
            ``request.context.grouped_text()``; rules and references are in :attr:`instructions`).
        proposed: tools the tool results pointed to (already in :attr:`tools`), by framework name.
        dropped: tools selected but cut by ``max_tools``, by framework name.
        keys: the agent's keys of :attr:`tools`, in the same order (``tool:SERVER:NAME``: which server's
            tool, when two servers have tools of one name).
    """

    tools: tuple[str, ...]
    request: Request
    proposed: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    keys: tuple[ItemKey, ...] = ()

    @property
    def instructions(self) -> str:
        """The request's rules and references as one system-prompt block (``""`` without any): one
        ``"Reference: ..."`` / ``"Rule: ..."`` paragraph each, references first, as
        :meth:`Request.openai` sends them."""
        parts = [
            m["content"]
            for m in self.request.messages[1:]
            if m["role"] == "user" and m["content"].startswith(("Reference: ", "Rule: "))
        ]
        return "\n\n".join(parts)

    @property
    def failed_open(self) -> bool:
        """``False``: the tools were chosen (a :class:`FailedChoice` says ``True``)."""
        return False

    @property
    def error(self) -> None:
        """``None``: nothing failed (a :class:`FailedChoice` holds the exception)."""
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (what the integrations record on a framework's state)."""
        return {
            "tools": list(self.tools),
            "keys": [str(k) for k in self.keys],
            "proposed": list(self.proposed),
            "dropped": list(self.dropped),
            "failed_open": False,
            "summary": self.request.context.summary(),
            "context": self.request.context.to_dict(),
        }


@dataclass(frozen=True)
class FailedChoice:
    """A model call whose choice failed and that got every tool it was given instead (failed open).

    It reads like a :class:`Choice` (``tools``, ``proposed``, ``dropped``, ``keys``,
    ``instructions``, ``to_dict``), so the integrations keep both in one record.

    Attributes:
        tools: the framework's names of every tool it gave for the call, in its order (all were sent).
        error: the exception choosing raised (also the integration's ``last_error``).
    """

    tools: tuple[str, ...]
    error: BaseException

    @property
    def failed_open(self) -> bool:
        """``True``: the choice failed and every tool was sent."""
        return True

    @property
    def request(self) -> None:
        """``None``: no contextsieve request was made."""
        return None

    @property
    def proposed(self) -> tuple[str, ...]:
        """``()``: nothing was proposed."""
        return ()

    @property
    def dropped(self) -> tuple[str, ...]:
        """``()``: nothing was cut."""
        return ()

    @property
    def keys(self) -> tuple[ItemKey, ...]:
        """``()``: no agent tool was chosen."""
        return ()

    @property
    def instructions(self) -> str:
        """``""``: no rules or references are added to a call that failed open."""
        return ""

    def to_dict(self) -> dict[str, Any]:
        """JSON form: :meth:`Choice.to_dict`'s keys, ``failed_open`` ``True``, ``error`` the exception's
        type and text (at most 1,000 characters; a lone surrogate in it escaped), ``context`` ``None``."""
        return {
            "tools": list(self.tools),
            "keys": [],
            "proposed": [],
            "dropped": [],
            "failed_open": True,
            "error": error_text(self.error),
            "summary": f"choice failed ({type(self.error).__name__}): all {len(self.tools)} tools sent",
            "context": None,
        }


def error_text(error: BaseException) -> str:
    """``"Type: message"`` of ``error``, at most :data:`_ERROR_CHARS` characters, a lone surrogate in it
    escaped (so a log handler or a JSON checkpoint can write it)."""
    text = f"{type(error).__name__}: {error}"[:_ERROR_CHARS]
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def check_fail_open(value: object) -> bool:
    """``value`` if it is a bool (an integration's ``fail_open`` argument); else :class:`InputError`."""
    if not isinstance(value, bool):
        raise InputError(f"fail_open must be True or False, got {brief(value)}")
    return value


def failed_choice(error: Exception, tools: Iterable[str], *, fail_open: bool, where: str) -> FailedChoice:
    """What an integration does when choosing a model call's tools raised ``error`` (anywhere: reading
    the conversation, building or syncing the selector, embedding, choosing).

    Args:
        error: the exception raised (the caller also keeps it as its ``last_error``).
        tools: the framework's names of every tool it gave for the call.
        fail_open: the integration's setting: ``True`` sends every tool, ``False`` raises.
        where: the integration, for the messages (e.g. ``"LangChain ContextSieveMiddleware"``).

    Returns:
        the :class:`FailedChoice` offering ``tools``, after logging one warning (logger
        ``contextsieve.integrations``) that names ``where``, the error and how many tools are sent.

    Raises:
        ToolChoiceError: with ``fail_open=False``, ``error`` as its cause (nothing is logged).
    """
    names = tuple(tools)
    if not fail_open:
        raise ToolChoiceError(
            f"{where}: choosing the tools failed ({error_text(error)}); with fail_open=True every tool "
            "would have been sent instead"
        ) from error
    logger.warning(
        "contextsieve: %s could not choose the tools (%s); sending all %d tools (fail_open)",
        where,
        error_text(error),
        len(names),
    )
    return FailedChoice(names, error)
