"""RJ_TOKENIZER_MODE end to end: ramjet in front of ramjet-sim engines that tokenize with the real
Qwen3 tokenizer and chat template (sim --tokenizer/--chat-template).

The manifest's golden digests come from the golden files (an independent implementation), not
from ramjet, so startup attestation is a real check. Shadow tokenization runs after each response:
the engine's POST /tokenize is compared with ramjet's own render + encode (parity metrics); an
engine whose /v1/models or /version differs from the manifest is not attested and gets no local
tokens; a sim with an edited chat template shows up as parity_mismatch."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time

import pytest

from support.ramjet_proc import poll
from support.sim_proc import SimProc

TESTDATA = os.environ.get("RAMJET_TESTDATA", os.path.join(os.path.dirname(__file__), "..", "data", "testdata"))
QWEN = os.path.join(TESTDATA, "models", "qwen3")
TOK = os.path.join(QWEN, "tokenizer.json")
TPL = os.path.join(QWEN, "chat_template.jinja")
MODEL_ID, ROOT, CTX, VERSION = "qwen3", "Qwen/Qwen3-8B", 40960, "0.26.0"


def sha_file(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def ids_sha(ids) -> str:
    return hashlib.sha256(b"".join(struct.pack(">I", i) for i in ids)).hexdigest()


def goldens(n=None):
    out = []
    with open(os.path.join(TESTDATA, "goldens", "qwen3.jsonl"), encoding="utf-8") as f:
        for line in f:
            g = json.loads(line)
            if "reasoning_effort" in (g["request"].get("chat_template_kwargs") or {}):
                continue  # not a Qwen3 template kwarg: the qwen3 profile leaves it to the engine
            out.append(g)
    return out[:n] if n else out


def write_manifest(tmp_path, golden_lines, **over) -> tuple[str, str]:
    m = {
        "schema": 1,
        "model": {"id": MODEL_ID, "root": ROOT, "max_model_len": CTX},
        "engine": {"version": VERSION},
        "tokenizer": {"sha256": sha_file(TOK)},
        "chat_template": {"sha256": sha_file(TPL)},
        "renderer": {"profile": "qwen3"},
        "goldens": [{"id": g["id"], "endpoint": "chat", "request": g["request"],
                     "token_count": len(g["token_ids"]), "token_ids_sha256": ids_sha(g["token_ids"])}
                    for g in golden_lines],
    }
    m.update(over)
    path = tmp_path / "manifest.json"
    text = json.dumps(m, ensure_ascii=False).encode()
    path.write_bytes(text)
    return str(path), hashlib.sha256(text).hexdigest()


def local_env(tmp_path, mode="local-shadow", golden_lines=None, **extra):
    path, sha = write_manifest(tmp_path, golden_lines if golden_lines is not None else goldens(6))
    env = {
        "RJ_TOKENIZER_MODE": mode, "RJ_TOKENIZER_PROFILE": "qwen3",
        "RJ_TOKENIZER_PATH": TOK, "RJ_TOKENIZER_SHA256": sha_file(TOK),
        "RJ_CHAT_TEMPLATE_PATH": TPL, "RJ_CHAT_TEMPLATE_SHA256": sha_file(TPL),
        "RJ_TOKENIZER_MANIFEST_PATH": path, "RJ_TOKENIZER_MANIFEST_SHA256": sha,
        "RJ_TOKENIZER_MIN_BYTES": "0", "RJ_PROBE_INTERVAL_MS": "200", "RJ_AFFINITY": "round_robin",
    }
    env.update(extra)
    return env


def model_folder(tmp_path, template: str = TPL) -> str:
    """The engines' model folder as `vllm serve` reads it: tokenizer, its config, the chat template
    and a config.json whose model_type picks the profile (RJ_MODEL_DIR)."""
    d = tmp_path / "model"
    d.mkdir()
    for name, src in (("tokenizer.json", TOK), ("tokenizer_config.json", os.path.join(QWEN, "tokenizer_config.json")),
                      ("chat_template.jinja", template)):
        os.symlink(src, d / name)
    (d / "config.json").write_text(json.dumps({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}))
    return str(d)


def qwen_sim(*extra):
    return SimProc("--speed", "50", "--tokenizer", TOK, "--chat-template", TPL, "--served-model-name", MODEL_ID,
                   "--model", ROOT, "--max-model-len", str(CTX), "--engine-version", VERSION, *extra)


@pytest.fixture
def sims_factory():
    made = []

    def make(*specs):
        for extra in specs:
            made.append(qwen_sim(*extra))
        return made

    yield make
    for s in made:
        s.stop()


def chat_body(g, max_tokens=2):
    body = dict(g["request"])
    body.update({"model": MODEL_ID, "max_tokens": max_tokens})
    return body


def wait_attested(rj, upstreams, timeout=10):
    return poll(lambda: all(rj.metrics().get("ramjet_tokenizer_attested", upstream=str(u)) == 1 for u in upstreams),
                timeout, what=f"upstreams {upstreams} attested")


def shadow(m, backend, outcome, endpoint=None):
    labels = {"backend": backend, "outcome": outcome}
    if endpoint:
        labels["endpoint"] = endpoint
    return m.sum("ramjet_tokenizer_shadow_total", **labels)


def test_local_shadow_reproduces_the_engines_tokens(tmp_path, sims_factory, ramjet_factory):
    sims = sims_factory((), ())
    # Room for every job and time for every call under a loaded CI machine (ASan, parallel suites):
    # this test is about parity; queue_full and timeouts have tests of their own.
    rj = ramjet_factory(sims, env=local_env(tmp_path, RJ_TOKENIZER_QUEUE_CAPACITY="64", RJ_TOKENIZER_TIMEOUT_MS="10000"))
    assert "manifest goldens reproduced" in rj.output()
    wait_attested(rj, [0, 1])
    lines = goldens()
    for g in lines:
        r = rj.chat(chat_body(g))
        assert r.status == 200, r
        assert r.json()["usage"]["prompt_tokens"] == len(g["token_ids"]), g["id"]
    r = rj.chat({"model": MODEL_ID, "prompt": "Hello, completions: 你好 🙂", "max_tokens": 2}, path="/v1/completions")
    assert r.status == 200, r
    n = len(lines)
    # Counters are read one by one: wait until both sides of every job are in the same scrape.
    try:
        m = poll(lambda: (lambda m: m if shadow(m, "local", "parity_match") >= n + 1
                          and shadow(m, "remote", "success") >= n + 1 else None)(rj.metrics()), 30,
                 what="every request compared")
    except AssertionError:
        m = rj.metrics()
        print("shadow outcomes:", [(sorted(k.items()), v) for k, v in m.find("ramjet_tokenizer_shadow_total") if v],
              "skipped:", [(sorted(k.items()), v) for k, v in m.find("ramjet_tokenizer_shadow_skipped_total") if v])
        raise
    assert shadow(m, "remote", "success", "chat") == n and shadow(m, "remote", "success", "completions") == 1
    assert shadow(m, "local", "parity_match", "chat") == n
    assert shadow(m, "local", "parity_match", "completions") == 1
    assert shadow(m, "local", "parity_mismatch") == 0 and shadow(m, "local", "unattested") == 0
    # The pinned Qwen3 template is one the native formatter reproduces: the goldens it covers (and
    # the manifest's, at startup) were rendered natively, the one with an unmodelled kwarg by Jinja.
    assert m.get("ramjet_tokenizer_native_render_total", result="native") >= n - 1
    remote_tokens = m.get("ramjet_tokenizer_shadow_tokens_total", backend="remote")
    assert remote_tokens == m.get("ramjet_tokenizer_shadow_tokens_total", backend="local")
    assert remote_tokens >= sum(len(g["token_ids"]) for g in lines)
    assert m.get("ramjet_tokenizer_info", mode="local-shadow", profile="qwen3") == 1
    # Every family docs/metrics.md lists under "Local tokenization" is exported in this mode.
    import re
    docs = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "metrics.md"), encoding="utf-8").read()
    section = docs.split("## Local tokenization", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(ramjet_tokenizer_[a-z_]+)` \|", section, re.M))
    assert len(documented) >= 12
    exported = {n for n in documented if m.has(n) or m.has(n + "_count")}
    assert exported == documented, documented - exported
    assert m.get("ramjet_tokenizer_attestation_checks_total", upstream="0", outcome="match") >= 1
    # Nothing of the prompts reaches the log.
    out = rj.output()
    for g in lines:
        for msg in g["request"]["messages"]:
            content = msg.get("content")
            if isinstance(content, str) and len(content) > 12:
                assert content not in out


def test_an_engine_whose_identity_differs_is_not_attested(tmp_path, sims_factory, ramjet_factory):
    sims = sims_factory((), ("--engine-version", "0.25.1"), ("--max-model-len", "8192"))
    rj = ramjet_factory(sims, env=local_env(tmp_path))
    wait_attested(rj, [0])
    m = poll(lambda: (lambda m: m if m.val("ramjet_tokenizer_attestation_checks_total", upstream="1",
                                          outcome="version_mismatch") >= 1 and
                      m.val("ramjet_tokenizer_attestation_checks_total", upstream="2",
                            outcome="model_context_mismatch") >= 1 else None)(rj.metrics()),
             10, what="identity mismatches counted")
    assert m.get("ramjet_tokenizer_attested", upstream="1") == 0
    assert m.get("ramjet_tokenizer_attested", upstream="2") == 0
    _, h = rj.health()
    assert [r["tokenizer_attested"] for r in h["replicas"]] == [True, False, False], h
    assert [r["healthy"] for r in h["replicas"]] == [True, True, True], "identity is not health"
    assert "upstream 1 not attested: version_mismatch" in rj.output()
    served = {}
    for g in goldens(6):
        r = rj.chat(chat_body(g))
        assert r.status == 200, r  # unattested engines still serve; only local tokens are withheld
        served[r.upstream] = served.get(r.upstream, 0) + 1
    assert set(served) == {"0", "1", "2"}, served
    m = poll(lambda: (lambda m: m if shadow(m, "remote", "success") >= 6 and
                      shadow(m, "local", "parity_match") + shadow(m, "local", "unattested") >= 6 else None)(
        rj.metrics()), 30, what="six shadow tokenizations")
    assert shadow(m, "local", "unattested") == served["1"] + served["2"]
    assert shadow(m, "local", "parity_match") == served["0"]


def test_an_edited_template_on_an_engine_is_a_parity_mismatch(tmp_path, sims_factory, ramjet_factory):
    edited = tmp_path / "edited.jinja"
    with open(TPL, encoding="utf-8") as f:
        edited.write_text(f.read().replace("<|im_start|>assistant\\n", "<|im_start|>assistant \\n"), encoding="utf-8")
    sims = sims_factory((), ("--chat-template", str(edited)))
    rj = ramjet_factory(sims, env=local_env(tmp_path))
    wait_attested(rj, [0, 1])  # the identity matches: only the tokens tell
    served = {"0": 0, "1": 0}
    for g in goldens(4):
        r = rj.chat(chat_body(g))
        assert r.status == 200
        served[r.upstream] += 1
    m = poll(lambda: (lambda m: m if shadow(m, "local", "parity_match") + shadow(m, "local", "parity_mismatch") >= 4
                      else None)(rj.metrics()), 30, what="four comparisons")
    assert shadow(m, "local", "parity_mismatch") == served["1"] and shadow(m, "local", "parity_match") == served["0"]
    assert served["1"] > 0, served
    # The log line is written after the counter, and read from the process's stderr by a thread.
    out = poll(lambda: (lambda o: o if "parity mismatch upstream=1 endpoint=chat" in o else None)(rj.output()), 10,
               what="the parity mismatch logged")
    assert "first_difference=" in out


def test_remote_shadow_needs_no_local_files(sims_factory, ramjet_factory):
    sims = sims_factory(())
    rj = ramjet_factory(sims, env={"RJ_TOKENIZER_MODE": "remote-shadow", "RJ_TOKENIZER_PROFILE": "deepseek-v4-r34",
                                   "RJ_TOKENIZER_MIN_BYTES": "0"})
    for g in goldens(3):
        assert rj.chat(chat_body(g)).status == 200
    assert rj.chat({"model": MODEL_ID, "prompt": [1, 2, 3], "max_tokens": 1}, path="/v1/completions").status == 200
    m = poll(lambda: (lambda m: m if shadow(m, "remote", "success") >= 3 else None)(rj.metrics()), 20,
             what="three remote tokenizations")
    assert not m.find("ramjet_tokenizer_shadow_total", backend="local")
    assert not m.has("ramjet_tokenizer_attested")
    assert "tokenizer_attested" not in rj.health()[1]["replicas"][0]
    poll(lambda: rj.metrics().get("ramjet_tokenizer_shadow_skipped_total", reason="unsupported_endpoint") == 1, 10,
         what="a token-array prompt skipped")


def test_the_queue_is_bounded_and_every_response_is_accounted(sims_factory, ramjet_factory):
    sims = sims_factory(())
    rj = ramjet_factory(sims, env={"RJ_TOKENIZER_MODE": "remote-shadow", "RJ_TOKENIZER_PROFILE": "qwen3",
                                   "RJ_TOKENIZER_MIN_BYTES": "200", "RJ_TOKENIZER_QUEUE_CAPACITY": "1"})
    import concurrent.futures as cf
    lines = goldens()
    bodies = [chat_body(lines[i % len(lines)]) for i in range(40)]
    with cf.ThreadPoolExecutor(16) as ex:
        statuses = list(ex.map(lambda b: rj.chat(b).status, bodies))
    assert statuses == [200] * 40
    small = sum(1 for b in bodies if len(json.dumps(b).encode()) < 200)  # the bytes rj.chat sends

    def settled():
        m = rj.metrics()
        done = m.sum("ramjet_tokenizer_shadow_total", backend="remote") + \
            m.sum("ramjet_tokenizer_shadow_skipped_total")
        return m if done == 40 and m.get("ramjet_tokenizer_shadow_queue_depth") == 0 else None

    m = poll(settled, 30, what="every response accounted once")
    assert m.val("ramjet_tokenizer_shadow_skipped_total", reason="outside_size_window") == small
    assert shadow(m, "remote", "success") + m.val("ramjet_tokenizer_shadow_skipped_total", reason="queue_full") == \
        40 - small


def test_local_mode_tokenizes_without_asking_the_engine(tmp_path, sims_factory, ramjet_factory):
    sims = sims_factory(())
    rj = ramjet_factory(sims, env=local_env(tmp_path, mode="local"))
    wait_attested(rj, [0])
    for g in goldens(3):
        assert rj.chat(chat_body(g)).status == 200
    m = poll(lambda: (lambda m: m if shadow(m, "local", "success") == 3 else None)(rj.metrics()), 20,
             what="three local tokenizations")
    assert not m.find("ramjet_tokenizer_shadow_total", backend="remote")
    assert m.get("ramjet_tokenizer_shadow_tokens_total", backend="local") == \
        sum(len(g["token_ids"]) for g in goldens(3))
    assert m.get("ramjet_tokenizer_info", mode="local", profile="qwen3") == 1


def test_an_engine_restarted_with_another_version_loses_its_attestation(tmp_path, sims_factory, ramjet_factory):
    sims = sims_factory(())
    rj = ramjet_factory(sims, env=local_env(tmp_path))
    wait_attested(rj, [0])
    port = sims[0].port
    sims[0].stop()
    sims[0] = qwen_sim("--port", str(port), "--engine-version", "0.27.0")
    poll(lambda: rj.metrics().get("ramjet_tokenizer_attested", upstream="0") == 0, 10, what="attestation withdrawn")
    poll(lambda: rj.health()[1]["replicas"][0]["healthy"], 10, what="engine 0 serving again")
    assert rj.chat(chat_body(goldens(1)[0])).status == 200
    m = poll(lambda: (lambda m: m if shadow(m, "local", "unattested") == 1 else None)(rj.metrics()), 20,
             what="its request tokenized remotely only")
    assert shadow(m, "local", "parity_match") == 0
    assert "upstream 0 not attested: version_mismatch" in rj.output()


@pytest.mark.parametrize("env, message", [
    ({"RJ_TOKENIZER_PROFILE": "qwen3.8-27B"}, "RJ_TOKENIZER_PROFILE: unknown profile 'qwen3.8-27B'"),
    ({"RJ_TOKENIZER_MODE": "local-shadow", "RJ_TOKENIZER_PROFILE": "qwen3", "RJ_TOKENIZER_PATH": TOK},
     "RJ_TOKENIZER_PATH is set without RJ_TOKENIZER_SHA256"),
    ({"RJ_TOKENIZER_MODE": "remote-shadow"}, "RJ_TOKENIZER_PROFILE is required when RJ_TOKENIZER_MODE is remote-shadow"),
    ({"RJ_TOKENIZER_MODE": "sometimes"}, "RJ_TOKENIZER_MODE"),
])
def test_bad_tokenizer_configuration_stops_startup(ramjet_factory, env, message):
    p = ramjet_factory(["http://127.0.0.1:9"], env=env, start=False)
    rc, out = p.run_to_exit(10)
    assert rc == 2 and message in out, out


def test_a_golden_that_does_not_reproduce_stops_startup(tmp_path, ramjet_factory):
    lines = goldens(3)
    bad = dict(lines[1])
    bad["token_ids"] = bad["token_ids"][:-1]  # the manifest says one token fewer than the truth
    env = local_env(tmp_path, golden_lines=[lines[0], bad, lines[2]])
    p = ramjet_factory(["http://127.0.0.1:9"], env=env, start=False)
    rc, out = p.run_to_exit(20)
    assert rc == 2, out
    assert f"manifest golden '{bad['id']}': rendered {len(lines[1]['token_ids'])} tokens, the manifest has " \
           f"{len(bad['token_ids'])}" in out, out
    # A tokenizer file that is not the pinned one.
    env = local_env(tmp_path, RJ_TOKENIZER_SHA256="0" * 64)
    p = ramjet_factory(["http://127.0.0.1:9"], env=env, start=False)
    rc, out = p.run_to_exit(20)
    assert rc == 2 and "SHA-256 differs from the pinned digest" in out, out
    # The native DeepSeek-V4 formatter is not in this build: local modes refuse the profile.
    env = local_env(tmp_path, RJ_TOKENIZER_PROFILE="deepseek-v4-r34", RJ_CHAT_TEMPLATE_PATH=None,
                    RJ_CHAT_TEMPLATE_SHA256=None)
    p = ramjet_factory(["http://127.0.0.1:9"], env=env, start=False)
    rc, out = p.run_to_exit(20)
    assert rc == 2 and "needs the native formatter 'deepseek-v4'" in out, out


def test_ramjet_manifest_pins_a_live_engine_and_ramjet_accepts_it(tmp_path, sims_factory, ramjet_factory,
                                                                   ramjet_binary):
    import subprocess
    sims = sims_factory((), ())
    requests = tmp_path / "requests.jsonl"
    lines = goldens(5)
    with open(requests, "w", encoding="utf-8") as f:
        for g in lines:
            f.write(json.dumps({"id": g["id"], "endpoint": "chat", "request": g["request"]}, ensure_ascii=False) + "\n")
        f.write(json.dumps({"model": MODEL_ID, "prompt": "plain completion text"}) + "\n")
    args = [ramjet_binary, "manifest", "--upstream", sims[0].url, "--profile", "qwen3", "--tokenizer", TOK,
            "--template", TPL, "--requests", str(requests)]
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    m = json.loads(p.stdout)
    assert m["model"] == {"id": MODEL_ID, "root": ROOT, "max_model_len": CTX}
    assert m["engine"] == {"version": VERSION} and m["renderer"] == {"profile": "qwen3"}
    assert [g["id"] for g in m["goldens"]] == [g["id"] for g in lines] + ["g6"]
    # The digests are the engine's, and equal the independent goldens'.
    for g, want in zip(m["goldens"], lines):
        assert g["token_count"] == len(want["token_ids"]) and g["token_ids_sha256"] == ids_sha(want["token_ids"])
    path = tmp_path / "pinned.json"
    path.write_text(p.stdout)
    env = local_env(tmp_path, RJ_TOKENIZER_MANIFEST_PATH=str(path),
                    RJ_TOKENIZER_MANIFEST_SHA256=hashlib.sha256(p.stdout.encode()).hexdigest())
    rj = ramjet_factory(sims, env=env)
    assert "6 manifest goldens reproduced" in rj.output()
    wait_attested(rj, [0, 1])

    # An engine whose template differs from ramjet's: no manifest is written.
    edited = tmp_path / "edited.jinja"
    with open(TPL, encoding="utf-8") as f:
        edited.write_text(f.read().replace("<|im_start|>assistant\\n", "<|im_start|>assistant \\n"), encoding="utf-8")
    other = sims_factory(("--chat-template", str(edited)))[-1]
    args[3] = other.url
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and p.stdout == "", p
    assert "ramjet would refuse this manifest at startup" in p.stderr, p.stderr


def test_ramjet_manifest_from_the_model_folder_with_builtin_goldens(tmp_path, sims_factory, ramjet_factory,
                                                                    ramjet_binary):
    """`ramjet manifest --model-dir`: the folder names the files and the profile, the built-in
    goldens are the requests; ramjet then runs on the folder and that pinned manifest (its strict
    identity check: the engine with another context length is not attested)."""
    import subprocess
    sims = sims_factory((), ("--max-model-len", "8192"))
    folder = model_folder(tmp_path)
    p = subprocess.run([ramjet_binary, "manifest", "--upstream", sims[0].url, "--model-dir", folder],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    m = json.loads(p.stdout)
    assert m["renderer"] == {"profile": "qwen3"} and m["tokenizer"] == {"sha256": sha_file(TOK)}
    assert m["chat_template"] == {"sha256": sha_file(TPL)}
    assert [g["id"] for g in m["goldens"]] == ["hello", "system-turns", "unicode-space", "tools", "completions"]
    path = tmp_path / "pinned.json"
    path.write_text(p.stdout)
    rj = ramjet_factory(sims, env={"RJ_MODEL_DIR": folder, "RJ_TOKENIZER_MODE": "local-shadow",
                                   "RJ_TOKENIZER_MANIFEST_PATH": str(path), "RJ_PROBE_INTERVAL_MS": "200",
                                   "RJ_TOKENIZER_MANIFEST_SHA256": hashlib.sha256(p.stdout.encode()).hexdigest()})
    assert "5 manifest goldens reproduced" in rj.output()
    wait_attested(rj, [0])
    poll(lambda: rj.metrics().val("ramjet_tokenizer_attestation_checks_total", upstream="1",
                                  outcome="model_context_mismatch") >= 1, 10, what="engine 1 refused by the pin")
    assert rj.metrics().get("ramjet_tokenizer_attested", upstream="1") == 0
    bad = subprocess.run([ramjet_binary, "manifest", "--upstream", sims[0].url, "--model-dir", folder, "--tokenizer",
                          TOK], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--model-dir names the files" in bad.stderr, bad


def test_a_growing_conversation_reuses_the_session_cache(tmp_path, sims_factory, ramjet_factory):
    sims = sims_factory(())
    rj = ramjet_factory(sims, env=local_env(tmp_path))
    wait_attested(rj, [0])
    messages = [{"role": "system", "content": "You are a careful agent. " * 40}]
    for turn in range(5):
        messages.append({"role": "user", "content": f"Step {turn}: read the file and report. 你好 " * 20})
        r = rj.chat({"model": MODEL_ID, "messages": messages, "max_tokens": 4})
        assert r.status == 200, r
        messages.append({"role": "assistant", "content": r.json()["choices"][0]["message"]["content"] or "ok"})
        poll(lambda: shadow(rj.metrics(), "local", "parity_match") == turn + 1, 20, what=f"turn {turn} compared")
    m = rj.metrics()
    assert shadow(m, "local", "parity_mismatch") == 0
    assert m.get("ramjet_tokenizer_session_cache_lookups_total", result="hit") >= 4
    # Turns 2..5 reuse the whole earlier conversation: most bytes come from the cache.
    assert m.get("ramjet_tokenizer_session_cache_reused_bytes_total") > 4 * 2000
    assert m.get("ramjet_tokenizer_session_cache_bytes") > 0
