// Node clients running their own tool loop against a live toolq gateway, one scenario per run:
//   node frameworks.mjs <scenario>     with TOOLQ_BASE_URL (ending in /v1), TOOLQ_KEY, TOOLQ_MODEL
// Prints one JSON line: {"calls": [the tool's arguments, as the tool function got them], "answer": "..."}.
// tests/e2e/test_frameworks_node.py runs it and checks the line. The first request of every loop
// requires the tool (the bundled model is small and often answers without calling in auto mode).
import OpenAI from "openai";
import { generateText, streamText, tool, stepCountIs } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { z } from "zod";

const baseURL = process.env.TOOLQ_BASE_URL;
const apiKey = process.env.TOOLQ_KEY;
const model = process.env.TOOLQ_MODEL;
const QUESTION = "Calculate the zorbix of 15 and 7";
const calls = [];

// The caller's own tool function: records what it got, answers zorb + bix.
function calculateZorbix({ zorb, bix }) {
  calls.push({ zorb, bix });
  return zorb + bix;
}

const ZORBIX = {
  type: "function",
  function: {
    name: "calculate_zorbix",
    description: "Calculate the zorbix of two whole numbers, zorb and bix.",
    parameters: {
      type: "object",
      properties: { zorb: { type: "integer" }, bix: { type: "integer" } },
      required: ["zorb", "bix"],
    },
  },
};

async function openaiChat() {
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 300_000 });
  const messages = [{ role: "user", content: QUESTION }];
  const first = await client.chat.completions.create({
    model, messages, tools: [ZORBIX], tool_choice: "required", max_tokens: 64, temperature: 0,
  });
  const turn = first.choices[0].message;
  messages.push(turn);
  for (const call of turn.tool_calls ?? []) {
    const result = calculateZorbix(JSON.parse(call.function.arguments));
    messages.push({ role: "tool", tool_call_id: call.id, content: String(result) });
  }
  const final = await client.chat.completions.create({ model, messages, tools: [ZORBIX], max_tokens: 32, temperature: 0 });
  return final.choices[0].message.content;
}

async function openaiResponsesStreamed() {
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 300_000 });
  const tools = [{ type: "function", ...ZORBIX.function }];
  const first = await client.responses
    .stream({ model, input: QUESTION, tools, tool_choice: "required", max_output_tokens: 64, temperature: 0 })
    .finalResponse();
  const outputs = first.output
    .filter((item) => item.type === "function_call")
    .map((c) => ({ type: "function_call_output", call_id: c.call_id, output: String(calculateZorbix(JSON.parse(c.arguments))) }));
  const final = await client.responses.create({
    model, input: outputs, previous_response_id: first.id, tools, max_output_tokens: 32, temperature: 0,
  });
  return final.output_text;
}

function aiSdk() {
  const provider = createOpenAICompatible({ name: "toolq", baseURL, apiKey });
  return {
    model: provider(model),
    tools: {
      calculate_zorbix: tool({
        description: "Calculate the zorbix of two whole numbers, zorb and bix.",
        inputSchema: z.object({ zorb: z.number().int(), bix: z.number().int() }),
        execute: async (args) => calculateZorbix(args),
      }),
    },
    prompt: QUESTION,
    maxOutputTokens: 64,
    temperature: 0,
    maxRetries: 0,
    // the SDK's loop: a tool call, then the answer from its result
    stopWhen: stepCountIs(3),
    // require the tool on the first step only, so the loop can end with an answer
    prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? "required" : "auto" }),
  };
}

async function aiGenerateText() {
  const result = await generateText(aiSdk());
  return result.text;
}

async function aiStreamText() {
  const result = streamText({ ...aiSdk(), onError: ({ error }) => { throw error; } });
  let text = "";
  for await (const delta of result.textStream) text += delta;
  return text;
}

const scenarios = { openaiChat, openaiResponsesStreamed, aiGenerateText, aiStreamText };
const run = scenarios[process.argv[2]];
if (!run) {
  console.error(`unknown scenario ${process.argv[2]}; one of ${Object.keys(scenarios).join(", ")}`);
  process.exit(2);
}
const answer = await run();
console.log(JSON.stringify({ calls, answer }));
