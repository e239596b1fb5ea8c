#!/usr/bin/env node
// One chat request to ramjet through an official client SDK, for test/integration/test_sdk_clients.py.
//
//   node sdk_client.mjs <openai|anthropic> <base_url> <api_key> [--ca <pem>] [--stream] [--model <name>]
//
// openai:    client.chat.completions.create({model, messages, max_tokens: 8[, stream: true]}),
//            base_url like http://127.0.0.1:PORT/v1 (the SDK appends /chat/completions).
// anthropic: client.messages.create({model, max_tokens: 8, messages[, stream: true]}),
//            base_url like http://127.0.0.1:PORT (the SDK appends /v1/messages; the key goes in x-api-key).
//
// Prints one JSON line and exits 0:
//   {"ok":true,"status":200,"text":"...","upstream":"<X-Ramjet-Upstream>","chunks":N}
//   {"ok":false,"status":<status|null>,"error_type":"<SDK error class>","message":"...","cause":"...",
//    "upstream":...}
// Exit 2: usage error; exit 1: an error that is not the SDK's (a bug here), still as an ok:false line.
//
// TLS: Node reads NODE_EXTRA_CA_CERTS (extra trusted CAs) only at startup, so --ca <pem> re-runs this
// script with NODE_EXTRA_CA_CERTS=<pem>; there is no TLS code here. Retries are off (maxRetries: 0) and
// every request has a 30 s timeout.

import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const USAGE = 'usage: node sdk_client.mjs <openai|anthropic> <base_url> <api_key> [--ca <pem>] [--stream] ' +
              '[--model <name>]';
const TIMEOUT_MS = 30_000;
const PROMPT = 'Say something about load balancers.';

function usage(why) {
  process.stderr.write(`sdk_client.mjs: ${why}\n${USAGE}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const pos = [];
  const opt = { ca: null, stream: false, model: null };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--stream') opt.stream = true;
    else if (a === '--ca' || a === '--model') {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      opt[a.slice(2)] = argv[++i];
    } else if (a.startsWith('--')) usage(`unknown option ${a}`);
    else pos.push(a);
  }
  if (pos.length !== 3) usage('expected <sdk> <base_url> <api_key>');
  const [sdk, baseURL, apiKey] = pos;
  if (sdk !== 'openai' && sdk !== 'anthropic') usage(`unknown sdk ${JSON.stringify(sdk)}`);
  return { sdk, baseURL, apiKey, ...opt };
}

function out(obj, code = 0) {
  process.stdout.write(JSON.stringify(obj) + '\n');
  process.exitCode = code;
}

function header(headers, name) {
  if (!headers) return null;
  if (typeof headers.get === 'function') return headers.get(name);
  const k = Object.keys(headers).find((h) => h.toLowerCase() === name.toLowerCase());
  return k === undefined ? null : headers[k];
}

// The chain of causes under an SDK connection error (fetch failed -> the TLS/socket error), as text.
function causes(e) {
  const parts = [];
  for (let c = e?.cause, n = 0; c && n < 5; c = c.cause, n++) {
    parts.push([c.code, c.message].filter(Boolean).join(': ') || String(c));
  }
  return parts.join(' <- ');
}

async function openaiChat(a) {
  const { default: OpenAI } = await import('openai');
  const client = new OpenAI({ baseURL: a.baseURL, apiKey: a.apiKey, maxRetries: 0, timeout: TIMEOUT_MS });
  const params = { model: a.model || 'ramjet-sim', messages: [{ role: 'user', content: PROMPT }], max_tokens: 8 };
  if (!a.stream) {
    const { data, response } = await client.chat.completions.create(params).withResponse();
    return { status: response.status, headers: response.headers,
             text: data.choices?.[0]?.message?.content ?? '', chunks: null };
  }
  const { data: stream, response } = await client.chat.completions.create({ ...params, stream: true }).withResponse();
  let text = '';
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    text += chunk.choices?.[0]?.delta?.content ?? '';
  }
  return { status: response.status, headers: response.headers, text, chunks };
}

async function anthropicChat(a) {
  const { default: Anthropic } = await import('@anthropic-ai/sdk');
  const client = new Anthropic({ baseURL: a.baseURL, apiKey: a.apiKey, maxRetries: 0, timeout: TIMEOUT_MS });
  const params = { model: a.model || 'ramjet-sim', max_tokens: 8, messages: [{ role: 'user', content: PROMPT }] };
  if (!a.stream) {
    const { data, response } = await client.messages.create(params).withResponse();
    const text = (data.content ?? []).filter((b) => b.type === 'text').map((b) => b.text).join('');
    return { status: response.status, headers: response.headers, text, chunks: null };
  }
  const { data: stream, response } = await client.messages.create({ ...params, stream: true }).withResponse();
  let text = '';
  let chunks = 0;
  for await (const ev of stream) {
    chunks++;
    if (ev.type === 'content_block_delta' && ev.delta?.type === 'text_delta') text += ev.delta.text;
  }
  return { status: response.status, headers: response.headers, text, chunks };
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  if (a.ca !== null && process.env.NODE_EXTRA_CA_CERTS !== a.ca) {
    const args = process.argv.slice(2);
    const i = args.indexOf('--ca');
    args.splice(i, 2);
    const r = spawnSync(process.execPath, [fileURLToPath(import.meta.url), ...args],
                        { stdio: 'inherit', env: { ...process.env, NODE_EXTRA_CA_CERTS: a.ca } });
    process.exit(r.status ?? 1);
  }
  const { APIError } = await import(a.sdk === 'openai' ? 'openai' : '@anthropic-ai/sdk');
  try {
    const r = await (a.sdk === 'openai' ? openaiChat(a) : anthropicChat(a));
    out({ ok: true, status: r.status, text: r.text, upstream: header(r.headers, 'x-ramjet-upstream'),
          chunks: r.chunks });
  } catch (e) {
    const sdkError = e instanceof APIError;
    out({ ok: false, status: typeof e?.status === 'number' ? e.status : null,
          error_type: e?.constructor?.name ?? typeof e, message: String(e?.message ?? e), cause: causes(e),
          upstream: header(e?.headers, 'x-ramjet-upstream') }, sdkError ? 0 : 1);
  }
}

await main();
