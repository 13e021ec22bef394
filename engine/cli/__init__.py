"""The ``contextsieve`` command line (:func:`contextsieve.cli.main.main`).

contextsieve select AGENT_FILE "message" [--json]   the request context for one message ("-": stdin)
contextsieve example-agent                           print the path of the bundled example agent file
contextsieve index AGENT_FILE                        embed and cache every item (progress bar)
contextsieve tools AGENT_FILE [--refresh] [--json]   list the agent's MCP servers' tools, report changes
contextsieve serve AGENT_FILE [--transport http]     serve select_context / search_tools over MCP
contextsieve gateway AGENT_FILE                      front the agent's MCP servers, offering only the task's tools
contextsieve inspect AGENT_FILE [--session FILE]     a local page: the request context per message or saved turn
contextsieve stash stats|cleanup|rebuild STORE        a stash store's counts, expiry cleanup, re-embedding
contextsieve stash export STORE FILE | import FILE STORE | migrate SRC DST   move a stash (JSON Lines)
contextsieve eval AGENT_FILE TASKS.jsonl [--json]    tool selection measured on your tasks, cold and with history
contextsieve demo                                    a few messages against the bundled example agent
contextsieve build [--force] [--variant V|all]       measure the variants on this CPU (table), cache the choice
contextsieve embed TEXT [TEXT ...]                   print one vector per text (JSON lines)

Modules: :mod:`~contextsieve.cli.main` (the parser, :func:`~contextsieve.cli.main.main` and the dispatch),
:mod:`~contextsieve.cli.agent_commands` (loading an agent; select, index, tools, demo),
:mod:`~contextsieve.cli.server_commands` (serve, gateway, inspect), :mod:`~contextsieve.cli.stash_command`
(stash), :mod:`~contextsieve.cli.model_commands` (build, embed) and :mod:`~contextsieve.cli.evaluate` (eval); the
files named on the command line are read with the guards of :func:`contextsieve.fileio.read_user_file`.
"""
