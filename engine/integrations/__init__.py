"""contextsieve where agents are built: LangChain, Pydantic AI and the OpenAI Agents SDK.

:mod:`contextsieve.integrations.selector` is the framework-neutral core (:class:`ToolSelector`:
which of a framework's tools to send per model call). Each framework has its own module, behind its
own extra (a missing framework is a :class:`~contextsieve.errors.MissingExtraError` naming it):

- :mod:`contextsieve.integrations.langchain` (extra ``langchain``): an agent middleware choosing the
  tools per model call, and the stash as a LangGraph store.
- :mod:`contextsieve.integrations.pydantic_ai` (extra ``pydantic-ai``): a toolset offering per run step
  only the tools chosen from a wrapped toolset, and the stash as a toolset.
- :mod:`contextsieve.integrations.openai_agents` (extra ``openai-agents``): a dynamic ``tool_filter``
  for the Agents SDK's MCP servers (and ``is_enabled`` for its function tools), and the stash as
  function tools (``stash_tools``).
"""
