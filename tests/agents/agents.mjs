// The OpenAI Agents SDK through the gateway (tests/integration/test_agents.py): one agent
// run on the Responses API, unary then streamed, against TALLY_BASE_URL with TALLY_KEY.
// Prints one JSON line per run: its final output and the usage the SDK counted.
import { Agent, run, setDefaultOpenAIClient, setTracingDisabled } from '@openai/agents';
import OpenAI from 'openai';

setTracingDisabled(true);
setDefaultOpenAIClient(new OpenAI({ baseURL: process.env.TALLY_BASE_URL, apiKey: process.env.TALLY_KEY }));
const agent = new Agent({ name: 'tally', instructions: 'Answer briefly.', model: process.argv[2] });

const unary = await run(agent, 'Say hi.');
console.log(JSON.stringify({ stream: false, output: unary.finalOutput,
                             usage: unary.state.usage }));
const streamed = await run(agent, 'Say hi again.', { stream: true });
for await (const _ of streamed) { /* events pass through; the result gathers them */ }
await streamed.completed;
console.log(JSON.stringify({ stream: true, output: streamed.finalOutput,
                             usage: streamed.state.usage }));
