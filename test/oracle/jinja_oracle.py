#!/usr/bin/python3
"""Differential test: render::jinja + render::chat_template (ramjet-jinja-render) against
Debian's python3-jinja2 configured like transformers (ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks, loopcontrols, the json.dumps tojson override, raise_exception and a
fixed strftime_now), with vLLM's chat preprocessing re-implemented here independently.

Cases: seeded generated conversations on every shipped chat template (qwen3, qwen3.6,
deepseek-v3.1 + its tool template), and generated contexts on feature templates covering the
rest of the Jinja subset. Both sides must agree: the same text, or both fail (for
raise_exception, with the same message). Must run under /usr/bin/python3 (Debian's jinja2);
exits 77 (skip) when jinja2 is not importable.

  /usr/bin/python3 test/oracle/jinja_oracle.py --bin build/.../ramjet-jinja-render \
      --testdata test/data/testdata --count 400 --seed 6
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
from datetime import datetime, timezone

try:
    import jinja2
    from jinja2.exceptions import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("jinja_oracle: python3-jinja2 is not installed (scripts/setup installs it); skipping")
    sys.exit(77)

FIXED_NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Raised(Exception):
    pass


def make_env():
    def raise_exception(message):
        raise Raised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# ---- vLLM-style preprocessing (independent of the C++ one)

def special_tokens(config_path):
    cfg = json.load(open(config_path, encoding="utf-8"))
    out = {}
    for name in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                 "mask_token"):
        v = cfg.get(name)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            out[name] = v
    add = cfg.get("additional_special_tokens")
    if add:
        out["additional_special_tokens"] = [a["content"] if isinstance(a, dict) else a for a in add]
    return out


def preprocess(request, specials, openai_format):
    msgs = []
    for m in request["messages"]:
        o = {"role": m["role"]}
        c = m.get("content")
        if c is None:
            c = ""
        elif isinstance(c, list):
            parts = [{"type": "text", "text": p["text"]} for p in c]
            c = parts if openai_format else "\n".join(p["text"] for p in parts)
        o["content"] = c
        for k in ("name", "tool_call_id"):
            if m.get(k) is not None:
                o[k] = m[k]
        if m.get("tool_calls"):
            calls = []
            for tc in m["tool_calls"]:
                tc = dict(tc)
                fn = dict(tc["function"])
                args = fn.get("arguments")
                if isinstance(args, str):
                    fn["arguments"] = json.loads(args) if args else {}
                tc["function"] = fn
                calls.append(tc)
            o["tool_calls"] = calls
        r = m.get("reasoning")
        if r is None:
            r = m.get("reasoning_content")
        if r is not None:
            o["reasoning"] = r
            o["reasoning_content"] = r
        msgs.append(o)
    tools = None
    if request.get("tools") is not None:
        # vLLM 0.32's ChatCompletionToolsParam.model_dump(): its serializers keep declared fields
        # only (name, description, parameters, strict, defer_loading) and leave the last two out
        # when None; a tool-level defer_loading fills the function's when it has none.
        tools = []
        for t in request["tools"]:
            f = t["function"]
            fn = {k: f.get(k) for k in ("name", "description", "parameters")}
            outer = t.get("defer_loading")
            for k in ("strict", "defer_loading"):
                if f.get(k) is not None:
                    fn[k] = f[k]
            if outer is not None and "defer_loading" not in fn:
                fn["defer_loading"] = outer
            tool = {"type": "function", "function": fn}
            if outer is not None:
                tool["defer_loading"] = outer
            tools.append(tool)
    ctx = {"messages": msgs, "tools": tools, "documents": None,
           "add_generation_prompt": request.get("add_generation_prompt", True)}
    ctx.update(specials)
    ctx.update(request.get("chat_template_kwargs") or {})
    return ctx


# ---- generators

TEXTS = [
    "What is the capital of France?", "你好，世界！请用中文回答。", "emoji 😀👍🏽 🇫🇷 done",
    "  leading and trailing  ", "\n\nnewlines\n\n", "tabs\tand\r\ncrlf", "<think>inline</think>answer",
    "<tool_response>looks like a tool</tool_response>", "<|im_start|>user\nfake<|im_end|>",
    "<｜User｜>fake deepseek", "quotes ' \" and backslash \\ and {{ braces }} {% tag %}",
    "numbers 3.14159 1e10 -0 007", "", " ", "é café naïve ü", "x" * 300,
    "mixed 日本語 and English and العربية", "line1\nline2\nline3",
    "</think>", "before</think>after", "<think>\nreason\n</think>\n\nanswer",
]
WORDS = ["alpha", "beta", "ga mma", "δ", "中", "😀", "a\"b", "back\\slash", "new\nline", "tab\t"]


def rtext(rng):
    if rng.random() < 0.6:
        return rng.choice(TEXTS)
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 8)))


def rjson(rng, depth=0):
    k = rng.randint(0, 7 if depth < 3 else 4)
    if k == 0:
        return rng.randint(-10**6, 10**6)
    if k == 1:
        return rng.choice([0.5, 1.0, -2.25, 1e-7, 3.14159, 1e16, 123456.789, 0.1, 2.5e-5])
    if k == 2:
        return rng.choice([True, False, None])
    if k in (3, 4):
        return rtext(rng)
    if k == 5:
        return [rjson(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(WORDS + ["k", "key", "q"]) + str(i): rjson(rng, depth + 1)
            for i in range(rng.randint(0, 3))}


def rtool(rng, i):
    props = {f"p{j}": {"type": rng.choice(["string", "integer", "number", "boolean"]),
                       "description": rtext(rng)} for j in range(rng.randint(0, 3))}
    fn = {"name": f"tool_{i}", "description": rtext(rng),
          "parameters": {"type": "object", "properties": props, "required": list(props)[:1]}}
    if rng.random() < 0.1:
        del fn["description"]
    if rng.random() < 0.15:  # declared, dumped only when set (vLLM 0.32)
        fn["strict"] = rng.choice([True, False, None])
    if rng.random() < 0.05:  # not declared: vLLM 0.32 drops it
        fn["x-extra"] = rtext(rng)
    return {"type": "function", "function": fn}


def rcall(rng, tools):
    name = rng.choice(tools)["function"]["name"] if tools else "f"
    args = {f"a{j}": rjson(rng) for j in range(rng.randint(0, 3))}
    s = json.dumps(args, ensure_ascii=rng.random() < 0.5)
    if not args and rng.random() < 0.5:
        s = ""
    return {"id": f"call_{rng.randint(0, 999)}", "type": "function",
            "function": {"name": name, "arguments": s}}


def rrequest(rng, family):
    tools = [rtool(rng, i) for i in range(rng.randint(1, 3))] if rng.random() < 0.4 else None
    if tools is not None and rng.random() < 0.1:
        tools = []
    msgs = []
    if rng.random() < 0.4:
        msgs.append({"role": "system", "content": rtext(rng)})
    for _ in range(rng.randint(1, 4)):
        msgs.append({"role": "user", "content": rtext(rng)})
        if rng.random() < 0.2:
            msgs[-1]["content"] = [{"type": "text", "text": rtext(rng)} for _ in range(rng.randint(1, 2))]
        if rng.random() < 0.7:
            a = {"role": "assistant", "content": rtext(rng)}
            if rng.random() < 0.3:
                a["reasoning_content" if rng.random() < 0.5 else "reasoning"] = rtext(rng)
            if tools is not None and rng.random() < 0.5:
                a["tool_calls"] = [rcall(rng, tools) for _ in range(rng.randint(1, 2))]
                if rng.random() < 0.3:
                    a["content"] = None
                msgs.append(a)
                for tc in a["tool_calls"]:
                    msgs.append({"role": "tool", "tool_call_id": tc["id"], "content": rtext(rng)})
                if rng.random() < 0.5:
                    msgs.append({"role": "assistant", "content": rtext(rng)})
            else:
                msgs.append(a)
    if rng.random() < 0.15:
        msgs.pop()  # sometimes end on an assistant or tool turn
        if not msgs:
            msgs.append({"role": "user", "content": rtext(rng)})
    req = {"messages": msgs, "add_generation_prompt": rng.random() < 0.8}
    if tools is not None:
        req["tools"] = tools
    if rng.random() < 0.5:
        kw = {}
        for k in ("enable_thinking", "thinking", "preserve_thinking"):
            if rng.random() < 0.5:
                kw[k] = rng.choice([True, False])
        req["chat_template_kwargs"] = kw
    return req


FEATURE_TEMPLATES = [
    "{% for x in xs %}{{ loop.index }}/{{ loop.revindex }}:{{ x }}{{ ',' if not loop.last }}{% endfor %}",
    "{{ xs | length }} {{ xs | first }} {{ xs | last }} {{ xs | reverse | list }} {{ xs | join('|') }}",
    "{{ d | tojson }}\n{{ d | tojson(indent=2) }}\n{{ d | items | list }}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.keys() | list }}{{ d.get('zz', 'no') }}",
    "{{ s.upper() }}|{{ s.lower() }}|{{ s.strip() }}|{{ s.split() }}|{{ s[::-1] }}|{{ s[1:3] }}|{{ s | trim }}",
    "{{ s.startswith('a') }} {{ s.endswith('\\n') }} {{ s.replace('a', 'A') }} {{ s.lstrip() }}|{{ s.rstrip() }}",
    "{{ n + 1 }} {{ n * 2 }} {{ n // 3 }} {{ n % 3 }} {{ n / 4 }} {{ n ** 2 }} {{ -n }} {{ n > 3 }} {{ n | string }}",
    "{{ f }} {{ f * 3 }} {{ f | int }} {{ f | round(1) }} {{ [f, n] }}",
    "{% set ns = namespace(c=0, s='') %}{% for x in xs %}{% if x is string %}{% set ns.s = ns.s ~ x %}"
    "{% elif x is number %}{% set ns.c = ns.c + 1 %}{% else %}{% continue %}{% endif %}{% endfor %}{{ ns.c }}:{{ ns.s }}",
    "{% macro m(a, b=2, c='x') %}<{{ a }}{{ b }}{{ c }}>{% endmacro %}{{ m(1) }}{{ m(n, c=s) }}{{ m('q', 3, 4) }}",
    "{% for x in xs %}{% if x is mapping %}M{% elif x is sequence and x is not string %}L"
    "{% elif x is none %}N{% elif x is boolean %}B{% elif x is integer %}I{% else %}O{% endif %}{% endfor %}",
    "{{ xs | selectattr('a') | list }} {{ xs | rejectattr('a') | map(attribute='b') | list }}",
    "{{ xs | select('string') | list }} {{ xs | reject('none') | list | length }}",
    "{{ x is defined }} {{ x | default('dflt') }} {{ y is undefined }} {{ 'k' in d }} {{ s in xs }} {{ 1 not in xs }}",
    "{%- for x in xs -%}\n  {{- x -}}\n{%- endfor %}\n  {% if n %}\n    yes\n  {% endif %}\nend",
    "{% set t %}block {{ n }}{% endset %}[{{ t | upper }}]{{ '%s and %d' | format(s, n) }}",
    "{{ (n > 2) and s or 'short' }} {{ not xs }} {{ s ~ n ~ f }} {{ [1, 2][-1] }} {{ xs[10] }}",
    "{{ xs | map('string') | join(',') }} {{ xs | map('tojson') | join(' ') }}",
    "{{ s | indent(2) }}|{{ s | indent(2, true) }}|{{ s.title() }}|{{ s | capitalize }}",
    "{% for x in xs if x %}{{ x }}{% else %}empty{% endfor %}|{% for i in range(n % 5) %}{{ i }}{% endfor %}",
    "{{ raise_exception('stop: ' ~ s) if n > 100 else 'fine' }} {{ strftime_now('%Y-%m-%d %H:%M') }}",
    "{{ d.missing }}|{{ d['missing'] }}|{{ xs[-1] if xs else 'none' }}|{{ none }}|{{ True }}",
    "{% for a in xs %}{% for b in xs %}{% if loop.index > 2 %}{% break %}{% endif %}"
    "{{ loop.previtem is defined }}{% endfor %}{% endfor %}",
    # jinja2 scoping: each loop iteration starts from the enclosing scope
    "{% set a = n %}{% for x in xs %}{{ a }}{% if loop.first %}{% set a = 1 %}{% set b = 2 %}{% endif %}"
    "{{ a }}{{ b }};{% endfor %}{{ a }}{{ b }}",
    "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(n) }}{{ m(n, s) if n > 50 else '' }}{{ m(x=1, y=2) if n < 0 else '' }}",
    "{{ xs is sameas xs }} {{ d is sameas d }} {{ none is sameas none }} {{ xs | batch(2) | list }} {{ xs | batch(2, 'F') | list }}",
    "{% set t = [] %}{{ t.append(1) if n > 150 else 'ok' }}{{ d.update({'a': 1}) if n > 150 else '' }}",
    "{{ '{} and {}|{k}{{x}}'.format(n, s, k=f) }} {{ '{1}{0}{1}'.format(n, s) }} {{ '{}{0}'.format(n) }} {{ s.removeprefix('a') }}|{{ s.removesuffix('e') }}",
    "x\n    {% raw %}\n  {{ s }} {% if %}\n    {% endraw %}\n{{ s }}{% raw -%}  \n q {%- endraw %}",
    # recursive loops: loop(children) one level deeper, loop.depth/depth0, filter and else per level
    "{% for x in xs if x != 0 recursive %}{% if x is mapping %}{{ loop.depth }}{ {{- loop(x.values()) -}} }"
    "{% elif x is sequence and x is not string %}[{{ loop.index }}/{{ loop.length }}:{{ loop(x) }}]"
    "{% else %}{{ x }}@{{ loop.depth0 }}{{ ',' if not loop.last }}{% endif %}{% else %}E{{ loop is defined }}{% endfor %}",
    "{% for k, v in d.items() recursive %}{{ k }}{{ loop.depth }}={% if v is mapping %}({{ loop(v.items()) }})"
    "{% else %}{{ v | string | truncate(12) }}{% endif %};{% endfor %}",
    "{% for x in xs recursive %}{% set outer = loop %}{% for y in [1] %}{{ loop.depth }}{% endfor %}"
    "{% if x is sequence and x is not string and loop.depth < 3 %}{{ outer(x) | length }}{% endif %}"
    "{% if n > 150 %}{{ loop(n) }}{% endif %}{% endfor %}",
    # the loop object: str(), len(), changed(), cycle(); calling a non-recursive loop fails
    "{% for x in xs %}{{ loop }}{{ loop | length }}{{ loop.changed(x is string) }}{{ loop.cycle(s, n) }}"
    "{% if n > 190 %}{{ loop(xs) }}{% endif %}{% endfor %}",
    # *args / **kwargs in calls, macros catching varargs / kwargs, and rejecting extra arguments
    "{% macro m(a, b=1) %}{{ a }}|{{ b }}|{{ varargs }}|{{ kwargs | dictsort }}{% endmacro %}"
    "{{ m(*xs) }}#{{ m(n, *xs[:2], **d) }}#{{ m(**d) }}#{{ m(s, k=f, *xs[1:]) }}",
    "{% macro p(a, b=none) %}{{ a }}{{ b }}{% endmacro %}{{ p(*xs[:n % 4]) }}{{ p(**d) if n > 120 else '' }}"
    "{{ range(*[n % 7, 9, 2]) | list }} {{ dict(**d, ) | length }} {{ xs | join(*[s[:2]]) }}",
    "{% macro w(t) %}<{{ t }}:{{ caller(t) }}{{ kwargs }}>{% endmacro %}{% macro z(t) %}{{ t }}{% endmacro %}"
    "{% call(v) w(n) %}{{ v * 2 }}{% endcall %}{% if n > 170 %}{% call z(1) %}x{% endcall %}{% endif %}",
    # truncate (default leeway 5) and striptags (markupsafe: comments, tags, whitespace, entities)
    "{{ s | truncate(n % 30 + 3) }}|{{ s | truncate(n % 20 + 3, true) }}|{{ s | truncate(n % 25 + 3, false, '…', n % 4) }}"
    "|{{ s | truncate(n % 25 + 3, end='>>', leeway=0) }}|{{ d | tojson | truncate(20) }}|{{ h | truncate(n % 9 + 3, leeway=1) }}",
    "{{ h | striptags }}|{{ h | striptags | length }}|{{ s | striptags }}|{{ d | striptags }}",
    # {% with %}: values from the enclosing scope, assignments local to the block
    "{% with a = n, b = s[:3], (c, e) = [f, n > 50] %}{{ a }}{{ b }}{{ c }}{{ e }}{% set a = 0 %}{{ a }}{% endwith %}"
    "[{{ a }}]|{% for x in xs %}{% with y = loop.index %}{{ y }}{% if y > 2 %}{% break %}{% endif %}{% endwith %}{% endfor %}",
    # tests take a fixed number of arguments; `is filter` / `is test` look names up
    "{{ xs | select('>', n % 3) | list if xs | select('number') | list | length == xs | length else 'mixed' }}"
    " {{ s is filter }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ n is divisibleby(num=3) }}"
    " {{ n is none(1) if n > 180 else '' }}",
]

HTML_PIECES = [
    "<p>", "</p>", '<b class="x">', "<br/>", "<!-- c -->", "<!--", "-->", "<!-- <i> -->", "&amp;", "&lt;",
    "&gt;", "&quot;", "&#39;", "&#x41;", "&#65", "&nbsp;", "&copy", "&ampx", "&notit;", "&hellip;",
    "&euro;", "&#128;", "&#0;", "&#x110000;", "&#xD800;", "&#65534;", "&unknown;", "&", "<", ">", "&#",
    "text", " ", "\n\t ", "日本", "\u3000", "a<b", "x > y", "&AElig", "&aacute;", "&rarr;", ";",
]


def rhtml(rng):
    return "".join(rng.choice(HTML_PIECES) for _ in range(rng.randint(0, 12)))


def rcontext(rng):
    return {"xs": [rjson(rng) for _ in range(rng.randint(0, 5))] +
                  ([{"a": rjson(rng), "b": rtext(rng)} for _ in range(rng.randint(0, 2))] if rng.random() < 0.5 else []),
            "d": {f"k{i}": rjson(rng) for i in range(rng.randint(0, 4))},
            "s": rtext(rng), "n": rng.randint(-5, 200), "f": rng.choice([0.5, 1.25, -3.75, 10.0, 1e-5]),
            "h": rhtml(rng)}


def py_render(env, src, ctx):
    try:
        return {"ok": True, "rendered": env.from_string(src).render(**ctx)}
    except Raised as e:
        return {"ok": False, "code": "raised", "message": str(e)}
    except Exception as e:  # noqa: BLE001 - any jinja/python error counts as "failed"
        return {"ok": False, "code": type(e).__name__, "message": str(e)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--testdata", required=True)
    ap.add_argument("--count", type=int, default=400)
    ap.add_argument("--seed", type=int, default=6)
    args = ap.parse_args()
    models = os.path.join(args.testdata, "models")
    qcfg = os.path.join(models, "qwen3", "tokenizer_config.json")
    dcfg = os.path.join(models, "deepseek-v3", "tokenizer_config.json")
    shipped = [
        ("qwen3", os.path.join(models, "qwen3", "chat_template.jinja"), qcfg),
        ("qwen3.6", os.path.join(models, "qwen3.6", "chat_template.jinja"), qcfg),
        ("deepseek-v3.1", os.path.join(models, "deepseek-v3.1", "chat_template.jinja"), dcfg),
        ("deepseek-v3.1-tools", os.path.join(models, "deepseek-v3.1", "tool_chat_template_deepseekv31.jinja"), dcfg),
    ]
    env = make_env()
    rng = random.Random(args.seed)
    cases = []  # (label, input line for the C++ tool, python result)
    for i in range(args.count):
        fam, path, cfg = shipped[i % len(shipped)]
        req = rrequest(rng, fam)
        src = open(path, encoding="utf-8").read()
        openai_format = re.search(r"for \s*\w+\s+in\s+(message\.content|message\[['\"]content['\"]\]|content)(?![\w.\[])", src) is not None
        ctx = preprocess(req, special_tokens(cfg), openai_format)
        cases.append((f"{fam}#{i}", {"template": path, "config": cfg, "request": req},
                      py_render(env, src, ctx)))
    for i in range(max(args.count // 2, 10 * len(FEATURE_TEMPLATES))):
        src = FEATURE_TEMPLATES[i % len(FEATURE_TEMPLATES)]
        ctx = rcontext(rng)
        cases.append((f"feature{i % len(FEATURE_TEMPLATES)}#{i}", {"source": src, "context": ctx},
                      py_render(env, src, ctx)))

    inp = "".join(json.dumps(c[1], ensure_ascii=False) + "\n" for c in cases)
    proc = subprocess.run([args.bin], input=inp.encode("utf-8"), stdout=subprocess.PIPE, check=True)
    outs = proc.stdout.decode("utf-8").splitlines()
    if len(outs) != len(cases):
        print(f"jinja_oracle: {len(outs)} outputs for {len(cases)} cases")
        return 1
    bad = 0
    agree_ok = agree_err = 0
    for (label, line, want), got_line in zip(cases, outs):
        got = json.loads(got_line)
        same = False
        if want["ok"] and got["ok"]:
            same = want["rendered"] == got["rendered"]
            agree_ok += same
        elif not want["ok"] and not got["ok"]:
            same = want["code"] != "raised" or (got["code"] == "raised" and got["message"] == want["message"])
            agree_err += same
        if not same:
            bad += 1
            if bad <= 5:
                print(f"MISMATCH {label}\n  input: {json.dumps(line, ensure_ascii=False)[:2000]}\n"
                      f"  python: {json.dumps(want, ensure_ascii=False)[:2000]}\n"
                      f"  ramjet: {json.dumps(got, ensure_ascii=False)[:2000]}")
    print(f"jinja_oracle: {len(cases)} cases, {agree_ok} identical renders, {agree_err} agreed errors, "
          f"{bad} mismatches (jinja2 {jinja2.__version__})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
