"""ramjet-companion end to end (issue 16): exact state that survives a ramjet restart.

Each ramjet-sim engine publishes vLLM's KV events with a short replay window (BUFFER batches). A
ramjet-companion started beside each engine follows its feed from the first event and keeps a
digest index; a ramjet started later, after the engines ran past their windows, cannot rebuild
exact state from the engines (it stays fenced) but can from the companions: it authenticates,
imports one snapshot per engine and follows the tail. These tests check that it is then exact, and
exact in the same way as a ramjet that followed the engines from the start; that every hostile or
broken peer (wrong secret or UID, a replayed challenge, a tampered, truncated or oversized frame,
a slow or vanishing client) is refused or fenced with a counter and never crashes either side; and
that companion and engine restarts fence and recover.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import signal
import socket
import struct
import threading
import time

import pytest

from support.companion_proc import CompanionProc, write_secret
from support.metric_docs import families_by_section
from support.ramjet_proc import http_request, poll
from support.sim_proc import SimProc
from test_exact_local import agent_chat
from test_kv_events import TOPIC, free_port, local, settle
from test_tokenizer import CTX, MODEL_ID, ROOT, TOK, TPL, VERSION, local_env, wait_attested

BUFFER = 8  # the engines' replay window (vLLM's buffer_steps), far shorter than the warm-up's history
HELLO_DOMAIN = b"ramjet:companion-hello:v1\0"


def kv_config(buffer_steps: int, live_port: int = 0, replay_port: int = 0) -> str:
    return json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "topic": TOPIC,
                       "endpoint": f"tcp://*:{live_port}", "replay_endpoint": f"tcp://*:{replay_port}",
                       "buffer_steps": buffer_steps})


def engine(buffer_steps: int = BUFFER, live_port: int = 0, replay_port: int = 0, port: int = 0) -> SimProc:
    """A sim with the real Qwen3 tokenizer and template (ramjet tokenizes locally and exactly)."""
    args = ["--speed", "50", "--tokenizer", TOK, "--chat-template", TPL, "--served-model-name", MODEL_ID,
            "--model", ROOT, "--max-model-len", str(CTX), "--engine-version", VERSION,
            "--kv-events-config", kv_config(buffer_steps, live_port, replay_port),
            "--enable-prompt-tokens-details", "--num-gpu-blocks-override", "16384"]
    if port:
        args += ["--port", str(port)]
    return SimProc(*args)


class Secrets:
    """One session secret and one digest secret shared by the companions and the ramjets."""

    def __init__(self, tmp_path):
        self.session_file = str(tmp_path / "session.key")
        self.digest_file = str(tmp_path / "digest.key")
        self.session = write_secret(self.session_file)
        self.digest = write_secret(self.digest_file)


def companion_for(sim: SimProc, keys: Secrets, *args: str, listen=None) -> CompanionProc:
    return CompanionProc(local(sim.kv_endpoint), "--kv-topic", TOPIC, *args, kv_replay=local(sim.kv_replay), listen=listen,
                         secret_file=keys.session_file, digest_secret_file=keys.digest_file)


def wait_companion(c: CompanionProc, timeout: float = 10) -> None:
    poll(lambda: c.health().get("status") == "ok", timeout, interval=0.05, what="the companion trusted")


def companion_env(tmp_path, keys: Secrets, companions, **extra) -> dict:
    # Placements are compared exact against exact: no request goes out on the fingerprints because
    # its tokens took longer than a share of its (tiny, simulated) prefill on a loaded machine.
    env = {"RJ_EXACT_TOKENS": "local", "RJ_AFFINITY": "prefix", "RJ_EXACT_INVENTORY": "companion",
           "RJ_EXACT_ROUTE_BUDGET_SHARE": "0",
           "RJ_COMPANION_ENDPOINTS": ",".join(c.endpoints[0] for c in companions),
           "RJ_COMPANION_SECRET_FILE": keys.session_file, "RJ_COMPANION_DIGEST_SECRET_FILE": keys.digest_file}
    env.update(extra)
    return local_env(tmp_path, mode="local", **env)


def events_env(tmp_path, sims, **extra) -> dict:
    return local_env(tmp_path, mode="local", RJ_EXACT_TOKENS="local", RJ_AFFINITY="prefix", RJ_EXACT_ROUTE_BUDGET_SHARE="0",
                     RJ_KV_EVENT_LIVE_ENDPOINTS=",".join(local(s.kv_endpoint) for s in sims),
                     RJ_KV_EVENT_REPLAY_ENDPOINTS=",".join(local(s.kv_replay) for s in sims),
                     RJ_KV_EVENT_TOPIC=TOPIC, RJ_KV_EVENT_TIMEOUT_MS="2000", **extra)


def trusted(rj, engines=None) -> bool:
    replicas = rj.health()[1]["replicas"]
    return all(replicas[i].get("kv_trusted") for i in (engines if engines is not None else range(len(replicas))))


def health(rj) -> list:
    return rj.health()[1]["replicas"]


def outcomes(rj, upstream: int) -> dict:
    return {l["outcome"]: v for l, v in rj.metrics().find("ramjet_companion_connections_total", upstream=str(upstream))}


def companion_outcomes(c: CompanionProc) -> dict:
    out = {}
    for line in c.metrics_text().splitlines():
        if line.startswith("ramjet_companion_client_connections_total{"):
            labels, value = line.rsplit(" ", 1)
            out[labels.split('outcome="', 1)[1].split('"', 1)[0]] = float(value)
    return out


def index_blocks(rj, upstream: int) -> tuple:
    m = rj.metrics()
    return (m.get("ramjet_kv_index_blocks", upstream=str(upstream)),
            m.get("ramjet_kv_index_resident_blocks", upstream=str(upstream)))


def warm(sim: SimProc, body: dict) -> None:
    r = sim.request("POST", "/v1/chat/completions", body)
    assert r.status == 200, r.body


def quiet(*rjs) -> None:
    """Until no KV batch reached any of the ramjets for a while, by their own events or companions."""
    settle(*rjs, metrics=("ramjet_kv_blocks_applied_total", "ramjet_companion_events_total"), interval=0.4)


def route(rj, body: dict):
    r = http_request(rj.api_port, "POST", "/v1/chat/completions", json.dumps(body).encode(),
                     {"Content-Type": "application/json"}, timeout=30)
    assert r.status == 200, r.body
    return r.header("X-Ramjet-Upstream"), r.header("X-Ramjet-Route")


def hello(secret: bytes, challenge: bytes) -> bytes:
    signed = b"RJHELO01" + struct.pack("<II", 1, 0) + challenge
    return signed + hmac.new(secret, HELLO_DOMAIN + signed, hashlib.sha256).digest()


def unix_client(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
    return s


def closed_by_peer(s: socket.socket, timeout: float = 5) -> bool:
    """True once the peer closed (reads until EOF or a reset)."""
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


@pytest.fixture
def fleet(tmp_path):
    """Three engines with short replay windows, a companion beside each from the engine's start."""
    keys = Secrets(tmp_path)
    sims, companions = [], []
    try:
        for _ in range(3):
            sims.append(engine())
            companions.append(companion_for(sims[-1], keys))
        for c in companions:
            wait_companion(c)
        yield keys, sims, companions
    finally:
        problems = [c.sanitizer_report() for c in companions if c.sanitizer_report()]
        for c in companions:
            c.stop()
        for s in sims:
            s.stop()
        assert not problems, problems[0][-3000:]


