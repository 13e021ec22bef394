"""The inspect page: a local Starlette app over one engine (needs ``contextsieve[mcp]``).

``inspector`` keeps the page's session and answers what the page asks, ``views`` shapes a request into
the JSON the page draws, ``app`` routes the page and its JSON endpoints, ``server`` runs the app on
127.0.0.1; ``index.html``, ``inspect.css`` and ``inspect.js`` are the page itself (package data).
"""
