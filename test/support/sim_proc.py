"""Starts ramjet-sim processes for end-to-end tests (standard library only).

SimProc runs the binary on 127.0.0.1 with an ephemeral port (read back from the
`ramjet-sim listening port=N ...` line on stdout) and stops it at teardown.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from typing import Optional

from support.ramjet_proc import http_request

DEFAULT_SIM = "/work/main/build/dev/sim/server/ramjet-sim"
LINE_RE = re.compile(r"ramjet-sim listening port=(\d+).* kv_endpoint=(\S+) kv_replay=(\S+)")


def sim_bin() -> str:
    return os.environ.get("SIM_BIN", DEFAULT_SIM)


class SimProc:
    def __init__(self, *args: str, binary: Optional[str] = None, wait_ready: bool = True,
                 env: Optional[dict] = None):
        """`env`: variables added to the sim's environment (VLLM_SERVER_DEV_MODE=1: sleep mode)."""
        self.args = ["--host", "127.0.0.1", "--port", "0", *args]
        self.proc = subprocess.Popen([binary or sim_bin(), *self.args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1,
                                     env={**os.environ, **env} if env else None)
        self.lines: list[str] = []
        self.port = 0
        self.kv_endpoint = self.kv_replay = "-"
        ready = threading.Event()

        def pump():
            for line in self.proc.stdout:
                self.lines.append(line)
                m = LINE_RE.search(line)
                if m and not ready.is_set():
                    self.port = int(m.group(1))
                    self.kv_endpoint, self.kv_replay = m.group(2), m.group(3)
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(15):
            self.stop()
            raise RuntimeError("ramjet-sim did not start: " + "".join(self.lines)[-2000:])
        if wait_ready:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    if http_request(self.port, "GET", "/health", timeout=1).status == 200:
                        break
                except OSError:
                    time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, body=None, headers=None, timeout: float = 30.0):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        return http_request(self.port, method, path, body, headers, timeout=timeout)

    def admin(self, path: str, body: dict) -> dict:
        r = self.request("POST", path, body)
        assert r.status == 200, r.body
        return json.loads(r.body)

    def output(self) -> str:
        return "".join(self.lines)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def kv_events_config(topic: str = "kv", buffer_steps: int = 1000) -> str:
    """--kv-events-config for a sim: vLLM's ZMQ publisher and replay on ephemeral ports."""
    return json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "topic": topic,
                       "endpoint": "tcp://*:0", "replay_endpoint": "tcp://*:0", "buffer_steps": buffer_steps})


def kv_event_env(sims, topic: str = "kv") -> dict:
    """ramjet's settings to follow every sim's KV events (live and replay, on loopback)."""
    def local(endpoint: str) -> str:
        return "tcp://127.0.0.1:" + endpoint.rsplit(":", 1)[1]
    return {"RJ_KV_EVENT_LIVE_ENDPOINTS": ",".join(local(s.kv_endpoint) for s in sims),
            "RJ_KV_EVENT_REPLAY_ENDPOINTS": ",".join(local(s.kv_replay) for s in sims),
            "RJ_KV_EVENT_TOPIC": topic}
