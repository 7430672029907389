// The Anthropic TypeScript SDK (@anthropic-ai/sdk) against `choicewise serve`'s Messages
// endpoint (`/v1/messages`): runs each case the Rust test (crates/gateway/tests/gateway/clients.rs,
// `anthropic_node`) names and prints, as one JSON object, what the client library parsed.
// The Rust test holds the expectations.
//
// Environment: CHOICEWISE_GATEWAY_URL (base URL, .../v1), CHOICEWISE_GATEWAY_KEY; NODE_PATH
// finds the `@anthropic-ai/sdk` package.
'use strict';
const { Anthropic, APIError } = require('@anthropic-ai/sdk');

const MESSAGES = [{ role: 'user', content: 'What is the weather in Paris?' }];

function whole(message) {
  return {
    type: message.type,
    role: message.role,
    model: message.model,
    content: message.content.map((b) => (b.type === 'text' ? { type: 'text', text: b.text } : { type: b.type })),
    stop_reason: message.stop_reason,
    usage: { input_tokens: message.usage.input_tokens, output_tokens: message.usage.output_tokens },
    choicewise: message.choicewise || null,
  };
}

// `messages.create({stream: true})`: the events as the client gave them.
async function rawStream(client, request) {
  const out = { events: [], text: '', stop_reason: null, usage: null, choicewise: null, model: null };
  const stream = await client.messages.create({ ...request, stream: true });
  for await (const event of stream) {
    out.events.push(event.type);
    if (event.type === 'message_start') out.model = event.message.model;
    if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') out.text += event.delta.text;
    if (event.type === 'message_delta') {
      out.stop_reason = event.delta.stop_reason;
      out.usage = { output_tokens: event.usage.output_tokens };
      out.choicewise = event.choicewise || null;
    }
  }
  return out;
}

// `messages.stream(...)`: its text events and `finalMessage()`.
async function helperStream(client, request) {
  let text = '';
  const stream = client.messages.stream(request);
  stream.on('text', (delta) => {
    text += delta;
  });
  const final = await stream.finalMessage();
  return { text_stream: text, final: whole(final) };
}

async function errorOf(call) {
  try {
    await call();
  } catch (e) {
    if (e instanceof APIError) {
      const body = e.error || {};
      const error = body.error || {};
      return { status: e.status, class: e.constructor.name, shape: body.type, type: error.type, message: error.message };
    }
    throw e;
  }
  return { status: null };
}

async function main() {
  // The SDK appends /v1/messages to its base URL.
  const baseURL = process.env.CHOICEWISE_GATEWAY_URL.replace(/\/$/, '').replace(/\/v1$/, '');
  const client = new Anthropic({ baseURL, apiKey: process.env.CHOICEWISE_GATEWAY_KEY, maxRetries: 0, timeout: 60000 });
  const basic = { model: 'echo', max_tokens: 100, system: 'Be brief.', messages: MESSAGES };
  const results = { client: `anthropic-sdk-typescript ${require('@anthropic-ai/sdk/version').VERSION}` };
  results.create_whole = whole(await client.messages.create(basic));
  results.create_stream = await rawStream(client, basic);
  results.stream_helper = await helperStream(client, basic);
  // The SDK sends body keys it does not know as they are.
  const selected = { ...basic, model: 'select', choicewise: { samples: 3, select: 'first_finished' } };
  results.select_whole = whole(await client.messages.create(selected));
  results.select_stream = await rawStream(client, selected);
  results.failing = await errorOf(() => client.messages.create({ ...basic, model: 'failing' }));
  results.failing_stream = await errorOf(() => rawStream(client, { ...basic, model: 'failing' }));
  results.no_max_tokens = await errorOf(() => client.messages.create({ model: 'echo', messages: MESSAGES }));
  const wrongKey = new Anthropic({ baseURL, apiKey: 'sk-wrong', maxRetries: 0, timeout: 60000 });
  results.wrong_key = await errorOf(() => wrongKey.messages.create(basic));
  if (process.env.CHOICEWISE_LLAMA_URL) {
    // A real model behind the gateway (llama.cpp): its own text, stop reason and counts.
    const llama = { model: 'llama', max_tokens: 24, system: 'Be brief.', messages: MESSAGES };
    results.llama_whole = whole(await client.messages.create(llama));
    results.llama_stream = await rawStream(client, llama);
    const picked = { ...llama, choicewise: { samples: 2, select: 'first_token' } };
    results.llama_select = whole(await client.messages.create(picked));
  }
  process.stdout.write(JSON.stringify(results));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