def test_a_restarted_ramjet_is_exact_within_seconds_and_decides_as_one_that_never_restarted(
        tmp_path, fleet, ramjet_factory):
    keys, sims, companions = fleet
    # The reference: a ramjet that follows the engines' own events from their first batch.
    ref = ramjet_factory([s.url for s in sims], env=events_env(tmp_path, sims))
    ref.wait_health(lambda c, j: all(r.get("kv_trusted") for r in j["replicas"]), 10, "reference trusted")
    wait_attested(ref, [0, 1, 2])
    # History longer than every replay window: agent prompts sent straight to the engines.
    for k in range(12):
        warm(sims[k % 3], agent_chat(k, "first question"))
    quiet(ref)
    for i, c in enumerate(companions):
        poll(lambda: c.health()["blocks"] == index_blocks(ref, i)[0], 10, what=f"companion {i} holds the engine's blocks")

    # A ramjet restarted without companions cannot rebuild exact state: the engines' windows no
    # longer start at their first batch.
    blind = ramjet_factory([s.url for s in sims], env=events_env(tmp_path, sims))
    time.sleep(3)
    assert not any(r.get("kv_trusted") for r in health(blind)), health(blind)
    assert blind.metrics().sum("ramjet_kv_fence_transitions_total", event="replay_failed") >= 3
    blind.terminate()
    blind.stop()

    # With companions: trusted within seconds of its start, from their snapshots (well under 2 s
    # alone; 4.5 s once in a full parallel run of the Debug+ASan suite, process start included).
    started = time.monotonic()
    rj = ramjet_factory([s.url for s in sims], env=companion_env(tmp_path, keys, companions), start=False)
    rj.start()
    poll(lambda: trusted(rj), 10, interval=0.02, what="every engine trusted through its companion")
    elapsed = time.monotonic() - started
    print(f"\ntrusted through companions {elapsed:.3f} s after the ramjet process was started")
    assert elapsed < 6.0, elapsed
    assert [r.get("inventory") for r in health(rj)] == ["companion"] * 3
    # Every documented family is on each /metrics: ramjet's companion series, the process's own.
    docs = families_by_section()
    on_ramjet = set(re.findall(r"^# TYPE (\S+) ", rj.metrics().text, re.M))
    assert docs["Companions"] <= on_ramjet, docs["Companions"] - on_ramjet
    on_companion = set(re.findall(r"^# TYPE (\S+) ", companions[0].metrics_text(), re.M))
    own = docs["ramjet-companion (its own --metrics endpoint)"]
    assert own and own <= on_companion, own - on_companion
    assert "127.0.0.1" not in rj.metrics().text and "/tmp" not in companions[0].metrics_text()
    m = rj.metrics()
    for i in range(3):
        assert m.get("ramjet_companion_trusted", upstream=str(i)) == 1
        assert m.get("ramjet_kv_inventory_source", upstream=str(i), source="companion") == 1
        assert outcomes(rj, i).get("snapshot", 0) >= 1
        assert index_blocks(rj, i) == index_blocks(ref, i), f"engine {i}: the digest index mirrors the raw one"
    wait_attested(rj, [0, 1, 2])

    # Same requests, same load: the same engine and the same predicted hit, exact both times. The
    # restarted ramjet places each first (the state both see is the engines' warm-up), then the
    # reference; a fully cached prompt leaves the engines' prompt blocks as they were.
    for k in range(12):
        got = route(rj, agent_chat(k, "first question"))
        quiet(ref, rj)
        want = route(ref, agent_chat(k, "first question"))
        quiet(ref, rj)
        assert got == want, (k, got, want)
        assert got[0] == str(k % 3) and got[1].startswith("exact; predicted_cached_tokens="), (k, got)
    # The tail keeps the two indexes equal as requests store new blocks through both.
    route(rj, agent_chat(0, "first question", "a second question that adds a few new blocks of its own"))
    quiet(ref, rj)
    for i in range(3):
        assert index_blocks(rj, i) == index_blocks(ref, i), f"engine {i} after the tail"
    assert rj.metrics().sum("ramjet_companion_events_total") > 0


