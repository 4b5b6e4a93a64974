"""Saved sequence state: a conversation's KV cache outlives its slot, in host memory and on disk.

A slot's cache is lost when another prompt takes the slot (a job paused for its caller, a
conversation between turns) or when the worker restarts, and evaluating a long prompt again is
the expensive part of a round on a CPU. So the decode thread copies a sequence's state out of
llama.cpp (``llama_state_seq_get_data``) when its generation ends and when its slot is about to
be given to another prompt, and hands the bytes to a writer thread, which keeps them:

- ``host.py``: in host memory, bounded in bytes, least recently used out first;
- ``disk.py``: in a local folder, bounded in bytes, oldest out first; ``stateformat.py`` is a
  file's header and its checks (a truncated, corrupt or foreign file is refused and deleted);
- ``store.py``: both tiers behind one index from token-block hashes (``blocks.py``) to saved
  states, so the longest saved prefix of a prompt is found by walking its blocks;
- ``identity.py``: what a state is only valid for (the model file, the llama.cpp build, the
  cache's layout), part of every key and every file header;
- ``llama_state.py``: the calls into llama.cpp (copy a range of a sequence's positions out, set
  a saved state back into a sequence), on the decode thread, which owns the context;
- ``piecewise.py``: a save copied out in pieces between decode steps, so it never holds the
  other slots up for long;
- ``spare.py``: the buffer an eviction copies into, made while the engine is idle.

The keeper of saved state (worker/engine/keeper.py) asks the store before a prompt is placed: a
prefix its own slot holds, then one another slot holds (copied), then host memory, then disk,
whichever is longest (the cheapest on a tie); a restored state is set into the slot and only the rest of the
prompt is evaluated.
"""

from worker.engine.tiers.store import Found, TieredStore, TierSettings

__all__ = ["Found", "TierSettings", "TieredStore"]
