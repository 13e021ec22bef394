"""Tests of contextsieve.mcp_client and contextsieve.mcp_server against real MCP servers and clients."""
