"""The engine room: the only package that imports llama_cpp.

``llama`` holds the model and generates (``LlamaEngine``, ``load_engine``). Grammars are built
elsewhere (worker/grammar/), never by importing the engine.
"""

from worker.engine.llama import LlamaEngine, load_engine

__all__ = ["LlamaEngine", "load_engine"]
