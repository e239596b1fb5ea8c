#!/usr/bin/python3
"""Differential test: the native Qwen3 formatter (render::qwen3 through render::prompt, with the
rendered-prefix cache and render::SessionCache warm from the previous turns) against Debian's
python3-jinja2 rendering the pinned Qwen3 template, configured like transformers (the
environment and the vLLM-style preprocessing of jinja_oracle.py).

Cases: seeded generated agent conversations — system prompt or not, tools or not, then turns of
assistant answers (text, null content, inline <think>, reasoning / reasoning_content, tool calls
with JSON-string or object arguments) followed by tool results and/or a new user message (some of
them wrapped <tool_response> texts, which are not queries) — every turn sent as the whole
conversation again, as an agent does. Conversations are interleaved through one cache. Every
request must render exactly as python jinja2 renders it, and (checked inside the driver) equal the
C++ template's text and a full encode's ids. A few requests carry what the formatter does not
model (a reasoning_effort kwarg, a developer message): they must fall back and still agree.

  /usr/bin/python3 test/oracle/qwen3_native_oracle.py --bin build/.../ramjet-qwen3-native \
      --testdata test/data/testdata --conversations 160 --seed 15
"""
import argparse
import copy
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jinja_oracle  # noqa: E402  (exits 77 when jinja2 is missing)

WORDS = ["alpha", "β", "中文", "😀", "a\"b", "back\\slash", "\n", "\n\n", "tab\t", "<think>", "</think>",
         "<tool_response>", "</tool_response>", "code();", "  ", "{\"k\": [1, 2]}", "é", "<|im_end|>", "x" * 40]


