"""What every framework's stash tools share: the tools of :mod:`contextsieve.session.agent_tools` chosen by
name, and the scope they work on (a store and one namespace), checked once.

The namespace is the agent's own (``agent:<identity>``, as ``contextsieve serve`` stashes under) when the
tools are given the agent (``agent=``: an :class:`~contextsieve.Agent`, an :class:`~contextsieve.Engine`
or a :class:`~contextsieve.integrations.selector.ToolSelector`), or the one named (``session=``). Giving
neither is an :class:`InputError`: a fixed default would make every application on one store share it."""

from __future__ import annotations

from collections.abc import Sequence

from contextsieve.errors import InputError, brief
from contextsieve.session.agent_tools import AgentTool
from contextsieve.session.stash_agent_tools import STASH_TOOLS, StashScope
from contextsieve.stash.segment import check_session
from contextsieve.stash.store import StashStore

__all__ = ["FRAMEWORK_STASH_TOOLS", "agent_namespace", "stash_scope", "stash_tool_defs"]

#: The stash tools a framework gets by default: stash, retrieve, merge (``serve`` offers all six).
FRAMEWORK_STASH_TOOLS: tuple[str, ...] = ("stash_context", "retrieve_stashed_context", "merge_stashed_context")


def stash_tool_defs(names: Sequence[str]) -> list[AgentTool]:
    """The stash tools named ``names``, in that order; :class:`InputError` for a name there is none of."""
    if isinstance(names, str):
        raise InputError("tools must be a list of tool names, not one str")
    by_name = {t.name: t for t in STASH_TOOLS}
    unknown = [n for n in names if n not in by_name]
    if unknown or not names:
        raise InputError(f"tools must name stash tools ({', '.join(by_name)}), got {brief(list(names))}")
    return [by_name[n] for n in dict.fromkeys(names)]


def agent_namespace(agent: object, session: str | None, where: str) -> str:
    """The namespace of a framework's stash tools: ``session`` when given, else ``agent:<identity>`` of
    ``agent`` (an Agent, an Engine or a ToolSelector: anything with an agent); :class:`InputError` for
    both, for neither, or for something that has no agent."""
    if session is not None and agent is not None:
        raise InputError(f"{where}: give agent= (its own namespace) or session= (a namespace you name), not both")
    if session is not None:
        return session
    if agent is None:
        raise InputError(
            f"{where}: say whose stash it is: agent=<the Agent, Engine or ToolSelector> stashes under that agent's "
            "own namespace (agent:<identity>, as contextsieve serve does), session='<name>' under a namespace you "
            "name; with neither, every application on one store would share one"
        )
    from contextsieve.agent.agent import Agent
    from contextsieve.engine import Engine
    from contextsieve.integrations.selector import ToolSelector
    from contextsieve.session.session import Session

    found = agent.session.agent if isinstance(agent, ToolSelector) else agent
    found = found.agent if isinstance(found, (Engine, Session)) else found
    if not isinstance(found, Agent):
        raise InputError(f"{where}: agent must be a contextsieve Agent, Engine or ToolSelector, got {brief(agent)}")
    return "agent:" + found.identity


def stash_scope(
    store: StashStore, *, session: str, max_segments: int = 1000, cross_session: bool = False
) -> StashScope:
    """The scope of a framework's stash tools, its arguments checked (:class:`InputError` names a bad one)."""
    if not isinstance(store, StashStore):
        raise InputError(f"store must be a contextsieve StashStore, got {brief(store)}")
    if isinstance(max_segments, bool) or not isinstance(max_segments, int) or max_segments < 1:
        raise InputError(f"max_segments must be an int >= 1, got {brief(max_segments)}")
    if not isinstance(cross_session, bool):
        raise InputError(f"cross_session must be True or False, got {brief(cross_session)}")
    return StashScope(store, check_session(session), cross_session, max_segments)
