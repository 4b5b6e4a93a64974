"""The seed 003 fixture: tools superSecretTool(a, b) and say(text), as the seed writes them."""

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