def test_wrong_secret_wrong_uid_and_a_replayed_challenge_are_refused(tmp_path, fleet, ramjet_factory):
    keys, sims, companions = fleet
    # A ramjet with another session secret: every companion refuses its hello; it stays fenced.
    other = tmp_path / "other.key"
    write_secret(other)
    env = companion_env(tmp_path, keys, companions, RJ_COMPANION_SECRET_FILE=str(other))
    rj = ramjet_factory([s.url for s in sims], env=env)
    poll(lambda: all(companion_outcomes(c).get("bad_hello", 0) >= 1 for c in companions), 10,
         what="every companion refused the hello")
    assert not any(r.get("kv_trusted") for r in health(rj))
    assert rj.metrics().get("ramjet_companion_trusted", upstream="0") == 0
    rj.terminate()
    rj.stop()

    # A companion that allows only another UID closes a Unix peer before reading its hello.
    c = companion_for(sims[0], keys, "--allow-uid", str(os.geteuid() + 1))
    try:
        s = unix_client(c.socket_path)
        try:
            s.sendall(hello(keys.session, secrets.token_bytes(32)))
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed before the hello was even written: the refusal, seen sooner
        else:
            assert closed_by_peer(s)
        poll(lambda: companion_outcomes(c).get("uid", 0) >= 1, 5, what="refused by UID")
    finally:
        c.stop()

    # A hello seen before is refused even though it authenticates.
    c = companions[1]
    h = hello(keys.session, secrets.token_bytes(32))
    first = unix_client(c.socket_path)
    first.sendall(h)
    assert first.recv(8) == b"RJTAIL01"  # served: its snapshot frame begins
    again = unix_client(c.socket_path)
    again.sendall(h)
    assert closed_by_peer(again)
    poll(lambda: companion_outcomes(c).get("replayed_challenge", 0) >= 1, 5, what="replayed challenge refused")
    first.close()
    # And a secret file anyone may read is refused at startup.
    loose = tmp_path / "loose.key"
    write_secret(loose, mode=0o644)
    bad = CompanionProc(local(sims[2].kv_endpoint), secret_file=str(loose), digest_secret_file=keys.digest_file,
                        wait=False)
    try:
        assert bad.proc.wait(10) != 0
        assert "group or others" in bad.output()
    finally:
        bad.stop()


