-- Shared ~1 KB chat request body for the wrk scripts (chat_json.lua, chat_sse.lua).
-- Realistic shape: a system prompt, a short multi-turn conversation, sampling parameters.
-- `stream` is appended by the caller so both scripts send byte-identical prefixes.
local M = {}

function M.body(stream)
  return '{"model":"bench-model","messages":['
    .. '{"role":"system","content":"You are a careful senior software engineer. Answer concisely, '
    .. 'cite the relevant documentation when you can, and prefer small, testable changes. '
    .. 'When code is needed, show only the changed functions and explain the reasoning in two or three sentences."},'
    .. '{"role":"user","content":"Our service proxies streaming completions from several inference engines. '
    .. 'Under load the p99 latency of the first token grows even though the engines are idle. '
    .. 'What would you measure first?"},'
    .. '{"role":"assistant","content":"Start with where the time goes before the engine: accept queue depth, '
    .. 'TLS handshakes, request parsing and the upstream connection pool. Compare time-to-first-byte at the proxy '
    .. 'with the engine\'s own queue time."},'
    .. '{"role":"user","content":"The pool is sized at 64 connections per engine and we see reconnects. '
    .. 'Could keep-alive timeouts be the cause, and how would I confirm it?"}'
    .. '],"temperature":0.7,"top_p":0.95,"max_tokens":256,"stream":' .. (stream and 'true' or 'false')
    .. (stream and ',"stream_options":{"include_usage":true}' or '') .. '}'
end

return M
