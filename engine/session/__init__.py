"""A session: its state, the requests it builds and assembles, explanations, the stash link and the tools
a model gets."""
