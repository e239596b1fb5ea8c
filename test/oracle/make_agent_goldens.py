#!/usr/bin/python3
"""Writes test/golden/agent_apis.jsonl: agent conversations in the Responses and Anthropic Messages
shapes with the prompt vLLM renders for them on the Qwen3 chat template and its token ids, made
independently of ramjet: api_oracle.py's port of vLLM's conversion, jinja_oracle.py's chat
preprocessing, python3-jinja2, and the HF tokenizers crate (@anush008/tokenizers, test/oracle).
render/identity/agent_golden_test.cc holds ramjet's local pipeline to them.

  /usr/bin/python3 test/oracle/make_agent_goldens.py --testdata test/data/testdata \
      --out test/golden/agent_apis.jsonl
"""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import api_oracle as ao  # noqa: E402
import jinja_oracle as jo  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

TOOLS_RESPONSES = [
    {"type": "function", "name": "shell", "description": "Runs a shell command and returns its output.",
     "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}},
                                                     "workdir": {"type": "string"}},
                    "required": ["command"], "additionalProperties": False},
     "strict": False},
    {"type": "function", "name": "apply_patch", "description": "Applies a patch to files.",
     "parameters": {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]},
     "strict": True},
]
TOOLS_MESSAGES = [
    {"name": "Bash", "description": "Executes a bash command.",
     "input_schema": {"type": "object", "properties": {"command": {"type": "string"},
                                                      "timeout": {"type": "number"}}, "required": ["command"]}},
    {"name": "Read", "description": "Reads a file from the local filesystem.",
     "input_schema": {"properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}},
]

GOLDENS = [
    ("responses-string", "responses", {"model": "qwen3", "input": "Write a haiku about caches."}),
    ("responses-instructions-parts", "responses", {
        "model": "qwen3", "instructions": "You are a coding agent. Answer in English.",
        "input": [{"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "<environment_context>cwd=/repo</environment_context>"},
                               {"type": "input_text", "text": "Why does the build fail?"}]}]}),
    ("responses-codex-tools", "responses", {
        "model": "qwen3", "instructions": "You are Codex, a coding agent.", "tools": TOOLS_RESPONSES,
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List the tests."}]},
            {"type": "reasoning", "id": "rs_1", "summary": [],
             "content": [{"type": "reasoning_text", "text": "I should look at the test folder first."}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "shell",
             "arguments": "{\"command\":[\"ls\",\"test\"],\"workdir\":\"/repo\"}", "status": "completed"},
            {"type": "function_call_output", "call_id": "call_a", "output": "integration\nunit\n"},
            {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
             "content": [{"type": "output_text", "text": "There are two folders: integration and unit.",
                          "annotations": []}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Run the unit ones."}]},
        ]}),
    ("responses-parallel-calls", "responses", {
        "model": "qwen3", "tools": TOOLS_RESPONSES,
        "input": [
            {"role": "user", "content": "Show both files."},
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{\"command\":[\"cat\",\"a\"]}"},
            {"type": "function_call", "call_id": "c2", "name": "shell", "arguments": "{\"command\":[\"cat\",\"b\"]}"},
            {"type": "function_call_output", "call_id": "c1", "output": "alpha"},
            {"type": "function_call_output", "call_id": "c2", "output": "beta"},
        ]}),
    ("messages-string", "messages", {"model": "qwen3", "max_tokens": 64,
                                     "messages": [{"role": "user", "content": "Hello, Claude."}]}),
    ("messages-claude-code", "messages", {
        "model": "qwen3", "max_tokens": 1024, "tools": TOOLS_MESSAGES,
        "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.3; cc_entrypoint=cli; cch=5e1f;"},
                   {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
                   {"type": "text", "text": "\nWorking directory: /repo"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What does main.cc do?"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Read the file first.", "signature": "sig"},
                {"type": "text", "text": "Let me read it."},
                {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"file_path": "/repo/main.cc"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01",
                 "content": [{"type": "text", "text": "int main() { return run(); }"}]}]},
            {"role": "assistant", "content": [{"type": "text", "text": "It calls run() and returns its status."}]},
            {"role": "user", "content": "Thanks. Now run the tests."},
        ]}),
    ("messages-tool-result-and-text", "messages", {
        "model": "qwen3", "max_tokens": 256, "tools": TOOLS_MESSAGES, "system": "Be terse.",
        "messages": [
            {"role": "user", "content": "Run ls."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                               "input": {"command": "ls", "timeout": 1.5}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a b c"},
                                         {"type": "text", "text": "Which is newest?"}]},
        ]}),
    ("messages-thinking-off", "messages", {
        "model": "qwen3", "max_tokens": 32, "chat_template_kwargs": {"enable_thinking": False},
        "messages": [{"role": "user", "content": "2+2?"}]}),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--testdata", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    models = os.path.abspath(os.path.join(args.testdata, "models"))
    tpl = os.path.join(models, "qwen3", "chat_template.jinja")
    cfg = os.path.join(models, "qwen3", "tokenizer_config.json")
    src = open(tpl, encoding="utf-8").read()
    env = jo.make_env()
    rows = []
    for gid, api, req in GOLDENS:
        chat = ao.responses_to_chat(req) if api == "responses" else ao.messages_to_chat(req)
        r = jo.py_render(env, src, jo.preprocess(chat, jo.special_tokens(cfg), False))
        assert r["ok"], (gid, r)
        rows.append({"id": gid, "api": api, "template": "qwen3/chat_template.jinja", "request": req,
                     "rendered": r["rendered"]})
    script = ("const {Tokenizer}=require('@anush008/tokenizers');"
              "const t=Tokenizer.fromFile(process.argv[1]);"
              "const rows=JSON.parse(require('fs').readFileSync(0,'utf8'));"
              "(async()=>{const out=[];for(const s of rows){const e=await t.encode(s,null,{addSpecialTokens:false});out.push(Array.from(e.getIds()));}"
              "process.stdout.write(JSON.stringify(out));})();")
    proc = subprocess.run(["node", "-e", script, os.path.join(models, "qwen3", "tokenizer.json")],
                          input=json.dumps([r["rendered"] for r in rows]).encode(), stdout=subprocess.PIPE,
                          cwd=HERE, check=True)
    ids = json.loads(proc.stdout)
    with open(args.out, "w", encoding="utf-8") as f:
        for row, tok in zip(rows, ids):
            row["token_ids"] = tok
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} goldens written to {args.out}")


if __name__ == "__main__":
    sys.exit(main())
