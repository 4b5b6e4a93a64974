"""OpenAI-compatible endpoints: one more front door onto the same jobs, queue and events.

- ``chat/``: POST /v1/chat/completions (``routes``; ``request`` translates, ``shapes`` and
  ``stream`` answer);
- ``responses/``: the Responses API, background and streamed with resume (``routes``; ``request``,
  ``shapes``, ``stream``, ``store``);
- shared by both: ``shared.py`` (the extension field, the job a request becomes, the stream's
  pieces), ``visible_text.py`` and ``streamed_calls.py`` (what of a job's token stream the caller
  sees);
- ``errors.py``: OpenAI's error shape for every failure on these paths; ``models.py``: the 404 of
  a model nobody serves. GET /v1/models is gateway/catalog.py's, in OpenAI's list shape.
"""
