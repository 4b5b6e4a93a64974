"""The toolq SDK: submit jobs, follow their events, fetch results, cancel; over HTTP or Redis.

Over the gateway (HTTP, API key)::

    import toolq

    async with toolq.Client("http://gateway:8000", api_key="...") as client:
        job_id = await client.submit("Calculate the zorbix of 15 and 7", tools=["calculate_zorbix"])
        async for event in client.events(job_id):      # replays, follows, resumes after a drop
            print(event.seq, event.type.value, event.data)
        result = await client.result(job_id, timeout=60)
        print(result.content)

Straight into Redis, for a service inside the same network (no gateway hop, no key, no caps)::

    client = toolq.Client(redis_url="redis://redis:6379/0")

From a script, without asyncio::

    with toolq.SyncClient("http://127.0.0.1:8000") as client:
        job_id = client.submit("hello")
        print(client.result(job_id, timeout=60).content)

Watching without the SDK: every event of every job is published on the Redis channel
``toolq:events``, and each job's on ``toolq:events:<job_id>`` (the payload is the event JSON)::

    import json, redis.asyncio as redis

    async def watch(url="redis://127.0.0.1:6379/0"):
        pubsub = redis.Redis.from_url(url).pubsub()
        await pubsub.subscribe("toolq:events")            # or f"toolq:events:{job_id}"
        async for msg in pubsub.listen():
            if msg["type"] == "message":
                event = json.loads(msg["data"])          # {"job_id", "seq", "type", "ts", "data"}
                print(event["job_id"], event["type"])

Tools that the caller runs itself: the job pauses (status ``requires_action``) when the model calls
one, and resumes once the results are posted. ``run`` does all of it with plain Python functions,
and asks ``approve`` about calls that need approval::

    def lookup_user(name: str) -> str:
        \"\"\"Look a user up in our directory.\"\"\"
        return directory[name]

    result = await client.run("Who is ann?", client_tools=[lookup_user], approve=lambda call: True)

By hand: follow the events; on ``requires_action``, ``RequiresActionData.of(event).calls``
(``toolq.wire.payloads``) lists the calls, answered
with ``submit_tool_results(job_id, [{"tool_call_id": ..., "content": ...}])`` or
``submit_approvals(job_id, [{"tool_call_id": ..., "approved": True}])``.

Pub/sub delivers only what happens while subscribed; ``Client.events`` also replays what came
before and never loses an event across a reconnect.

The package: ``Client`` (client.py) holds the policy, over one ``Transport`` (transport.py):
``HttpTransport`` (http_transport.py) or ``RedisTransport`` (redis_transport.py, imported only in
Redis mode); ``SyncClient`` (sync.py) runs a Client on a thread of its own.
"""

from toolq.client.client import Client, build_request
from toolq.client.http_transport import ClientSettings
from toolq.client.sync import SyncClient

__all__ = ["Client", "ClientSettings", "SyncClient", "build_request"]
