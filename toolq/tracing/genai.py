"""The attribute names toolq's spans carry: the OpenTelemetry GenAI semantic conventions
(``gen_ai.*``: operation, model, tokens, tools) and toolq's own (``toolq.*``: job, attempt,
round, where a tool ran). One place, so every span spells them the same way."""

from __future__ import annotations

# GenAI semantic conventions (Development status; the names of the registry as published)
OPERATION_NAME = "gen_ai.operation.name"  # chat | execute_tool | invoke_agent
PROVIDER_NAME = "gen_ai.provider.name"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_SEED = "gen_ai.request.seed"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"

CHAT = "chat"
EXECUTE_TOOL = "execute_tool"
INVOKE_AGENT = "invoke_agent"
PROVIDER = "llama.cpp"
AGENT = "toolq"

# toolq's own
JOB_ID = "toolq.job_id"
ATTEMPT = "toolq.attempt"
TENANT = "toolq.tenant"
ITERATION = "toolq.iteration"
WHERE = "toolq.tool.where"  # worker | service | mcp
INSTANCE = "toolq.service.instance"
EFFECT_KEY = "toolq.tool.effect_key"  # the call's effect key (toolq/tools/effects.py): a tool service's call id
ENDING = "toolq.ending"  # final | paused | cancelled | error | handed back


def tool_type(where: str) -> str:
    """gen_ai.tool.type: a function run in the fleet, or an extension (an MCP server's tool)."""
    return "extension" if where == "mcp" else "function"
