// The Vercel AI SDK (ai, @ai-sdk/openai) against `choicewise serve`: its default OpenAI
// provider, `openai(model)`, speaks the Responses API (`/v1/responses`). Runs each case the
// Rust test (crates/gateway/tests/gateway/clients.rs, `ai_sdk`) names and prints, as one JSON
// object, what the SDK parsed and which URLs it called. The Rust test holds the expectations.
//
// Environment: CHOICEWISE_GATEWAY_URL (base URL, .../v1), CHOICEWISE_GATEWAY_KEY; NODE_PATH
// finds the `ai` and `@ai-sdk/openai` packages.
'use strict';
const { generateText, streamText, tool, jsonSchema, stepCountIs, APICallError } = require('ai');
const { createOpenAI } = require('@ai-sdk/openai');

const urls = [];
const openai = createOpenAI({
  baseURL: process.env.CHOICEWISE_GATEWAY_URL,
  apiKey: process.env.CHOICEWISE_GATEWAY_KEY,
  fetch: (url, init) => {
    urls.push(String(url));
    return fetch(url, init);
  },
});

const weather = tool({
  description: 'The weather in a city',
  inputSchema: jsonSchema({
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
    additionalProperties: false,
  }),
  execute: async ({ city }) => (city === 'Paris' ? 'sunny' : 'unknown'),
});

async function errorOf(call) {
  try {
    await call();
  } catch (e) {
    const cause = APICallError.isInstance(e) ? e : e.lastError;
    if (cause && APICallError.isInstance(cause)) {
      return { status: cause.statusCode, class: cause.constructor.name, message: cause.message };
    }
    return { class: e.constructor.name, message: String(e.message) };
  }
  return { error: 'none raised' };
}

async function main() {
  const results = { client: `ai ${require('ai/package.json').version}` };

  const generated = await generateText({ model: openai('echo'), prompt: 'Say hello.' });
  results.generate = {
    text: generated.text,
    finish_reason: generated.finishReason,
    output_tokens: generated.usage.outputTokens,
    model: generated.response.modelId,
  };

  const streamed = streamText({ model: openai('echo'), prompt: 'Say hello.' });
  let text = '';
  for await (const delta of streamed.textStream) text += delta;
  results.stream = {
    text,
    finish_reason: await streamed.finishReason,
    output_tokens: (await streamed.usage).outputTokens,
  };

  // A tool round trip: the call, the SDK runs the tool, the result goes back, the answer.
  // `store: false`, as for any stateless Responses server: the SDK then sends the call
  // itself back, not a reference to an item the server would have stored.
  const round = await generateText({
    model: openai('tools'),
    prompt: 'What is the weather in Paris?',
    tools: { get_weather: weather },
    stopWhen: stepCountIs(3),
    providerOptions: { openai: { store: false } },
  });
  results.tool_round_trip = {
    text: round.text,
    steps: round.steps.length,
    calls: round.steps.flatMap((s) => s.toolCalls.map((c) => ({ name: c.toolName, input: c.input }))),
    results: round.steps.flatMap((s) => s.toolResults.map((r) => r.output)),
  };

  // Without `store: false` the second step refers to the call by id: a 400 naming it.
  results.referenced = await errorOf(() =>
    generateText({
      model: openai('tools'),
      prompt: 'What is the weather in Paris?',
      tools: { get_weather: weather },
      stopWhen: stepCountIs(3),
      maxRetries: 0,
    }),
  );

  results.failing = await errorOf(() =>
    generateText({ model: openai('failing'), prompt: 'hi', maxRetries: 0 }),
  );

  results.urls = urls;
  process.stdout.write(JSON.stringify(results));
}

main().catch((e) => {
  process.stderr.write(`${e.stack || e}\n`);
  process.exit(1);
});
