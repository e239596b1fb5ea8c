#!/usr/bin/python3
"""Differential test of render::api_conversion: Responses (/v1/responses) and Anthropic Messages
(/v1/messages) requests turned into vLLM's chat request and rendered, by ramjet-jinja-render
(`"api"` cases) against a Python port of vLLM's own conversion written here independently
(vllm/entrypoints/openai/responses/utils.py construct_input_messages and
construct_chat_messages_with_tool_call, responses/protocol.py build_chat_params,
tool_parsers/utils.py iter_response_function_tool_dicts; anthropic/serving.py
_convert_anthropic_to_openai_request), then jinja_oracle.py's chat preprocessing and python3-jinja2.

Cases: seeded generated agent conversations in both shapes (instructions/system prompts, tools
and namespace tools, reasoning, tool calls and results, multi-turn, Claude Code's billing header
and roles, partial final messages) on the shipped Qwen3, Qwen3.6 and DeepSeek-V3.1 tool
templates. Both sides must give the same text, or refuse the same request the same way.

  /usr/bin/python3 test/oracle/api_oracle.py --bin build/.../ramjet-jinja-render \
      --testdata test/data/testdata --count 600 --seed 15
"""
import argparse
import copy
import json
import os
import random
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jinja_oracle as jo  # noqa: E402  (exits 77 without python3-jinja2)


class BadRequest(Exception):
    pass


class Unsupported(Exception):
    pass


# ---- vLLM's conversions, ported

def _item_text(first):
    return first.get("text", "") if isinstance(first, dict) else first


def construct_message_from_response_item(item, prev_msg):
    prev = prev_msg if prev_msg and prev_msg.get("role") == "assistant" else None
    if item.get("type") == "function_call":  # vLLM parses these dicts into ResponseFunctionToolCall
        for k in ("call_id", "name", "arguments"):
            if not isinstance(item.get(k), str):
                raise BadRequest(k)
        name = item["name"]
        if item.get("namespace"):
            name = f"{item['namespace']}__{name}"
        call = {"id": item["call_id"], "function": {"name": name, "arguments": item["arguments"]},
                "type": "function"}
        if prev:
            if prev.get("tool_calls") is None:
                prev["tool_calls"] = [call]
                return None
            prev["tool_calls"].append(call)
            return None
        return {"role": "assistant", "tool_calls": [call]}
    if item.get("type") == "function_call_output":
        return {"role": "tool", "content": item.get("output"), "tool_call_id": item.get("call_id")}
    if item.get("type") == "reasoning":
        text = ""
        if item.get("content"):
            text = _item_text(list(item["content"])[0])
        elif item.get("summary"):
            text = _item_text(list(item["summary"])[0])
        if prev and prev.get("reasoning") is None:
            prev["reasoning"] = text
            return None
        return {"role": "assistant", "reasoning": text}
    if item.get("role") == "assistant":
        content = item.get("content")
        if content and not isinstance(content, str):
            text = _item_text(list(content)[0])
        elif isinstance(content, str):
            text = content
        else:
            text = ""
        if prev and prev.get("content") is None:
            prev["content"] = text
            return None
        return {"role": "assistant", "content": text}
    if "role" not in item:
        raise Unsupported("item")  # vLLM's chat_utils: KeyError on message["role"]
    return {k: item[k] for k in ("role", "content", "name") if k in item}


def function_definition(name, description, parameters, tool):
    """vLLM 0.32's FunctionDefinition(...).model_dump() (entrypoints/generate/base/protocol.py):
    its serializer keeps the declared fields only and leaves strict / defer_loading out when None."""
    fn = {"name": name, "description": description, "parameters": parameters}
    for k in ("strict", "defer_loading"):
        if tool.get(k) is not None:
            fn[k] = tool[k]
    return {"type": "function", "function": fn}


