"""The conversation loop of one job, in rooms:

- ``loop``: ``ConversationLoop``, the loop itself;
- ``state``: ``LoopState`` and its checkpoint codec, ``LoopOutcome``, ``Aborted``;
- ``transcript``: reading the conversation so far (answered, left and repeated calls);
- ``triage``: what becomes of each call (run, answer now, wait on the caller);
- ``steps``: carrying a turn's steps out and publishing the results;
- ``rounds``: one round of generation, and the answer held to ``response_format``;
- ``grammars`` and ``stops``: what holds a round's output in shape, and what ends it early;
- ``texts``: every text the loop writes for the model;
- ``sink``: where the loop publishes (``EventSink``).
"""

from worker.conversation.loop import ConversationLoop
from worker.conversation.sink import EventSink
from worker.conversation.state import Aborted, LoopOutcome, LoopState

__all__ = ["Aborted", "ConversationLoop", "EventSink", "LoopOutcome", "LoopState"]
