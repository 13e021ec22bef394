"""contextsieve as an MCP server to hosts: ``serve`` and the gateway (needs ``contextsieve[mcp]``)."""