class Relay:
    """A TCP relay between ramjet and a companion's TCP endpoint that breaks the first `broken`
    connections in one way: flips one byte at `offset` of what the companion sends ("tamper"), or
    closes both sides after `offset` bytes ("truncate"). Later connections pass untouched."""

    def __init__(self, target_port: int, mode: str, offset: int, broken: int = 1):
        self.target_port, self.mode, self.offset, self.broken = target_port, mode, offset, broken
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            broken = self.connections <= self.broken
            up = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pipe, args=(down, up, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, down, broken), daemon=True).start()

    def _pipe(self, src, dst, broken):
        seen = 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if broken and self.mode == "truncate" and seen + len(data) >= self.offset:
                    dst.sendall(data[:self.offset - seen])
                    break
                if broken and self.mode == "tamper" and seen <= self.offset < seen + len(data):
                    i = self.offset - seen
                    data = data[:i] + bytes([data[i] ^ 0x40]) + data[i + 1:]
                seen += len(data)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def stop(self):
        self.stopped = True
        self.listener.close()


class OversizedCompanion:
    """A fake companion that reads the hello and answers with a frame header claiming 1 GiB."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                s, _ = self.listener.accept()
            except OSError:
                return
            try:
                s.settimeout(5)
                s.recv(80)
                s.sendall(b"RJTAIL01" + struct.pack("<BBHIQQ", 1, 1, 0, 1 << 30, 0, 0))
                time.sleep(0.5)
            except OSError:
                pass
            s.close()

    def stop(self):
        self.listener.close()


@pytest.mark.parametrize("mode,offset,outcome", [("tamper", 200, "bad_mac"), ("truncate", 100, "eof")])
def test_a_tampered_or_truncated_stream_fences_the_engine_and_a_clean_one_recovers(
        tmp_path, fleet, ramjet_factory, mode, offset, outcome):
    keys, sims, companions = fleet
    tcp_port = free_port()
    c = companion_for(sims[0], keys, listen=[f"tcp://127.0.0.1:{tcp_port}"])
    relay = Relay(tcp_port, mode, offset)
    try:
        wait_companion(c)
        for k in range(3):
            warm(sims[0], agent_chat(k, "first question"))
        poll(lambda: c.health()["blocks"] > 0, 10, what="blocks in the companion")
        env = local_env(tmp_path, mode="local", RJ_EXACT_TOKENS="local", RJ_EXACT_INVENTORY="companion",
                        RJ_COMPANION_ENDPOINTS=f"tcp://127.0.0.1:{relay.port}",
                        RJ_COMPANION_SECRET_FILE=keys.session_file, RJ_COMPANION_DIGEST_SECRET_FILE=keys.digest_file)
        rj = ramjet_factory([sims[0].url], env=env)
        poll(lambda: outcomes(rj, 0).get(outcome, 0) >= 1, 10, what=f"outcome {outcome}")
        poll(lambda: trusted(rj), 10, what="trusted again over a clean connection")
        assert outcomes(rj, 0).get("snapshot", 0) >= 1
        assert index_blocks(rj, 0)[0] == c.health()["blocks"]
        assert relay.connections >= 2
    finally:
        relay.stop()
        c.stop()


def test_an_oversized_frame_is_refused_before_it_is_read(tmp_path, fleet, ramjet_factory):
    keys, sims, _ = fleet
    fake = OversizedCompanion()
    try:
        env = local_env(tmp_path, mode="local", RJ_EXACT_TOKENS="local", RJ_EXACT_INVENTORY="companion",
                        RJ_COMPANION_ENDPOINTS=f"tcp://127.0.0.1:{fake.port}",
                        RJ_COMPANION_SECRET_FILE=keys.session_file, RJ_COMPANION_DIGEST_SECRET_FILE=keys.digest_file)
        rj = ramjet_factory([sims[0].url], env=env)
        poll(lambda: outcomes(rj, 0).get("oversized", 0) >= 2, 10, what="oversized frames refused (and retried)")
        assert not trusted(rj)
        assert rj.request("GET", "/health").status in (200, 503)
    finally:
        fake.stop()


def test_a_slow_client_and_one_that_leaves_mid_snapshot_do_not_disturb_ramjet(tmp_path, fleet, ramjet_factory):
    keys, sims, _ = fleet
    # 256 KiB: the sleeper passes it within a few prompts, a reading ramjet never does (even on a
    # loaded machine).
    c = companion_for(sims[0], keys, "--client-send-buffer", "262144")
    try:
        wait_companion(c)
        warm(sims[0], agent_chat(0, "first question"))
        env = local_env(tmp_path, mode="local", RJ_EXACT_TOKENS="local", RJ_EXACT_INVENTORY="companion",
                        RJ_COMPANION_ENDPOINTS=c.endpoints[0],
                        RJ_COMPANION_SECRET_FILE=keys.session_file, RJ_COMPANION_DIGEST_SECRET_FILE=keys.digest_file)
        rj = ramjet_factory([sims[0].url], env=env)
        poll(lambda: trusted(rj), 10, what="ramjet trusted")
        # One client reads 10 bytes of its snapshot and leaves; another never reads at all.
        leaver = unix_client(c.socket_path)
        leaver.sendall(hello(keys.session, secrets.token_bytes(32)))
        assert len(leaver.recv(10)) > 0
        leaver.close()
        sleeper = unix_client(c.socket_path)
        sleeper.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sleeper.sendall(hello(keys.session, secrets.token_bytes(32)))
        for k in range(1, 15):  # tail traffic the sleeper does not read
            warm(sims[0], agent_chat(k, "first question"))
        # (10 s of lag drops it; the margin is for a loaded machine: missed once past 15 s in a -j2 run)
        poll(lambda: companion_outcomes(c).get("slow_client", 0) >= 1, 30, what="the slow client dropped")
        quiet(rj)
        assert trusted(rj), "ramjet kept its connection"
        assert outcomes(rj, 0).get("snapshot") == 1, outcomes(rj, 0)
        assert index_blocks(rj, 0)[0] == c.health()["blocks"]
        sleeper.close()
    finally:
        c.stop()


def test_companion_and_engine_restarts_fence_and_recover(tmp_path, ramjet_factory):
    keys = Secrets(tmp_path)
    live, replay = free_port(), free_port()
    sim = engine(buffer_steps=1000, live_port=live, replay_port=replay)
    sock = str(tmp_path / "c.sock")
    c = companion_for(sim, keys, listen=[f"unix:{sock}"])
    try:
        wait_companion(c)
        warm(sim, agent_chat(0, "first question"))
        env = local_env(tmp_path, mode="local", RJ_EXACT_TOKENS="local", RJ_EXACT_INVENTORY="companion",
                        RJ_COMPANION_ENDPOINTS=f"unix:{sock}", RJ_COMPANION_SECRET_FILE=keys.session_file,
                        RJ_COMPANION_DIGEST_SECRET_FILE=keys.digest_file)
        rj = ramjet_factory([sim.url], env=env)
        poll(lambda: trusted(rj) and index_blocks(rj, 0)[0] > 0, 10, what="trusted with blocks")
        blocks = index_blocks(rj, 0)[0]

        # The companion restarts: ramjet fences at once (shutdown), and is trusted again from the
        # new companion's snapshot (rebuilt from the engine's replay window, still whole here).
        c.stop()
        poll(lambda: not trusted(rj), 5, what="fenced while the companion is away")
        assert outcomes(rj, 0).get("disconnect_shutdown", 0) + outcomes(rj, 0).get("eof", 0) >= 1
        c = companion_for(sim, keys, listen=[f"unix:{sock}"])
        poll(lambda: trusted(rj), 10, what="trusted through the new companion")
        assert index_blocks(rj, 0)[0] == blocks

        # The engine restarts under the live companion: its new publisher starts from 0 with an
        # empty cache; ramjet is reset, then trusted again with the empty state, then follows.
        sim.proc.send_signal(signal.SIGKILL)
        sim.proc.wait(10)
        poll(lambda: not trusted(rj), 10, what="fenced while the engine is away")
        sim = engine(buffer_steps=1000, live_port=live, replay_port=replay, port=sim.port)
        poll(lambda: trusted(rj), 15, what="trusted after the engine restart")
        assert index_blocks(rj, 0)[0] == 0
        warm(sim, agent_chat(1, "first question"))
        poll(lambda: index_blocks(rj, 0)[0] == c.health()["blocks"] > 0, 10, what="the tail after the restart")
        assert outcomes(rj, 0).get("disconnect_reset", 0) >= 1
        assert not c.sanitizer_report()
    finally:
        c.stop()
        sim.stop()
