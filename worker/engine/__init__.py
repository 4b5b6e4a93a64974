"""The engine room: the only package that imports llama_cpp.

``llama`` holds the model and generates (``LlamaEngine``, ``load_engine``); ``schema_grammar``
turns tool argument schemas into GBNF with llama.cpp's own converter.
"""

from worker.engine.llama import LlamaEngine, load_engine

__all__ = ["LlamaEngine", "load_engine"]
