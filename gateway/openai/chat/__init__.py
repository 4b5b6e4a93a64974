"""POST /v1/chat/completions: the route, the request, the shapes and the stream."""
