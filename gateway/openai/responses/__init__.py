"""The Responses API (/v1/responses): the routes, the request, the shapes, the stored responses and
the stream."""
