"""The inspect page: a local Starlette app over one engine (needs ``contextsieve[mcp]``)."""
