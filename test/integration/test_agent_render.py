"""Two independent ports of vLLM's conversion of agent requests to chat, held to each other:
ramjet's (src/render/template/api_conversion, through `ramjet render --api`) and ramjet-sim's
(sim/server/agent_convert, through its POST /sim/render), each rendering with the real Qwen3
template and tokenizer. Generated Codex- and Claude-Code-shaped requests (test/oracle/api_oracle.py's
generators: tools and namespace tools, reasoning, tool calls and results, multi-turn, billing
headers, partial final messages) must give the same prompt token ids, or be refused by both; and
`ramjet render --api` reproduces test/golden/agent_apis.jsonl (made by a Python port, jinja2 and
the HF tokenizers crate)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from support.sim_proc import SimProc
from test_render_cli import run
from test_tokenizer import MODEL_ID, TOK, TPL

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "test" / "oracle"))
import api_oracle  # noqa: E402  (python3-jinja2 is installed by scripts/setup)

GOLDEN = ROOT / "test" / "golden" / "agent_apis.jsonl"


def test_ramjet_render_reproduces_the_agent_goldens(ramjet_binary):
    rows = [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines() if line]
    for api in ("responses", "messages"):
        mine = [r for r in rows if r["api"] == api]
        assert len(mine) >= 4
        rc, out, err = run(ramjet_binary, ["--api", api, "--jsonl", "--tokenizer", TOK, "--template", TPL],
                           "".join(json.dumps(r["request"]) + "\n" for r in mine))
        assert rc == 0, err
        for r, line in zip(mine, out.splitlines()):
            got = json.loads(line)
            assert got["rendered"] == r["rendered"], r["id"]
            assert got["token_ids"] == r["token_ids"], r["id"]


def test_a_request_vllm_would_render_from_stored_state_is_a_typed_input_error(ramjet_binary):
    rc, _, err = run(ramjet_binary, ["--api", "responses", "--no-tokenize", "--template", TPL],
                     json.dumps({"input": "q", "previous_response_id": "resp_1"}))
    assert rc == 1 and err.startswith("ramjet render: input error (convert_unsupported): "), err
    rc, _, err = run(ramjet_binary, ["--api", "chats", "--no-tokenize", "--template", TPL], "{}")
    assert rc == 2 and "--api takes chat, responses or messages" in err, err


def test_ramjet_and_the_sim_convert_agent_requests_alike(ramjet_binary):
    rng = random.Random(21)
    cases = []
    while len(cases) < 240:
        api = "responses" if len(cases) % 2 == 0 else "messages"
        body = api_oracle.rresponses(rng) if api == "responses" else api_oracle.rmessages(rng)
        body["model"] = MODEL_ID
        # Not compared: what ramjet never renders locally — a partial final message (vLLM trims
        # its end; exact routing sends it to the engine's /tokenize) and stored state (the engine
        # answers 404) — both covered by their own tests.
        last = body["input"][-1] if isinstance(body.get("input"), list) and body["input"] else {}
        if body.get("previous_response_id") or last.get("status") in ("in_progress", "incomplete"):
            continue
        cases.append((api, body))
    sim = SimProc("--tokenizer", TOK, "--chat-template", TPL, "--served-model-name", MODEL_ID)
    try:
        want = []
        for api, body in cases:
            r = sim.request("POST", f"/sim/render?api={api}", body)
            want.append(json.loads(r.body)["prompt_token_ids"] if r.status == 200 else None)
    finally:
        sim.stop()
    rendered = compared = refused = 0
    mismatches = []
    for api in ("responses", "messages"):
        idx = [i for i, (a, _) in enumerate(cases) if a == api]
        rc, out, err = run(ramjet_binary, ["--api", api, "--jsonl", "--tokenizer", TOK, "--template", TPL],
                           "".join(json.dumps(cases[i][1]) + "\n" for i in idx))
        assert rc in (0, 1), err
        lines = out.splitlines()
        assert len(lines) == len(idx)
        for i, line in zip(idx, lines):
            got = json.loads(line)
            mine = got.get("token_ids")
            if mine is None and want[i] is None:
                refused += 1
            elif mine == want[i]:
                compared += 1
            else:
                mismatches.append((api, i, got.get("error"), None if want[i] is None else len(want[i]),
                                   None if mine is None else len(mine)))
            rendered += 1
    assert not mismatches, f"{len(mismatches)} of {rendered} differ, e.g. {mismatches[:5]}"
    assert compared >= 150, (compared, refused)
