"""OpenAI-compatible endpoints: one more front door onto the same jobs, queue and events.

- ``chat.py``: POST /v1/chat/completions (``chat_request`` translates, ``chat_shapes`` and
  ``chat_stream`` answer);
- ``responses.py``: the Responses API, background and streamed with resume (``responses_request``,
  ``responses_shapes``, ``responses_stream``, ``responses_store``);
- ``errors.py``: OpenAI's error shape for every failure on these paths; ``models.py``: the 404 of
  a model nobody serves. GET /v1/models is gateway/catalog.py's, in OpenAI's list shape.
"""
