"""The package's layers, bottom to top (``tests/package/test_layers.py`` checks the imports against them;
``tests/helpers/module_map.py`` draws docs/internals.md's module map from them)."""

from __future__ import annotations

#: bottom to top; a unit imports only units of its own layer or of the layers below it
LAYERS: list[tuple[str, ...]] = [
    ("errors", "fileio", "choices", "progress"),  # the ground: used by all, uses nothing of the package
    ("kernels",),  # pure array functions
    ("models",),  # the embedding runner
    ("retrieval",),  # the one retrieval core: embedding protocol and cache, text splitting, index, BM25, fusion
    ("stash",),  # the stash store, on the retrieval core alone (it knows no agent)
    ("agent",),  # what an agent is: items, settings, agent files, tool names, use
    ("selection",),  # which items go into a request: chunk store, search, ranking, request context
    ("session",),  # a session: state, offer, requests and their assembly, explanations, stash link, agent tools
    ("mcp_client",),  # the client of an agent's MCP servers
    ("engine",),  # the entry point that ties an agent to its embedder, store and sessions
    ("mcp_server", "evaluation"),  # over an Engine: serve and the gateway; selection measured on tasks (eval)
    ("integrations",),  # the frameworks
    ("inspect",),  # the page
    ("cli", "__main__"),  # the command line
]
#: unit -> the number of its layer (0: the ground)
RANK = {unit: i for i, units in enumerate(LAYERS) for unit in units}
