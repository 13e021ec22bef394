"""Which of an agent's items go into a request: the chunk store, search, ranking and the request context."""
