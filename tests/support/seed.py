"""The reference tool set: superSecretTool(a, b) and say(text), exactly as the reference tool
conversations (the prompts and grammars pinned in tests/unit/test_formats.py and test_gbnf.py)
write them."""

SEED_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "superSecretTool",
            "description": "Adds two numbers",
            "parameters": {"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "say",
            "description": "Says something out loud (TTS)",
            "parameters": {
                "properties": {"text": {"description": "The text to say out loud", "type": "string"}},
                "required": ["text"],
            },
        },
    },
]