def responses_tools(tools):
    out = []
    for t in tools:
        members = []
        if t["type"] == "function":
            members.append((t["name"], t))
        elif t["type"] == "namespace":
            for m in t["tools"]:
                if m.get("type") == "function":
                    members.append((f"{t['name']}__{m['name']}", m))
        for name, tool in members:
            out.append(function_definition(name, tool.get("description"), tool.get("parameters"), tool))
    return out


def responses_to_chat(req):
    if req.get("prompt") is not None:
        raise BadRequest("prompt")
    for k in ("previous_response_id", "previous_response", "previous_input_messages"):
        if req.get(k) is not None:
            raise Unsupported(k)
    inp = req["input"]
    msgs = []
    if req.get("instructions"):
        msgs.append({"role": "system", "content": req["instructions"]})
    if isinstance(inp, str):
        msgs.append({"role": "user", "content": inp})
    else:
        items = []
        for item in copy.deepcopy(inp):
            m = construct_message_from_response_item(item, items[-1] if items else None)
            if m is not None:
                items.append(m)
        msgs.extend(items)
    chat = {"messages": msgs}
    if req.get("tools"):
        chat["tools"] = responses_tools(req["tools"])
    if req.get("chat_template_kwargs") is not None:  # a ResponsesRequest field since vLLM 0.32
        chat["chat_template_kwargs"] = req["chat_template_kwargs"]
    last = inp[-1] if isinstance(inp, list) and inp else None
    if isinstance(last, dict) and last.get("type", "message") in ("message", "reasoning") \
            and last.get("status") in ("in_progress", "incomplete"):
        chat["add_generation_prompt"] = False
        chat["continue_final_message"] = True
    return chat


BILLING = "x-anthropic-billing-header"


def _system_blocks(blocks, parts):
    for b in blocks:
        if b["type"] == "text" and b.get("text"):
            if b["text"].startswith(BILLING):
                continue
            parts.append(b["text"])


def _image_url(source):
    if source.get("type") == "url":
        return source.get("url", "")
    return f"data:{source.get('media_type', 'image/jpeg')};base64,{source.get('data', '')}"


def messages_to_chat(req):
    out = []
    parts = []
    role_of = lambda m: {"ctx": "user", "msg": "user"}.get(m["role"], m["role"])  # noqa: E731
    system = req.get("system")
    if system:
        if isinstance(system, str):
            parts.append(system)
        else:
            _system_blocks(system, parts)
    for m in req["messages"]:
        if role_of(m) != "system":
            continue
        if isinstance(m["content"], str):
            parts.append(m["content"])
        else:
            _system_blocks(m["content"], parts)
    if parts:
        out.append({"role": "system", "content": "".join(parts)})
    for m in req["messages"]:
        role = role_of(m)
        if role == "system":
            continue
        om = {"role": role}
        if isinstance(m["content"], str):
            om["content"] = m["content"]
        else:
            content_parts, tool_calls, reasoning = [], [], []
            for b in m["content"]:
                t = b["type"]
                if t == "text" and b.get("text"):
                    content_parts.append({"type": "text", "text": b["text"]})
                elif t == "image" and b.get("source"):
                    content_parts.append({"type": "image_url", "image_url": {"url": _image_url(b["source"])}})
                elif t == "thinking" and b.get("thinking") is not None:
                    reasoning.append(b["thinking"])
                elif t == "tool_use":
                    tool_calls.append({"id": b.get("id") or "call_0", "type": "function",
                                       "function": {"name": b.get("name") or "",
                                                    "arguments": json.dumps(b.get("input") or {})}})
                elif t == "tool_result":
                    if role == "user":
                        text, images, refs = "", [], []
                        c = b.get("content")
                        if isinstance(c, str):
                            text = c
                        elif isinstance(c, list):
                            texts = []
                            for it in c:
                                if not isinstance(it, dict):
                                    continue
                                if it.get("type") == "text":
                                    texts.append(it.get("text", ""))
                                elif it.get("type") == "image":
                                    url = _image_url(it.get("source", {}))
                                    if url:
                                        images.append(url)
                                elif it.get("type") == "tool_reference":
                                    name = it.get("tool_name") or it.get("name")
                                    if name:
                                        refs.append({"type": "tool_reference", "name": name})
                            text = "\n".join(texts)
                        out.append({"role": "tool", "tool_call_id": b.get("tool_use_id") or "", "content": text or ""})
                        if images:
                            out.append({"role": "user", "content": [{"type": "image_url", "image_url": {"url": u}} for u in images]})
                        if refs:
                            out.append({"role": "tool", "tool_call_id": b.get("tool_use_id") or "", "content": refs})
                    else:
                        c = b.get("content")
                        if isinstance(c, list) and c:
                            raise Unsupported("str(list)")
                        content_parts.append({"type": "text", "text": f"Tool result: {c if c else ''}"})
            if reasoning:
                om["reasoning"] = "".join(reasoning)
            if tool_calls:
                om["tool_calls"] = tool_calls
            if content_parts:
                if len(content_parts) == 1 and content_parts[0]["type"] == "text":
                    om["content"] = content_parts[0]["text"]
                else:
                    om["content"] = content_parts
        if not (role == "user" and "content" not in om):
            out.append(om)
    chat = {"messages": out}
    if req.get("tools") is not None:
        tools = []
        for t in req["tools"]:
            schema = dict(t["input_schema"])
            schema.setdefault("type", "object")
            tools.append(function_definition(t["name"], t.get("description"), schema, t))
        chat["tools"] = tools
    if req.get("chat_template_kwargs"):
        chat["chat_template_kwargs"] = req["chat_template_kwargs"]
    return chat


