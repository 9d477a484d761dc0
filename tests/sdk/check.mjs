// Drives the official OpenAI and Anthropic SDKs against a running gateway and prints one
// JSON object with what each case received, so that tests/integration/test_sdk.py can
// prove real clients accept what the gateway sends (amended streams above all).
//
//   node check.mjs OPENAI_BASE_URL ANTHROPIC_BASE_URL KEY
//
// The base URLs are README.md's (its "Clients" section), as test_sdk.py reads them.
//
// Token counts are mock-upstream knobs (x-mock-* headers, loadtest/README.md); each case
// echoes its knobs, which the test checks the SDKs' usage against. Any SDK exception
// exits 1.
import Anthropic from "@anthropic-ai/sdk";
import { VERSION as ANTHROPIC_VERSION } from "@anthropic-ai/sdk/version";
import OpenAI from "openai";
import { VERSION as OPENAI_VERSION } from "openai/version";

const [openaiBaseURL, anthropicBaseURL, apiKey] = process.argv.slice(2);
if (!openaiBaseURL || !anthropicBaseURL || !apiKey) {
  console.error("usage: node check.mjs OPENAI_BASE_URL ANTHROPIC_BASE_URL KEY");
  process.exit(2);
}

// No retries: a retried request would hide a failure and add a second row.
const common = { apiKey, maxRetries: 0, timeout: 30_000 };
const openai = new OpenAI({ ...common, baseURL: openaiBaseURL });
const anthropic = new Anthropic({ ...common, baseURL: anthropicBaseURL });

const headersOf = (knobs) =>
  Object.fromEntries(Object.entries(knobs).map(([k, v]) => [`x-mock-${k}`, String(v)]));

// Reads an OpenAI stream through the SDK's iterator, keeping what a client would see.
async function openaiStream(knobs, extra) {
  const { data, response } = await openai.chat.completions
    .create({ model: "mock-gpt", messages: [], stream: true, ...extra },
            { headers: headersOf(knobs) })
    .withResponse();
  const seen = { chunks: 0, text: "", usage_null: 0, usage_set: 0, usage: null,
                 finish_reason: null };
  for await (const chunk of data) {
    seen.chunks++;
    seen.text += chunk.choices[0]?.delta?.content ?? "";
    seen.finish_reason = chunk.choices[0]?.finish_reason ?? seen.finish_reason;
    if (chunk.usage === null) seen.usage_null++;
    if (chunk.usage != null) {
      seen.usage_set++;
      seen.usage = chunk.usage;
    }
  }
  return { id: response.headers.get("x-request-id"), knobs, ...seen };
}

async function openaiUnary(knobs, extra) {
  const { data, response } = await openai.chat.completions
    .create({ model: "mock-gpt", messages: [], ...extra }, { headers: headersOf(knobs) })
    .withResponse();
  return { id: response.headers.get("x-request-id"), knobs,
           text: data.choices[0].message.content, usage: data.usage };
}

// The Responses API: unary, or a stream read through the SDK's iterator to its terminal
// event, the only one that carries the usage.
async function openaiResponses(knobs, stream) {
  const { data, response } = await openai.responses
    .create({ model: "mock-gpt", input: "Say hi.", stream }, { headers: headersOf(knobs) })
    .withResponse();
  if (!stream)
    return { id: response.headers.get("x-request-id"), knobs, text: data.output_text,
             status: data.status, usage: data.usage };
  const seen = { events: 0, text: "", terminal: null, usage: null };
  for await (const event of data) {
    seen.events++;
    if (event.type === "response.output_text.delta") seen.text += event.delta;
    if (event.response?.usage) {
      seen.terminal = event.type;
      seen.usage = event.response.usage;
    }
  }
  return { id: response.headers.get("x-request-id"), knobs, ...seen };
}

async function anthropicStream(knobs) {
  const stream = anthropic.messages.stream(
    { model: "mock-claude", max_tokens: 100, messages: [] }, { headers: headersOf(knobs) });
  const { response } = await stream.withResponse();
  const message = await stream.finalMessage();
  return { id: response.headers.get("x-request-id"), knobs,
           text: message.content.map((b) => b.text ?? "").join(""),
           stop_reason: message.stop_reason, usage: message.usage };
}

async function anthropicUnary(knobs) {
  const { data, response } = await anthropic.messages
    .create({ model: "mock-claude", max_tokens: 100, messages: [] },
            { headers: headersOf(knobs) })
    .withResponse();
  return { id: response.headers.get("x-request-id"), knobs,
           text: data.content.map((b) => b.text ?? "").join(""),
           stop_reason: data.stop_reason, usage: data.usage };
}

try {
  const out = {
    versions: { node: process.version, openai: OPENAI_VERSION, anthropic: ANTHROPIC_VERSION },
    openai_stream_amended: await openaiStream(
      { frames: 50, "prompt-tokens": 33, "completion-tokens": 50 }, {}),
    openai_stream_usage: await openaiStream(
      { frames: 5, "prompt-tokens": 12, "completion-tokens": 5, "cached-tokens": 4 },
      { stream_options: { include_usage: true } }),
    // max_tokens bounds the answer: HAProxy's json_query reads it; without, Lua capture.
    openai_unary_json_query: await openaiUnary(
      { "prompt-tokens": 1000, "completion-tokens": 500, "cached-tokens": 200,
        "reasoning-tokens": 50 }, { max_tokens: 100 }),
    openai_unary_capture: await openaiUnary(
      { "prompt-tokens": 1001, "completion-tokens": 501 }, {}),
    anthropic_stream: await anthropicStream(
      { frames: 20, "prompt-tokens": 100, "completion-tokens": 40, "cached-tokens": 1000,
        "cache-creation-tokens": 2000 }),
    anthropic_unary: await anthropicUnary({ "prompt-tokens": 7, "completion-tokens": 9 }),
    openai_responses_unary: await openaiResponses(
      { "prompt-tokens": 300, "completion-tokens": 30, "cached-tokens": 100,
        "reasoning-tokens": 10 }, false),
    openai_responses_stream: await openaiResponses(
      { frames: 6, "prompt-tokens": 301, "completion-tokens": 31, "cached-tokens": 101,
        "response-end": 1 }, true),
  };
  console.log(JSON.stringify(out));
} catch (e) {
  console.error(`check.mjs: SDK error: ${e?.constructor?.name}: ${e?.message}`);
  if (e?.stack) console.error(e.stack);
  process.exit(1);
}
