"""The store: everything toolq keeps in Redis, and the one place that knows how it is kept.

Keys (``keys``), the Lua scripts (``scripts`` + ``lua/``), job records and events
(``jobstore``), the link to arq (``arq_link``), leases, pauses, expiring fleet entries
(``entries``) for workers (``fleet``) and tool-service instances (``services``). The SDK and the
services import it; it imports no SDK, only the protocol beneath it.
"""