# ---- generators: agent conversations in both shapes

def rschema(rng):
    props = {f"p{j}": {"type": rng.choice(["string", "integer", "boolean"]), "description": jo.rtext(rng)}
             for j in range(rng.randint(0, 3))}
    schema = {"properties": props, "required": list(props)[:1]}
    if rng.random() < 0.7:
        schema = {"type": "object", **schema}
    return schema


def rargs(rng):
    return {f"a{j}": jo.rjson(rng) for j in range(rng.randint(0, 3))}


def rresponses(rng):
    tools = []
    for i in range(rng.randint(0, 3)):
        t = {"type": "function", "name": f"tool_{i}", "parameters": rschema(rng)}
        if rng.random() < 0.7:
            t["description"] = jo.rtext(rng)
        if rng.random() < 0.6:
            t["strict"] = rng.choice([True, False])
        if rng.random() < 0.2:
            t["defer_loading"] = True
        tools.append(t)
    if rng.random() < 0.2:
        tools.append({"type": "namespace", "name": "crm", "description": "CRM tools",
                      "tools": [{"type": "function", "name": "lookup", "description": jo.rtext(rng),
                                 "parameters": rschema(rng), "strict": True}]})
    if rng.random() < 0.1:
        tools.append({"type": "web_search_preview"})
    req = {"model": "m"}
    if rng.random() < 0.6:
        req["instructions"] = jo.rtext(rng)
    if rng.random() < 0.15:
        req["input"] = jo.rtext(rng)
    else:
        items = []
        for turn in range(rng.randint(1, 4)):
            if rng.random() < 0.5:
                items.append({"role": "user", "content": jo.rtext(rng)})
            else:
                items.append({"type": "message", "role": rng.choice(["user", "user", "developer"]),
                              "content": [{"type": "input_text", "text": jo.rtext(rng)}
                                          for _ in range(rng.randint(1, 2))]})
            if rng.random() < 0.4:
                key = rng.choice(["content", "summary"])
                kind = "reasoning_text" if key == "content" else "summary_text"
                items.append({"type": "reasoning", "id": f"rs_{turn}", "summary": [],
                              key: [{"type": kind, "text": jo.rtext(rng)}]})
            if tools and rng.random() < 0.6:
                for c in range(rng.randint(1, 2)):
                    call = {"type": "function_call", "call_id": f"call_{turn}_{c}", "name": f"tool_{c % max(1, len(tools))}",
                            "arguments": json.dumps(rargs(rng))}
                    if rng.random() < 0.1:
                        call["namespace"], call["name"] = "crm", "lookup"
                    items.append(call)
                for c in range(1 if rng.random() < 0.5 else 2):
                    out = jo.rtext(rng) if rng.random() < 0.8 else [{"type": "input_text", "text": jo.rtext(rng)}]
                    items.append({"type": "function_call_output", "call_id": f"call_{turn}_{c}", "output": out})
            if rng.random() < 0.7:
                items.append({"type": "message", "role": "assistant", "id": f"msg_{turn}", "status": "completed",
                              "content": [{"type": "output_text", "text": jo.rtext(rng), "annotations": []}]})
        if rng.random() < 0.8:
            items.append({"role": "user", "content": jo.rtext(rng)})
        if rng.random() < 0.05:
            items[-1]["status"] = "in_progress"
        if rng.random() < 0.03:
            items.append({"type": "item_reference", "id": "x"})
        req["input"] = items
    if tools:
        req["tools"] = tools
    if rng.random() < 0.3:
        req["reasoning"] = {"effort": rng.choice(["low", "medium", "high"])}
    if rng.random() < 0.02:
        req["previous_response_id"] = "resp_1"
    return req


