#!/usr/bin/env node
// One agent-API call through an official client SDK, unmodified, for test/integration/test_agent_apis.py.
// The test keeps the conversation (tool calls, tool results, earlier turns); this script makes one call
// with the SDK and reports what the SDK gave back.
//
//   node agent_client.mjs <openai|anthropic> <base_url> <params.json> [--stream] [--abort-after <deltas>]
//
// openai:    client.responses.create(params) (base_url like http://127.0.0.1:PORT/v1); --stream passes
//            stream: true and reads the SSE events, the result being the response.completed event's response.
// anthropic: client.messages.create(params) (base_url like http://127.0.0.1:PORT); --stream uses
//            client.messages.stream(params) and its finalMessage() (the SDK's own accumulation of the events).
// --abort-after N: stream, and abort the request (the SDK's AbortController) after N output deltas.
//
// Prints one JSON line and exits 0:
//   {"ok":true,"status":200,"upstream":"<X-Ramjet-Upstream>","data":<Response|Message|null>,
//    "events":[<event types, streaming>],"ttft_ms":<to the first output delta>,"elapsed_ms":..,"aborted":bool}
//   {"ok":false,"status":<status|null>,"error_type":"<SDK error class>","message":"...","upstream":...}
// Exit 2: usage error; exit 1: an error that is not the SDK's (a bug here), still as an ok:false line.
// Retries are off (maxRetries: 0) and every request has a 30 s timeout.

import { readFileSync } from 'node:fs';

const USAGE = 'usage: node agent_client.mjs <openai|anthropic> <base_url> <params.json> [--stream] ' +
              '[--abort-after <deltas>]';
const TIMEOUT_MS = 30_000;
const DELTAS = new Set(['response.output_text.delta', 'response.function_call_arguments.delta',
                        'content_block_delta']);

function usage(why) {
  process.stderr.write(`agent_client.mjs: ${why}\n${USAGE}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const pos = [];
  const opt = { stream: false, abortAfter: null };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--stream') opt.stream = true;
    else if (a === '--abort-after') {
      if (i + 1 >= argv.length) usage('--abort-after needs a value');
      opt.abortAfter = Number(argv[++i]);
      opt.stream = true;
    } else if (a.startsWith('--')) usage(`unknown option ${a}`);
    else pos.push(a);
  }
  if (pos.length !== 3) usage('expected <sdk> <base_url> <params.json>');
  const [sdk, baseURL, paramsFile] = pos;
  if (sdk !== 'openai' && sdk !== 'anthropic') usage(`unknown sdk ${JSON.stringify(sdk)}`);
  return { sdk, baseURL, params: JSON.parse(readFileSync(paramsFile, 'utf8')), ...opt };
}

function header(headers, name) {
  if (!headers) return null;
  if (typeof headers.get === 'function') return headers.get(name);
  const k = Object.keys(headers).find((h) => h.toLowerCase() === name.toLowerCase());
  return k === undefined ? null : headers[k];
}

async function openaiCall(a, t0) {
  const { default: OpenAI } = await import('openai');
  const client = new OpenAI({ baseURL: a.baseURL, apiKey: 'sk-agent-test', maxRetries: 0, timeout: TIMEOUT_MS });
  if (!a.stream) {
    const { data, response } = await client.responses.create(a.params).withResponse();
    return { status: response.status, headers: response.headers, data, events: null, ttft: null, aborted: false };
  }
  const { data: stream, response } = await client.responses.create({ ...a.params, stream: true }).withResponse();
  const events = [];
  let data = null;
  let ttft = null;
  let deltas = 0;
  let aborted = false;
  for await (const ev of stream) {
    events.push(ev.type);
    if (DELTAS.has(ev.type)) {
      if (ttft === null) ttft = performance.now() - t0;
      if (a.abortAfter !== null && ++deltas >= a.abortAfter) {
        stream.controller.abort();
        aborted = true;
        break;
      }
    }
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') data = ev.response;
  }
  return { status: response.status, headers: response.headers, data, events, ttft, aborted };
}

async function anthropicCall(a, t0) {
  const { default: Anthropic } = await import('@anthropic-ai/sdk');
  const client = new Anthropic({ baseURL: a.baseURL, apiKey: 'sk-agent-test', maxRetries: 0, timeout: TIMEOUT_MS });
  if (!a.stream) {
    const { data, response } = await client.messages.create(a.params).withResponse();
    return { status: response.status, headers: response.headers, data, events: null, ttft: null, aborted: false };
  }
  const stream = client.messages.stream(a.params);
  const events = [];
  let ttft = null;
  let deltas = 0;
  let aborted = false;
  stream.on('streamEvent', (ev) => {
    events.push(ev.type);
    if (DELTAS.has(ev.type)) {
      if (ttft === null) ttft = performance.now() - t0;
      if (a.abortAfter !== null && ++deltas >= a.abortAfter && !aborted) {
        aborted = true;
        stream.abort();
      }
    }
  });
  const { response } = await stream.withResponse();
  let data = null;
  try {
    data = await stream.finalMessage();
  } catch (e) {
    if (!aborted) throw e;
  }
  return { status: response.status, headers: response.headers, data: aborted ? null : data, events, ttft, aborted };
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const { APIError } = await import(a.sdk === 'openai' ? 'openai' : '@anthropic-ai/sdk');
  const t0 = performance.now();
  try {
    const r = await (a.sdk === 'openai' ? openaiCall(a, t0) : anthropicCall(a, t0));
    process.stdout.write(JSON.stringify({
      ok: true, status: r.status, upstream: header(r.headers, 'x-ramjet-upstream'), data: r.data,
      events: r.events, ttft_ms: r.ttft, elapsed_ms: performance.now() - t0, aborted: r.aborted }) + '\n');
  } catch (e) {
    const sdkError = e instanceof APIError;
    process.stdout.write(JSON.stringify({
      ok: false, status: typeof e?.status === 'number' ? e.status : null,
      error_type: e?.constructor?.name ?? typeof e, message: String(e?.message ?? e),
      upstream: header(e?.headers, 'x-ramjet-upstream') }) + '\n');
    process.exitCode = sdkError ? 0 : 1;
  }
}

await main();
