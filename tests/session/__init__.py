"""Tests of contextsieve.session: the session API, its stash, outcomes, threads, payloads and the agent-facing tools."""