def rblock_text(rng):
    return {"type": "text", "text": jo.rtext(rng)}


def rmessages(rng):
    tools = []
    for i in range(rng.randint(0, 3)):
        t = {"name": f"tool_{i}", "input_schema": rschema(rng)}
        if rng.random() < 0.7:
            t["description"] = jo.rtext(rng)
        if rng.random() < 0.15:
            t["defer_loading"] = rng.choice([True, False])
        tools.append(t)
    req = {"model": "m", "max_tokens": 64}
    r = rng.random()
    if r < 0.3:
        req["system"] = jo.rtext(rng)
    elif r < 0.6:
        req["system"] = ([{"type": "text", "text": "x-anthropic-billing-header: cc_version=1; cch=abc"}]
                         if rng.random() < 0.5 else []) + [rblock_text(rng) for _ in range(rng.randint(1, 2))]
    msgs = []
    if rng.random() < 0.1:
        msgs.append({"role": "system", "content": jo.rtext(rng)})
    for turn in range(rng.randint(1, 4)):
        role = "ctx" if rng.random() < 0.05 else "user"
        if rng.random() < 0.5:
            msgs.append({"role": role, "content": jo.rtext(rng)})
        else:
            msgs.append({"role": role, "content": [rblock_text(rng) for _ in range(rng.randint(1, 2))]})
        blocks = []
        if rng.random() < 0.4:
            blocks.append({"type": "thinking", "thinking": jo.rtext(rng), "signature": "sig"})
        if rng.random() < 0.1:
            blocks.append({"type": "redacted_thinking", "data": "opaque"})
        if rng.random() < 0.6:
            blocks.append(rblock_text(rng))
        calls = []
        if tools and rng.random() < 0.6:
            for c in range(rng.randint(1, 2)):
                calls.append(f"toolu_{turn}_{c}")
                blocks.append({"type": "tool_use", "id": calls[-1], "name": f"tool_{c % len(tools)}",
                               "input": rargs(rng)})
        if rng.random() < 0.05:
            blocks.append({"type": "tool_result", "tool_use_id": "x", "content": jo.rtext(rng)})
        msgs.append({"role": "assistant", "content": blocks if blocks or rng.random() < 0.5 else jo.rtext(rng)})
        if calls:
            results = []
            for cid in calls:
                c = jo.rtext(rng) if rng.random() < 0.6 else [rblock_text(rng) for _ in range(rng.randint(1, 2))]
                res = {"type": "tool_result", "tool_use_id": cid, "content": c}
                if rng.random() < 0.1:
                    res["is_error"] = True
                results.append(res)
            if rng.random() < 0.5:
                results.append(rblock_text(rng))
            msgs.append({"role": "user", "content": results})
    if rng.random() < 0.8:
        msgs.append({"role": "user", "content": jo.rtext(rng)})
    req["messages"] = msgs
    if tools:
        req["tools"] = tools
        if rng.random() < 0.3:
            req["tool_choice"] = {"type": rng.choice(["auto", "any"])}
    if rng.random() < 0.2:
        req["output_config"] = {"effort": rng.choice(["low", "high"])}
    if rng.random() < 0.3:
        req["chat_template_kwargs"] = {"enable_thinking": rng.choice([True, False])}
    return req


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--testdata", required=True)
    ap.add_argument("--count", type=int, default=600)
    ap.add_argument("--seed", type=int, default=15)
    args = ap.parse_args()
    models = os.path.join(args.testdata, "models")
    qcfg = os.path.join(models, "qwen3", "tokenizer_config.json")
    dcfg = os.path.join(models, "deepseek-v3", "tokenizer_config.json")
    shipped = [
        (os.path.join(models, "qwen3", "chat_template.jinja"), qcfg),
        (os.path.join(models, "qwen3.6", "chat_template.jinja"), qcfg),
        (os.path.join(models, "deepseek-v3.1", "tool_chat_template_deepseekv31.jinja"), dcfg),
    ]
    env = jo.make_env()
    rng = random.Random(args.seed)
    cases = []
    for i in range(args.count):
        path, cfg = shipped[i % len(shipped)]
        api = "responses" if i % 2 == 0 else "messages"
        req = rresponses(rng) if api == "responses" else rmessages(rng)
        src = open(path, encoding="utf-8").read()
        openai_format = re.search(r"for \s*\w+\s+in\s+(message\.content|message\[['\"]content['\"]\]|content)(?![\w.\[])", src) is not None
        try:
            chat = responses_to_chat(req) if api == "responses" else messages_to_chat(req)
            want = jo.py_render(env, src, jo.preprocess(chat, jo.special_tokens(cfg), openai_format))
        except BadRequest as e:
            want = {"ok": False, "code": "convert_bad_request", "message": str(e)}
        except Unsupported as e:
            want = {"ok": False, "code": "convert_unsupported", "message": str(e)}
        cases.append((f"{api}#{i}", {"template": path, "config": cfg, "api": api, "request": req}, want))

    inp = "".join(json.dumps(c[1], ensure_ascii=False) + "\n" for c in cases)
    proc = subprocess.run([args.bin], input=inp.encode("utf-8"), stdout=subprocess.PIPE, check=True)
    outs = proc.stdout.decode("utf-8").splitlines()
    if len(outs) != len(cases):
        print(f"api_oracle: {len(outs)} outputs for {len(cases)} cases")
        return 1
    bad = identical = refused = failed = 0
    for (label, line, want), got_line in zip(cases, outs):
        got = json.loads(got_line)
        if want["ok"] and got["ok"]:
            same = want["rendered"] == got["rendered"]
            identical += same
        elif not want["ok"] and not got["ok"]:
            convert = want["code"].startswith("convert_")
            same = (want["code"] == got["code"]) if convert else not got["code"].startswith("convert_")
            refused += same and convert
            failed += same and not convert
        else:
            same = False
        if not same:
            bad += 1
            if bad <= 5:
                print(f"MISMATCH {label}\n  input: {json.dumps(line, ensure_ascii=False)[:2500]}\n"
                      f"  python: {json.dumps(want, ensure_ascii=False)[:2500]}\n"
                      f"  ramjet: {json.dumps(got, ensure_ascii=False)[:2500]}")
    print(f"api_oracle: {len(cases)} requests, {identical} identical renders, {refused} refused alike, "
          f"{failed} failed alike in the template, {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
