"""`ramjet render`: every golden line of test/data/testdata/goldens/*.jsonl reproduced by the CLI
from the files that line names, plus typed errors for bad input (never a crash).

Loading a tokenizer takes ~0.5 s, so the goldens run through `--jsonl` (one process per golden
file and file combination); the single-request mode runs on the first line of each group.
"""

import json
import os
import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

TESTDATA = Path(__file__).resolve().parents[1] / "data" / "testdata"
MODELS = TESTDATA / "models"
GOLDEN_FILES = sorted((TESTDATA / "goldens").glob("*.jsonl"))
TIMEOUT = 60


def _env():
    # `ramjet render` must not need (or read) the router's configuration.
    return {k: v for k, v in os.environ.items() if not k.startswith("RJ_")}


def run(binary, args, stdin: bytes | str = b""):
    if isinstance(stdin, str):
        stdin = stdin.encode()
    p = subprocess.run([binary, "render", *map(str, args)], input=stdin, capture_output=True,
                       timeout=TIMEOUT, env=_env())
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def tokenizer_args(field):
    """CLI arguments for a golden's `tokenizer` field, e.g. "deepseek-v3/tokenizer.json with
    deepseek-v3.1/added_tokens_override.json applied" or "qwen3/tokenizer.json (== ...)"."""
    if field is None:
        return None
    m = re.match(r"(\S+)(?: with (\S+) applied)?", field)
    assert m, field
    args = ["--tokenizer", MODELS / m.group(1)]
    if m.group(2):
        args += ["--added-tokens", MODELS / m.group(2)]
    return args


def golden_args(line):
    """The CLI arguments that reproduce one golden line (and whether it is a chat line)."""
    tok = tokenizer_args(line["tokenizer"])
    if "request" not in line:  # tokenizer golden
        return ["--text", *tok], False
    template = line["template"]
    if template.startswith("vllm:deepseek_v32"):
        args = ["--formatter", "deepseek-v32"]
    else:
        args = ["--template", MODELS / template]
    if line["token_ids"] is None:
        args.append("--no-tokenize")
    if tok:
        args += tok
    return args, True


def golden_groups():
    groups = defaultdict(list)
    for path in GOLDEN_FILES:
        for n, text in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
            if not text.strip():
                continue
            line = json.loads(text)
            args, chat = golden_args(line)
            groups[(path.name, tuple(map(str, args)))].append((f"{path.name}:{n} {line['id']}", line, chat))
    return groups


GROUPS = golden_groups()


def check(where, line, chat, out):
    if chat:
        assert out["rendered"] == line["rendered"], where
        if line["token_ids"] is None:
            assert "token_ids" not in out, where
        else:
            assert out["token_ids"] == line["token_ids"], where
    else:
        assert set(out) == {"token_ids"}, where
        assert out["token_ids"] == line["token_ids"], where


def test_the_goldens_cover_every_file():
    assert len(GOLDEN_FILES) >= 7
    assert sum(len(g) for g in GROUPS.values()) >= 390
    assert {name for name, _ in GROUPS} == {p.name for p in GOLDEN_FILES}


@pytest.mark.parametrize("key", sorted(GROUPS), ids=lambda k: f"{k[0]}[{' '.join(Path(a).name for a in k[1])}]")
def test_every_golden_line_is_reproduced(ramjet_binary, key):
    _, args = key
    cases = GROUPS[key]
    chat = cases[0][2]
    inputs = [json.dumps(line["request"] if chat else line["text"], ensure_ascii=False) for _, line, _ in cases]
    rc, stdout, stderr = run(ramjet_binary, [*args, "--jsonl"], "\n".join(inputs) + "\n")
    assert rc == 0, stderr
    outputs = stdout.split("\n")[:-1]
    assert len(outputs) == len(cases), stderr
    for (where, line, chat), out in zip(cases, outputs):
        check(where, line, chat, json.loads(out))

    # The single-request mode (the whole of stdin is one request, or raw text) on the first line.
    where, line, chat = cases[0]
    stdin = json.dumps(line["request"], indent=1) if chat else line["text"]
    rc, stdout, stderr = run(ramjet_binary, args, stdin)
    assert rc == 0, stderr
    assert stdout.count("\n") == 1
    check(where, line, chat, json.loads(stdout))


def first_golden(name):
    return json.loads((TESTDATA / "goldens" / name).read_text(encoding="utf-8").split("\n")[0])


QWEN3_TOK = MODELS / "qwen3" / "tokenizer.json"
QWEN3_TPL = MODELS / "qwen3" / "chat_template.jinja"
HELLO = '{"messages": [{"role": "user", "content": "hi"}]}'


def test_explicit_tokenizer_config_supplies_the_special_tokens(ramjet_binary):
    line = first_golden("deepseek-v3.1.jsonl")
    req = json.dumps(line["request"])
    tpl = MODELS / line["template"]
    rc, out, err = run(ramjet_binary, ["--template", tpl, "--no-tokenize", "--tokenizer-config",
                                       MODELS / "deepseek-v3" / "tokenizer_config.json"], req)
    assert rc == 0, err
    assert json.loads(out) == {"rendered": line["rendered"]}
    # Without any tokenizer_config.json the template has no bos_token.
    rc, out, err = run(ramjet_binary, ["--template", tpl, "--no-tokenize"], req)
    assert rc == 0, err
    assert json.loads(out)["rendered"] != line["rendered"]


