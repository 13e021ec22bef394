"""What an agent is and how it is stored: its items, settings, agent files, tool names and use."""