def rtext(rng, lo=0, hi=8):
    if rng.random() < 0.3:
        return rng.choice(jinja_oracle.TEXTS)
    return "".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def rvalue(rng, depth=0):
    r = rng.random()
    if depth > 2 or r < 0.5:
        return rng.choice([rtext(rng), rng.randint(-1000, 10**12), 0.5, -2.25, 1e-7, 1e22, True, False, None, ""])
    if r < 0.75:
        return [rvalue(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {f"k{i}_{rng.choice(WORDS)}": rvalue(rng, depth + 1) for i in range(rng.randint(0, 3))}


def rtools(rng):
    tools = []
    for i in range(rng.randint(1, 4)):
        fn = {"name": f"tool_{i}"}
        if rng.random() < 0.8:
            fn["description"] = rtext(rng)
        if rng.random() < 0.8:
            fn["parameters"] = {"type": "object", "properties": {"path": {"type": "string", "description": rtext(rng)},
                                                                 "n": {"type": "integer", "minimum": 0}},
                                "required": ["path"]}
        if rng.random() < 0.2:  # declared flags: vLLM 0.32 dumps them only when set
            fn["strict"] = rng.choice([True, False, None])
        if rng.random() < 0.15:
            fn["defer_loading"] = rng.choice([True, None])
        if rng.random() < 0.05:  # not declared: dropped
            fn["x-extra"] = {"k": 1}
        tool = {"type": "function", "function": fn}
        if rng.random() < 0.1:
            del tool["type"]
        if rng.random() < 0.05:  # the tool-level flag fills the function's
            tool["defer_loading"] = True
        tools.append(tool)
    return tools


class Agent:
    def __init__(self, rng, cid):
        self.rng = rng
        self.cid = cid
        self.calls = 0
        self.messages = []
        self.tools = rtools(rng) if rng.random() < 0.75 else None
        if rng.random() < 0.7:
            self.messages.append({"role": "system", "content": "You are an agent. " + rtext(rng)})
        self.messages.append(self.user())
        self.kwargs = rng.choice([None, None, {"enable_thinking": True}, {"enable_thinking": False}])

    def user(self):
        rng = self.rng
        if rng.random() < 0.15:
            return {"role": "user", "content": "<tool_response>" + rtext(rng) + "</tool_response>"}
        if rng.random() < 0.1:
            return {"role": "user", "content": [{"type": "text", "text": rtext(rng)}, {"type": "text", "text": rtext(rng)}]}
        return {"role": "user", "content": rtext(rng, 1)}

    def step(self):
        """The assistant's answer and what follows it (tool results, a user message, or both)."""
        rng = self.rng
        a = {"role": "assistant"}
        shape = rng.random()
        if shape < 0.2:
            a["content"] = None
        elif shape < 0.35:
            a["content"] = "<think>\n" + rtext(rng) + "\n</think>\n\n" + rtext(rng)
        else:
            a["content"] = rtext(rng)
        r = rng.random()
        if r < 0.35:
            a["reasoning_content"] = rtext(rng)
        elif r < 0.5:
            a["reasoning"] = rtext(rng)
        ncalls = rng.choice([0, 1, 1, 2, 3]) if self.tools else 0
        if ncalls:
            calls = []
            for _ in range(ncalls):
                self.calls += 1
                args = {"path": rtext(rng), "n": rng.randint(0, 99)}
                if rng.random() < 0.3:
                    args["extra"] = rvalue(rng)
                fn = {"name": rng.choice(self.tools)["function"]["name"]}
                fn["arguments"] = args if rng.random() < 0.15 else json.dumps(args, ensure_ascii=rng.random() < 0.5)
                calls.append({"id": f"call_{self.cid}_{self.calls}", "type": "function", "function": fn})
            a["tool_calls"] = calls
        self.messages.append(a)
        for i in range(ncalls):
            self.messages.append({"role": "tool", "tool_call_id": f"call_{self.cid}_{self.calls - i}",
                                  "content": rtext(rng)})
        if ncalls == 0 or rng.random() < 0.3:
            self.messages.append(self.user())

    def request(self, odd=False):
        req = {"messages": copy.deepcopy(self.messages)}
        if self.tools is not None:
            req["tools"] = self.tools
        if self.rng.random() < 0.9:
            req["add_generation_prompt"] = self.rng.random() < 0.9
        if self.kwargs is not None:
            req["chat_template_kwargs"] = dict(self.kwargs)
        if odd:  # outside what the formatter models: must fall back and still agree
            if self.rng.random() < 0.5:
                req["chat_template_kwargs"] = {"reasoning_effort": "high"}
            else:
                req["messages"].insert(1, {"role": "developer", "content": "ignored by the template"})
        return req


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--testdata", required=True)
    ap.add_argument("--conversations", type=int, default=160)
    ap.add_argument("--seed", type=int, default=15)
    args = ap.parse_args()
    models = os.path.join(args.testdata, "models")
    cfg = os.path.join(models, "qwen3", "tokenizer_config.json")
    src = open(os.path.join(models, "qwen3", "chat_template.jinja"), encoding="utf-8").read()
    specials = jinja_oracle.special_tokens(cfg)
    env = jinja_oracle.make_env()
    tpl = env.from_string(src)
    rng = random.Random(args.seed)

    agents = [Agent(rng, i) for i in range(args.conversations)]
    turns = [rng.randint(3, 14) for _ in agents]
    cases = []  # (label, request, python result)
    live = list(range(len(agents)))
    turn = 0
    while live:  # interleave the conversations: one turn of each live one per round
        for i in list(live):
            if turn >= turns[i]:
                live.remove(i)
                continue
            odd = rng.random() < 0.04
            req = agents[i].request(odd)
            ctx = jinja_oracle.preprocess(req, specials, False)
            try:
                want = {"ok": True, "rendered": tpl.render(**ctx)}
            except Exception as e:  # noqa: BLE001
                want = {"ok": False, "code": type(e).__name__, "message": str(e)}
            cases.append((f"conv{i}#turn{turn}{'-odd' if odd else ''}", req, want, odd))
            agents[i].step()
        turn += 1

    inp = "".join(json.dumps({"request": c[1]}, ensure_ascii=False) + "\n" for c in cases)
    proc = subprocess.run([args.bin, args.testdata], input=inp.encode("utf-8"), stdout=subprocess.PIPE, check=True)
    outs = proc.stdout.decode("utf-8").splitlines()
    if len(outs) != len(cases):
        print(f"qwen3_native_oracle: {len(outs)} outputs for {len(cases)} requests")
        return 1
    bad = native = fallback = reused = reused_msgs = errors = 0
    for (label, req, want, odd), got_line in zip(cases, outs):
        got = json.loads(got_line)
        problem = None
        if not got["ok"]:
            errors += 1
            if want["ok"] or not got.get("jinja_failed"):
                problem = "ramjet failed"
        elif not want["ok"]:
            problem = "python failed"
        else:
            if got["rendered"] != want["rendered"]:
                problem = "text differs from python jinja2"
            elif not got["jinja_same"]:
                problem = "text differs from the C++ template"
            elif not got["ids_same"]:
                problem = "ids differ from a full encode"
            elif got["native"] == odd:
                problem = "native for an unmodelled request" if odd else "fell back"
            native += got["native"]
            fallback += not got["native"]
            reused += got["reused_messages"] > 0
            reused_msgs += got["reused_messages"]
        if problem:
            bad += 1
            if bad <= 5:
                print(f"MISMATCH {label}: {problem}\n  request: {json.dumps(req, ensure_ascii=False)[:3000]}\n"
                      f"  python: {json.dumps(want, ensure_ascii=False)[:3000]}\n"
                      f"  ramjet: {json.dumps(got, ensure_ascii=False)[:3000]}")
    print(f"qwen3_native_oracle: {len(agents)} conversations, {len(cases)} requests: {native} native "
          f"({reused} reusing a cached prefix, {reused_msgs} messages), {fallback} fallbacks, "
          f"{errors} agreed errors, {bad} mismatches (jinja2 {jinja_oracle.jinja2.__version__})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
