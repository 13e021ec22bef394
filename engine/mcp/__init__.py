"""contextsieve as an MCP client: the live tools of an agent's MCP servers (needs ``contextsieve[mcp]``).

:mod:`contextsieve.mcp.client` lists servers; :mod:`contextsieve.mcp.catalog` caches listings per
server on disk, applies them to an :class:`~contextsieve.agent.Agent` and reports what changed.
"""
