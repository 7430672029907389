// openai-node against `choicewise serve`: runs each case the Rust test
// (crates/gateway/tests/gateway/clients.rs) names and prints, as one JSON object, what the client
// library parsed. The Rust test holds the expectations, the same for every client.
//
// Environment: CHOICEWISE_GATEWAY_URL (base URL, .../v1), CHOICEWISE_GATEWAY_KEY; NODE_PATH
// finds the `openai` package.
'use strict';
const { OpenAI, APIError } = require('openai');

const MESSAGES = [{ role: 'user', content: "What is 6 times 7? End with 'Answer: N'." }];

async function streamed(client, request) {
  const choices = new Map();
  let usage = null;
  let summary = null;
  const stream = await client.chat.completions.create({ ...request, stream: true, messages: MESSAGES });
  for await (const chunk of stream) {
    if (chunk.object !== 'chat.completion.chunk') throw new Error(`object ${chunk.object}`);
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choicewise) summary = chunk.choicewise;
    for (const c of chunk.choices) {
      if (!choices.has(c.index)) {
        choices.set(c.index, { index: c.index, content: '', finish_reason: null, tool_calls: new Map(), error: null });
      }
      const out = choices.get(c.index);
      if (c.delta && c.delta.content) out.content += c.delta.content;
      for (const tc of (c.delta && c.delta.tool_calls) || []) {
        if (!out.tool_calls.has(tc.index)) out.tool_calls.set(tc.index, { id: null, name: '', arguments: '' });
        const call = out.tool_calls.get(tc.index);
        if (tc.id) call.id = tc.id;
        if (tc.function && tc.function.name) call.name += tc.function.name;
        if (tc.function && tc.function.arguments) call.arguments += tc.function.arguments;
      }
      if (c.finish_reason) out.finish_reason = c.finish_reason;
      if (c.choicewise && c.choicewise.error) out.error = c.choicewise.error;
    }
  }
  const sorted = [...choices.values()].sort((a, b) => a.index - b.index);
  for (const out of sorted) {
    out.tool_calls = [...out.tool_calls.entries()].sort((a, b) => a[0] - b[0]).map((e) => e[1]);
  }
  return { choices: sorted, usage, choicewise: summary };
}

async function whole(client, request) {
  const completion = await client.chat.completions.create({ ...request, stream: false, messages: MESSAGES });
  if (completion.object !== 'chat.completion') throw new Error(`object ${completion.object}`);
  const choices = completion.choices.map((c) => ({
    index: c.index,
    content: c.message.content || '',
    finish_reason: c.finish_reason,
    tool_calls: (c.message.tool_calls || []).map((tc) => ({ id: tc.id, name: tc.function.name, arguments: tc.function.arguments })),
    error: null,
  }));
  return { choices, usage: completion.usage || null, choicewise: completion.choicewise || null };
}

async function errorOf(call) {
  try {
    await call();
  } catch (e) {
    if (e instanceof APIError) {
      const body = e.error || {};
      return { status: e.status, message: body.message, type: body.type, class: e.constructor.name };
    }
    throw e;
  }
  return { status: null };
}

async function main() {
  const baseURL = process.env.CHOICEWISE_GATEWAY_URL;
  const client = new OpenAI({ baseURL, apiKey: process.env.CHOICEWISE_GATEWAY_KEY, maxRetries: 0, timeout: 60000 });
  const usage = { stream_options: { include_usage: true } };
  const vote = { samples: 5, select: 'vote', vote_by: 'Answer: (\\d+)' };
  const results = { client: `openai-node ${require('openai/version').VERSION}` };
  results.models = [];
  for await (const m of client.models.list()) results.models.push(m.id);
  results.native_stream = await streamed(client, { model: 'native', n: 3, ...usage });
  results.native_whole = await whole(client, { model: 'native', n: 3 });
  results.mixed_stream = await streamed(client, { model: 'mixed', n: 3, ...usage });
  results.mixed_whole = await whole(client, { model: 'mixed', n: 3 });
  results.failing = await errorOf(() => streamed(client, { model: 'failing', n: 2 }));
  results.cut_stream = await streamed(client, { model: 'cut', n: 3 });
  results.resilient_stream = await streamed(client, { model: 'resilient', n: 3, ...usage });
  results.resilient_whole = await whole(client, { model: 'resilient', n: 3 });
  // openai-node sends unknown body keys as they are.
  results.vote_stream = await streamed(client, { model: 'vote', choicewise: vote, ...usage });
  results.vote_whole = await whole(client, { model: 'vote', choicewise: vote });
  results.first_finished_stream = await streamed(client, {
    model: 'race',
    choicewise: { samples: 2, select: 'first_finished' },
  });
  const wrongKey = new OpenAI({ baseURL, apiKey: 'sk-wrong', maxRetries: 0, timeout: 60000 });
  results.wrong_key = await errorOf(() => whole(wrongKey, { model: 'native' }));
  results.unknown_model = await errorOf(() => whole(client, { model: 'nope' }));
  results.n_too_large = await errorOf(() => whole(client, { model: 'native', n: 17 }));
  if (results.models.includes('llama')) {
    const sampling = { max_tokens: 24, temperature: 0.8, seed: 7 };
    results.llama_stream = await streamed(client, { model: 'llama', n: 3, ...usage, ...sampling });
    results.llama_whole = await whole(client, { model: 'llama-fan-out', n: 2, ...sampling });
  }
  process.stdout.write(JSON.stringify(results));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
