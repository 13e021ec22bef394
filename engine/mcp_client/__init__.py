"""contextsieve as an MCP client: the live tools of an agent's MCP servers (needs ``contextsieve[mcp]``).

:mod:`contextsieve.mcp_client.client` lists servers; :mod:`contextsieve.mcp_client.catalog` caches listings per
server on disk, applies them to an :class:`~contextsieve.agent.agent.Agent` and reports what changed.
"""