def test_help(ramjet_binary):
    rc, out, _ = run(ramjet_binary, ["--help"])
    assert rc == 0 and "ramjet render" in out and "--formatter" in out


ARG_ERRORS = [
    (["--tokenizer", "/nonexistent/tokenizer.json", "--template", QWEN3_TPL], "tokenizer error (io)"),
    (["--tokenizer", QWEN3_TOK, "--template", "/nonexistent/chat_template.jinja"], "template error (io)"),
    (["--template", QWEN3_TPL, "--no-tokenize", "--tokenizer-config", "/nonexistent/c.json"], "config error (io)"),
    (["--text", "--tokenizer", QWEN3_TOK, "--added-tokens", "/nonexistent/o.json"], "tokenizer error"),
    (["--tokenizer", QWEN3_TPL, "--text"], "tokenizer error (bad_json)"),
    (["--tokenizer", QWEN3_TOK, "--formatter", "llama-9"], "unknown formatter 'llama-9'"),
    (["--tokenizer", QWEN3_TOK, "--template", QWEN3_TPL, "--formatter", "deepseek-v32"], "exactly one of"),
    (["--tokenizer", QWEN3_TOK], "exactly one of"),
    (["--template", QWEN3_TPL], "--tokenizer is required"),
    (["--text"], "--text needs --tokenizer"),
    (["--text", "--tokenizer", QWEN3_TOK, "--template", QWEN3_TPL], "--text takes only"),
    (["--formatter", "deepseek-v32", "--no-tokenize", "--tokenizer-config", QWEN3_TPL], "--template only"),
    (["--formatter", "deepseek-v32", "--no-tokenize", "--bogus"], "unknown argument '--bogus'"),
    (["--formatter"], "--formatter needs a value"),
    (["--formatter", "deepseek-v32", "--formatter", "deepseek-v32", "--no-tokenize"], "given twice"),
    (["--added-tokens", QWEN3_TOK, "--formatter", "deepseek-v32", "--no-tokenize"], "--added-tokens needs --tokenizer"),
]


@pytest.mark.parametrize("args,message", ARG_ERRORS, ids=[m for _, m in ARG_ERRORS])
def test_bad_arguments_exit_2_with_a_typed_message(ramjet_binary, args, message):
    rc, out, err = run(ramjet_binary, args, HELLO)
    assert rc == 2, (rc, err)
    assert out == ""
    assert err.startswith("ramjet render: ") and message in err, err


def test_a_template_that_does_not_parse_exits_2(ramjet_binary, tmp_path):
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}{{ m.content }}")
    rc, out, err = run(ramjet_binary, ["--template", bad, "--no-tokenize"], HELLO)
    assert rc == 2 and out == ""
    assert "template error (syntax)" in err, err


@pytest.mark.parametrize("formatter", [["--template", QWEN3_TPL], ["--formatter", "deepseek-v32"]],
                         ids=["template", "deepseek-v32"])
@pytest.mark.parametrize("body", ['{"messages": [', "", "not json", "[1, 2]", '{"messages": 5}'],
                         ids=["truncated", "empty", "text", "array", "wrong-type"])
def test_malformed_requests_exit_1_with_a_typed_message(ramjet_binary, formatter, body):
    rc, out, err = run(ramjet_binary, [*formatter, "--tokenizer", QWEN3_TOK], body)
    assert rc == 1, (rc, err)
    assert out == ""
    assert re.match(r"ramjet render: render error \(\w+\): ", err), err


def test_a_raising_template_is_a_typed_render_error(ramjet_binary, tmp_path):
    tpl = tmp_path / "raise.jinja"
    tpl.write_text("{{ raise_exception('no system role here') }}")
    rc, out, err = run(ramjet_binary, ["--template", tpl, "--no-tokenize"], HELLO)
    assert rc == 1 and out == ""
    assert "render error (raised)" in err and "no system role here" in err, err


def test_invalid_utf8_text_is_a_tokenize_error(ramjet_binary):
    rc, out, err = run(ramjet_binary, ["--text", "--tokenizer", QWEN3_TOK], b"ok \xff\xfe")
    assert rc == 1 and out == ""
    assert "tokenize error (bad_input)" in err, err


def test_jsonl_reports_failed_lines_in_place_and_continues(ramjet_binary):
    stdin = "\n".join([HELLO, '{"messages": [', "", HELLO, '{"messages": 5}']) + "\n"
    rc, out, err = run(ramjet_binary, ["--template", QWEN3_TPL, "--tokenizer", QWEN3_TOK, "--jsonl"], stdin)
    assert rc == 1
    assert "2 of 4 input lines failed" in err, err
    lines = [json.loads(x) for x in out.splitlines()]
    assert len(lines) == 4  # the blank line is skipped
    assert lines[0] == lines[2] and lines[0]["rendered"].startswith("<|im_start|>user\nhi")
    for bad in (lines[1], lines[3]):
        assert set(bad) == {"error"} and bad["error"]["kind"] == "render" and bad["error"]["code"], bad

    rc, out, err = run(ramjet_binary, ["--text", "--tokenizer", QWEN3_TOK, "--jsonl"], '"hello"\n42\n"world"\n')
    assert rc == 1
    lines = [json.loads(x) for x in out.splitlines()]
    assert lines[1]["error"]["kind"] == "input" and lines[1]["error"]["code"] == "bad_json"
    assert "token_ids" in lines[0] and "token_ids" in lines[2]
