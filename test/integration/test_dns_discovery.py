"""Engines that come and go at runtime (issue 14): discovery from DNS and configuration reloads.

A real DNS server on loopback (Debian's dnsmasq, answering from a hosts file it re-reads on
SIGHUP) names ramjet-sim engines on 127.0.0.2, 127.0.0.3, ... on one port; ramjet asks it every
200 ms (RJ_UPSTREAM_DNS_SERVER). Engines are added and removed while traffic flows: no request
fails, a new engine passes the readiness gate before it takes traffic, a removed one finishes
what it has in flight and its ordinal is freed (no series left), an engine that comes back gets
its old ordinal. RJ_CONFIG_FILE reloads on SIGHUP: engines added and removed, weights applied,
a broken file keeps the running configuration.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

from support.ramjet_proc import http_request
from support.sim_proc import SimProc

DNSMASQ = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"
pytestmark = pytest.mark.skipif(not os.path.exists(DNSMASQ), reason="dnsmasq not installed (scripts/setup)")

NAME = "engines.ramjet.test"


def free_port(*hosts) -> int:
    """A TCP port free on every one of `hosts` (the engines share one port, as pods do)."""
    for _ in range(50):
        s = socket.socket()
        s.bind((hosts[0], 0))
        port = s.getsockname()[1]
        s.close()
        ok = True
        for h in hosts:
            t = socket.socket()
            try:
                t.bind((h, port))
            except OSError:
                ok = False
            finally:
                t.close()
        if ok:
            return port
    raise RuntimeError("no common free port")


def dns_port() -> int:
    """A port free for both UDP and TCP on 127.0.0.1 (dnsmasq listens on both)."""
    while True:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("127.0.0.1", 0))
        port = u.getsockname()[1]
        t = socket.socket()
        try:
            t.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            t.close()
            u.close()


class Dns:
    """dnsmasq on 127.0.0.1:<port> answering NAME from a hosts file."""

    def __init__(self, tmp_path):
        self.hosts = tmp_path / "hosts"
        self.hosts.write_text("")
        os.chmod(self.hosts, 0o644)
        for _ in range(5):  # another process may take the port between the check and dnsmasq's bind
            if self._start():
                return
        raise RuntimeError("dnsmasq did not start: " + self.error)

    def _start(self) -> bool:
        self.port = dns_port()
        self.proc = subprocess.Popen(
            [DNSMASQ, "--keep-in-foreground", "--no-resolv", "--no-hosts", "--conf-file=/dev/null",
             f"--port={self.port}", "--listen-address=127.0.0.1", "--bind-interfaces",
             f"--addn-hosts={self.hosts}", "--local=/ramjet.test/", "--local-ttl=0", "--user=root", "--pid-file="],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # until it has bound
            if self.proc.poll() is not None:
                self.error = self.proc.stderr.read()
                return False
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                s.bind(("127.0.0.1", self.port))
            except OSError:
                return True  # bound by dnsmasq
            finally:
                s.close()
            time.sleep(0.05)
        self.proc.kill()
        self.error = "no bind within 5 s"
        return False

    @property
    def server(self) -> str:
        return f"127.0.0.1:{self.port}"

    def answer(self, *addresses):
        self.hosts.write_text("".join(f"{a} {NAME}\n" for a in addresses))
        self.proc.send_signal(signal.SIGHUP)  # re-reads --addn-hosts

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(5)


@pytest.fixture
def dns(tmp_path):
    d = Dns(tmp_path)
    yield d
    d.stop()


@pytest.fixture
def sims():
    made = []

    def make(host: str, port: int, *args):
        s = SimProc("--host", host, "--port", str(port), *args, wait_ready=False)
        made.append(s)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                c = socket.create_connection((host, port), timeout=1)
                c.close()
                break
            except OSError:
                time.sleep(0.05)
        return s

    yield make
    for s in made:
        s.stop()


def chat(content="hello", max_tokens=4):
    return {"model": "ramjet-sim", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}


def replicas(rj):
    return {r["index"]: r for r in rj.health()[1]["replicas"]}


def wait_for(what, predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def dns_ramjet(ramjet_factory, dns, port, **env):
    """ramjet with its engines from NAME:port as `dns` answers it (every 200 ms), once engine 0 serves."""
    rj = ramjet_factory(env={"RJ_UPSTREAM_DNS": f"{NAME}:{port}", "RJ_UPSTREAM_DNS_SERVER": dns.server,
                             "RJ_UPSTREAM_DNS_INTERVAL_MS": "200", **env})
    wait_for("engine 0 healthy (through the readiness gate)", lambda: replicas(rj).get(0, {}).get("healthy"))
    return rj


class Traffic:
    """Requests in a loop on a thread; every status and serving ordinal is kept."""

    def __init__(self, rj):
        self.rj = rj
        self.results = []
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        n = 0
        while not self.stop_flag.is_set():
            n += 1
            try:
                r = self.rj.chat(chat(f"turn {n} " + "x" * 64), timeout=10)
                self.results.append((r.status, r.upstream))
            except OSError as e:
                self.results.append((0, repr(e)))

    def stop(self):
        self.stop_flag.set()
        self.thread.join(15)
        return self.results


def series(rj, name, **labels):
    m = rj.metrics()
    return m.get(name, **labels) if labels else m.get(name)


def test_engines_join_and_leave_with_the_dns_answers_while_traffic_flows(dns, sims, ramjet_factory):
    port = free_port("127.0.0.2", "127.0.0.3")
    sims("127.0.0.2", port)
    sims("127.0.0.3", port)
    dns.answer("127.0.0.2")
    rj = dns_ramjet(ramjet_factory, dns, port, RJ_PROBE_INTERVAL_MS="100", RJ_READY_SUCCESSES="2",
                    RJ_READY_STABLE_SECONDS="1", RJ_UPSTREAM_MAX="4")
    traffic = Traffic(rj)
    try:
        dns.answer("127.0.0.2", "127.0.0.3")
        # Listed, but not serving until it passed the readiness gate (2 probes + 1 s).
        seen = wait_for("the new engine listed", lambda: replicas(rj).get(1))
        assert seen["healthy"] is False, seen
        wait_for("the new engine healthy", lambda: replicas(rj).get(1, {}).get("healthy"))
        before_gate = [u for s, u in traffic.results]
        wait_for("traffic on both", lambda: {"0", "1"} <= {u for s, u in traffic.results[len(before_gate):]})
        # The first engine leaves; the second keeps ordinal 1.
        dns.answer("127.0.0.3")
        wait_for("engine 0 gone from /health", lambda: 0 not in replicas(rj))
        mark = len(traffic.results)
        time.sleep(0.5)
        assert {u for s, u in traffic.results[mark:]} == {"1"}
        # It comes back: its old ordinal, through the gate again.
        dns.answer("127.0.0.3", "127.0.0.2")
        wait_for("engine 0 back and healthy", lambda: replicas(rj).get(0, {}).get("healthy"))
    finally:
        results = traffic.stop()
    failed = [r for r in results if r[0] != 200]
    assert not failed, f"{len(failed)} of {len(results)} requests failed: {failed[:5]}"
    assert len(results) > 20
    m = rj.metrics()
    assert m.get("ramjet_upstream_membership_changes_total", change="joined") == 3
    assert m.get("ramjet_upstream_membership_changes_total", change="vacated") == 1
    assert m.get("ramjet_upstream_dns_lookups_total", outcome="ok") > 5
    assert m.get("ramjet_upstream_members", state="active") == 2
    # A vacant ordinal has no series; no hostname or address anywhere in the log.
    text = http_request(rj.metrics_port, "GET", "/metrics").body.decode()
    assert 'upstream="2"' not in text and 'upstream="3"' not in text
    assert NAME not in rj.output() and "127.0.0.2" not in rj.output() and "127.0.0.3" not in rj.output()


def test_a_leaving_engine_finishes_its_stream_then_its_ordinal_is_freed(dns, sims, ramjet_factory):
    port = free_port("127.0.0.2", "127.0.0.3")
    sims("127.0.0.2", port, "--fault-slow-ms", "10")  # 400 tokens: about 4 s
    sims("127.0.0.3", port)
    dns.answer("127.0.0.2")
    rj = dns_ramjet(ramjet_factory, dns, port, RJ_UPSTREAM_MAX="4")
    out = {}

    def long_stream():
        body = chat("a long answer", max_tokens=400)
        body["stream"] = True
        body["ignore_eos"] = True
        out["r"] = rj.chat(body, timeout=60)

    t = threading.Thread(target=long_stream)
    t.start()
    wait_for("the stream in flight", lambda: replicas(rj).get(0, {}).get("inflight") == 1)
    dns.answer("127.0.0.3")
    leaving = wait_for("engine 0 leaving", lambda: replicas(rj).get(0, {}).get("leaving"))
    assert leaving
    assert replicas(rj)[0]["healthy"] is False  # no new requests
    t.join(60)
    r = out["r"]
    assert r.status == 200 and r.upstream == "0"
    assert b"data: [DONE]" in r.body  # the whole stream, not cut
    wait_for("engine 0 vacated", lambda: 0 not in replicas(rj))
    assert rj.chat(chat()).upstream == "1"


def test_a_failed_lookup_keeps_the_engines(dns, sims, ramjet_factory):
    port = free_port("127.0.0.2")
    sims("127.0.0.2", port)
    dns.answer("127.0.0.2")
    rj = dns_ramjet(ramjet_factory, dns, port)
    dns.stop()  # no answers at all: timeouts
    wait_for("a failed lookup", lambda: rj.metrics().get("ramjet_upstream_dns_lookups_total", outcome="error") >= 1,
             timeout=20)
    assert replicas(rj)[0]["healthy"] is True
    assert rj.chat(chat()).status == 200


def test_an_answer_larger_than_the_cap_is_logged_when_it_changes_not_every_lookup(dns, sims, ramjet_factory):
    """A DNS name answering more addresses than RJ_UPSTREAM_MAX: lookup after lookup (every 200 ms)
    the same addresses get no ordinal. One log line per change and a gauge, not one per address
    per lookup (the issue saw 35,872 warning lines in 30 s)."""
    port = free_port("127.0.0.2")
    sims("127.0.0.2", port)
    dns.answer("127.0.0.2", *[f"127.0.1.{i}" for i in range(1, 9)])  # 9 addresses, 2 ordinals
    rj = dns_ramjet(ramjet_factory, dns, port, RJ_UPSTREAM_MAX="2")
    wait_for("seven rejected", lambda: series(rj, "ramjet_upstream_rejected_addresses") == 7)
    lookups = series(rj, "ramjet_upstream_dns_lookups_total", outcome="ok")
    wait_for("ten more lookups", lambda: series(rj, "ramjet_upstream_dns_lookups_total", outcome="ok") >= lookups + 10,
             timeout=20)
    lines = [l for l in rj.output().splitlines() if "get no ordinal" in l]
    assert len(lines) == 1, lines
    assert series(rj, "ramjet_upstream_membership_changes_total", change="rejected") == 7
    # Fewer addresses: a change, logged once; none rejected: logged once more.
    dns.answer("127.0.0.2", "127.0.1.1", "127.0.1.2")
    wait_for("one rejected", lambda: series(rj, "ramjet_upstream_rejected_addresses") == 1)
    dns.answer("127.0.0.2")
    wait_for("none rejected", lambda: series(rj, "ramjet_upstream_rejected_addresses") == 0)
    assert len([l for l in rj.output().splitlines() if "get no ordinal" in l]) == 2
    assert len([l for l in rj.output().splitlines() if "has an ordinal again" in l]) == 1
    assert "127.0.1." not in rj.output() and NAME not in rj.output()
    assert rj.chat(chat()).status == 200


def test_an_empty_answer_removes_the_engines(dns, sims, ramjet_factory):
    port = free_port("127.0.0.2")
    sims("127.0.0.2", port)
    dns.answer("127.0.0.2")
    rj = dns_ramjet(ramjet_factory, dns, port)
    dns.answer()  # the name has no address any more
    wait_for("no engine", lambda: not replicas(rj))
    r = rj.chat(chat())
    assert r.status == 503 and r.json()["error"]["type"] == "no_healthy_upstream"
    assert rj.health()[0] == 503


def test_sighup_reloads_the_engine_list_and_weights_from_the_config_file(tmp_path, sims, ramjet_factory):
    port = free_port("127.0.0.2", "127.0.0.3")
    sims("127.0.0.2", port)
    sims("127.0.0.3", port)
    conf = tmp_path / "ramjet.env"
    conf.write_text(f"# engines\nRJ_UPSTREAM=http://127.0.0.2:{port}\nRJ_ROUTE_ALPHA=4\n")
    rj = ramjet_factory(env={"RJ_CONFIG_FILE": str(conf)})
    wait_for("engine 0 healthy", lambda: replicas(rj).get(0, {}).get("healthy"))

    def hup_and_wait(count_label, before):
        rj.proc.send_signal(signal.SIGHUP)
        return wait_for("the reload", lambda: rj.metrics().get("ramjet_config_reloads_total", outcome=count_label) > before)

    conf.write_text(f"RJ_UPSTREAM=http://127.0.0.2:{port},http://127.0.0.3:{port}\nRJ_ROUTE_ALPHA=2\n"
                    "RJ_MAX_TOKENS_STRIP=5000\nRJ_LOG_LEVEL=debug\nRJ_THREADS=1\nRJ_ROUTE_CHUNK_BYTES=4096\n")
    hup_and_wait("applied", 0)
    wait_for("engine 1 healthy", lambda: replicas(rj).get(1, {}).get("healthy"))
    assert "RJ_MAX_TOKENS_STRIP changed; it takes effect after a restart" in rj.output()
    # The fingerprints' chunk size is fixed for the process (the index holds chunks of it).
    assert "RJ_ROUTE_CHUNK_BYTES changed; it takes effect after a restart" in rj.output()
    # The environment wins over the file (the test harness sets RJ_THREADS): said, not applied.
    assert "RJ_THREADS is set in the environment too" in rj.output()
    assert rj.alive()  # a new RJ_LOG_LEVEL is applied in place (making the logger again aborted)
    # A broken file: nothing changes, every problem is named (by line, never by value).
    conf.write_text(f"RJ_UPSTREAM=http://127.0.0.3:{port}\nRJ_ROUTE_ALPHA=-1\nnot a line\n"
                    "RJ_UPSTREAM_TOKEN: c2VjcmV0=\n")
    hup_and_wait("invalid", 0)
    assert set(replicas(rj)) == {0, 1}
    assert "line 3" in rj.output() and "line 4" in rj.output() and "RJ_ROUTE_ALPHA" in rj.output()
    assert "c2VjcmV0" not in rj.output()  # a malformed line is named by number, never repeated
    # Engine 0 removed: it leaves; engine 1 keeps its ordinal.
    conf.write_text(f"RJ_UPSTREAM=http://127.0.0.3:{port}\n")
    hup_and_wait("applied", 1)
    wait_for("engine 0 gone", lambda: 0 not in replicas(rj))
    statuses = {rj.chat(chat()).upstream for _ in range(4)}
    assert statuses == {"1"}


def test_a_dns_names_engines_with_data_parallel_ranks_join_and_leave_rank_by_rank_together(dns, sims, ramjet_factory):
    """RJ_UPSTREAM_DP_SIZE for a DNS name: each address is an engine of that many ranks (an
    ordinal each, X-Data-Parallel-Rank on every request); its ranks join and leave together (and,
    membership_test: all or none when ordinals are short)."""
    port = free_port("127.0.0.2", "127.0.0.3")
    sims("127.0.0.2", port, "--data-parallel-size", "2")
    sims("127.0.0.3", port, "--data-parallel-size", "2")
    dns.answer("127.0.0.2")
    rj = dns_ramjet(ramjet_factory, dns, port, RJ_UPSTREAM_DP_SIZE="2", RJ_PROBE_INTERVAL_MS="100",
                    RJ_READY_SUCCESSES="2", RJ_READY_STABLE_SECONDS="0", RJ_UPSTREAM_MAX="5")
    wait_for("both ranks healthy", lambda: all(replicas(rj).get(k, {}).get("healthy") for k in (0, 1)))
    assert {k: r.get("dp_rank") for k, r in replicas(rj).items()} == {0: 0, 1: 1}
    dns.answer("127.0.0.2", "127.0.0.3")
    wait_for("the second engine's ranks healthy", lambda: all(replicas(rj).get(k, {}).get("healthy") for k in (2, 3)))
    assert {k: r.get("dp_rank") for k, r in replicas(rj).items()} == {0: 0, 1: 1, 2: 0, 3: 1}
    m = rj.metrics()
    assert [m.get("ramjet_upstream_dp_rank", upstream=str(u), engine=e) for u, e in
            (("0", "0"), ("1", "0"), ("2", "2"), ("3", "2"))] == [0, 1, 0, 1]
    served = {rj.chat(chat(f"dp {i}")).upstream for i in range(12)}
    assert served == {"0", "1", "2", "3"}, served
    # The first engine goes: both its ranks leave.
    dns.answer("127.0.0.3")
    wait_for("engine 127.0.0.2's ranks gone", lambda: set(replicas(rj)) == {2, 3})
    # Back once its ordinals are freed: its old ones.
    dns.answer("127.0.0.3", "127.0.0.2")
    wait_for("its ranks back", lambda: set(replicas(rj)) == {0, 1, 2, 3})
    assert {k: r.get("dp_rank") for k, r in replicas(rj).items()} == {0: 0, 1: 1, 2: 0, 3: 1}
    assert rj.metrics().get("ramjet_upstream_rejected_addresses") == 0


def test_a_dns_names_engines_with_auto_ranks_each_get_the_ranks_they_report(dns, sims, ramjet_factory):
    """RJ_UPSTREAM_DP_SIZE=auto for a DNS name: each address joins as one target, then as many
    ranks as its own /metrics reports (here 2 and 4), each pinned by X-Data-Parallel-Rank."""
    port = free_port("127.0.0.2", "127.0.0.3")
    sims("127.0.0.2", port, "--data-parallel-size", "2")
    sims("127.0.0.3", port, "--data-parallel-size", "4")
    dns.answer("127.0.0.2", "127.0.0.3")
    rj = ramjet_factory(env={"RJ_UPSTREAM_DNS": f"{NAME}:{port}", "RJ_UPSTREAM_DNS_SERVER": dns.server,
                             "RJ_UPSTREAM_DNS_INTERVAL_MS": "200", "RJ_UPSTREAM_DP_SIZE": "auto",
                             "RJ_ENGINE_SCRAPE_INTERVAL_MS": "200", "RJ_PROBE_INTERVAL_MS": "100",
                             "RJ_READY_SUCCESSES": "2", "RJ_READY_STABLE_SECONDS": "0"})

    def ranks():
        reps = replicas(rj).values()
        return (all(r.get("healthy") for r in reps) and
                sorted(r.get("dp_rank", -1) for r in reps) == [0, 0, 1, 1, 2, 3])
    wait_for("2 + 4 reported ranks, healthy", ranks)
    served = {rj.chat(chat(f"auto dp {i}")).upstream for i in range(24)}
    assert len(served) >= 4, served
    assert rj.metrics().get("ramjet_upstream_rejected_addresses") == 0
