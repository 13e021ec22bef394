"""A small support agent the tests build sessions over: rules, references and tools in every include
mode, from two MCP servers."""

from __future__ import annotations

from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.items import IncludeMode, Reference, Rule, Tool

A, M, G = IncludeMode.ALWAYS, IncludeMode.MANUAL, IncludeMode.AGENT


def make_agent() -> Agent:
    servers = {
        "fs": McpServer("fs", {"type": "stdio", "command": "fs-server", "args": []}, default_include=G),
        "web": McpServer("web", {"type": "stdio", "command": "web", "args": []}),  # default: always
    }
    return Agent(
        name="support",
        system_prompt="You are a support agent.",
        rules=[
            Rule("tone", "Be polite and brief.", "how to talk", 100, A),
            Rule("refunds", "Refunds take ten days after the parcel arrives.", "refund policy", 500, G),
            Rule("escalate", "Escalate outages to the on-call engineer.", "outage escalation", 500, G),
            Rule("legal", "Never give legal advice.", "", 10, M),
        ],
        references=[
            Reference("pricing", "Basic costs ten dollars. Team costs forty dollars.", "plans and prices", 200, G),
            Reference("faq", "Passwords are reset from the security page.", "common questions", 300, A),
        ],
        servers=servers,
        tools=[
            Tool("fs", "read_file", "read a file from disk", {"type": "object"}),
            Tool("fs", "write_file", "write a file to disk", {"type": "object"}, include=M),
            Tool("web", "fetch", "fetch a web page by url"),
        ],
    )
