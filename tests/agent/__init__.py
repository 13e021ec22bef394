"""Tests of contextsieve.agent: agent files, identity and tool names."""
