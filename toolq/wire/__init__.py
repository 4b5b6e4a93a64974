"""The wire models: what travels between the caller, the gateway, the store and the workers.

``protocol`` (the wire contract: ``JobRequest``, ``Message``, ``ToolCall``, ``Event``,
``JobResult``, ``PROTOCOL_VERSION``; a leaf), ``payloads`` (what each event carries), ``api`` (the
HTTP API's response bodies), ``thread_api`` (the /v1/threads bodies), and the leaves the protocol
stands on: ``limits`` (the sizes it allows), ``definitions`` (a tool definition's checks),
``schema_bounds`` (the work a caller's schema may ask for), ``patterns`` and ``re2_validator``
(callers' regexes on RE2), ``nesting`` (how deep a JSON value or text nests).

This module imports nothing, so ``import toolq.wire.protocol`` loads only the protocol and its leaves.
"""
