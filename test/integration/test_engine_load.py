"""Several routers in front of the same engines: each ramjet counts the load the others put there.

Two ramjet processes share two ramjet-sim engines. Router B keeps engine 0 busy with long
streams; router A never sent them, so its own reservations say engine 0 is idle. With
RJ_ROUTE_ENGINE_LOAD on (the default), A reads the engines' own vllm:num_requests_running /
_waiting (every RJ_ENGINE_SCRAPE_INTERVAL_MS), subtracts its own in-flight requests, and counts
the rest as foreign load units (ramjet_upstream_foreign_load_units, the journal's
candidates[].foreign_load_units): its requests go to engine 1. Off, A rotates onto the busy
engine. A's own requests are never counted twice.
"""

from __future__ import annotations

import json
import time

import pytest

from support.e2e import CHAT, open_stream
from support.ramjet_proc import http_request, poll
from support.sim_proc import SimProc

# Real time (tiny preset: 2 ms decode steps), so long streams stay open while the test looks.
SLOW = ("--preset", "tiny", "--speed", "1", "--enable-prompt-tokens-details")
SCRAPE = {"RJ_ENGINE_SCRAPE_INTERVAL_MS": "100"}
FOREIGN = "ramjet_upstream_foreign_load_units"


@pytest.fixture
def sims():
    made = [SimProc(*SLOW), SimProc(*SLOW)]
    yield made
    for s in made:
        s.stop()


def chat_body(tag: str, max_tokens: int, stream: bool) -> dict:
    return {"model": "ramjet-sim", "stream": stream, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": f"{tag}: " + " ".join(f"{tag}{i}" for i in range(40))}]}


def long_streams(port: int, n: int, tag: str) -> list:
    """n streaming requests that decode for several seconds (heads read, bodies left unread)."""
    out = []
    for i in range(n):
        c = open_stream(port, CHAT, chat_body(f"{tag}{i}", 4000, True), timeout=30)
        assert c.status == 200, c.status
        out.append(c)
    return out


def short_requests(rj, n: int, tag: str) -> list:
    """n short requests, one after another, each with a new prompt; the ordinals that served them."""
    ups = []
    for i in range(n):
        r = http_request(rj.api_port, "POST", CHAT, json.dumps(chat_body(f"{tag}{i}", 4, False)).encode(),
                         {"Content-Type": "application/json"}, timeout=30)
        assert r.status == 200, r
        ups.append(r.header("X-Ramjet-Upstream"))
    return ups


def foreign(rj, upstream: int):
    return rj.metrics().get(FOREIGN, upstream=upstream)


def test_a_router_keeps_its_requests_off_an_engine_another_router_keeps_busy(sims, ramjet_factory):
    a = ramjet_factory([s.url for s in sims], env=SCRAPE)
    b = ramjet_factory([sims[0].url])  # another router; its requests can only go to engine 0
    streams = long_streams(b.api_port, 3, "b")
    try:
        poll(lambda: (foreign(a, 0) or 0) >= 3, 10, what="A sees B's three streams on engine 0")
        assert foreign(a, 1) == 0
        served = short_requests(a, 6, "a")
        assert served == ["1"] * 6, served
    finally:
        for c in streams:
            c.close()
    # B cancels its streams, the engine drops them: nothing foreign is left.
    poll(lambda: foreign(a, 0) == 0, 10, what="foreign load gone with B's streams")


def test_with_engine_load_off_a_router_rotates_onto_the_engine_another_router_keeps_busy(sims, ramjet_factory):
    a = ramjet_factory([s.url for s in sims], env={**SCRAPE, "RJ_ROUTE_ENGINE_LOAD": "off"})
    b = ramjet_factory([sims[0].url])
    streams = long_streams(b.api_port, 3, "b")
    try:
        # A does scrape the engines (it sees B's requests) but does not route on them.
        poll(lambda: (a.metrics().get("ramjet_engine_requests_running", upstream=0) or 0) >= 3, 10,
             what="A's scrape sees B's streams")
        assert not a.metrics().has(FOREIGN)
        served = short_requests(a, 6, "a")
        assert served.count("0") >= 2, served
    finally:
        for c in streams:
            c.close()


def test_a_routers_own_requests_are_not_counted_as_foreign(sims, ramjet_factory):
    a = ramjet_factory([s.url for s in sims], env=SCRAPE)
    streams = long_streams(a.api_port, 4, "own")
    try:
        m = poll(lambda: (lambda m: m if (m.get("ramjet_engine_requests_running") or 0) >= 4 else None)(a.metrics()),
                 10, what="the engines report A's four streams")
        assert m.get("ramjet_upstream_inflight") == 4
        for _ in range(5):  # several scrapes later, still nothing foreign
            m = a.metrics()
            assert m.get(FOREIGN, upstream=0) == 0 and m.get(FOREIGN, upstream=1) == 0, m.text
            time.sleep(0.2)
    finally:
        for c in streams:
            c.close()


def udp_port() -> int:
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def secret_file(tmp_path, name: str, byte: str) -> str:
    p = tmp_path / name
    p.write_text(byte * 64 + "\n")
    p.chmod(0o600)
    return str(p)


def test_peers_share_their_load_directly_signed_and_forgotten_when_they_stop(sims, ramjet_factory, tmp_path):
    """RJ_PEERS with the engine scrape off: the only way A can know of B's streams is B telling it.
    A sees them on the right engine (B lists only A's engine 1, its own ordinal 0: matched by
    address, not ordinal) and keeps its requests off it; a replica signing with another secret is
    refused and counted; when B dies, its load is forgotten within the stale time."""
    pa, pb, pc = udp_port(), udp_port(), udp_port()
    good = secret_file(tmp_path, "peer.key", "a")
    peers = f"127.0.0.1:{pa},127.0.0.1:{pb},127.0.0.1:{pc}"  # one list for all (each skips itself)
    common = {"RJ_ENGINE_SCRAPE_INTERVAL_MS": "0", "RJ_PEERS": peers, "RJ_PEER_INTERVAL_MS": "20"}
    a = ramjet_factory([s.url for s in sims], env={**common, "RJ_PEER_LISTEN": f"127.0.0.1:{pa}",
                                                  "RJ_PEER_SECRET_FILE": good})
    b = ramjet_factory([sims[1].url], env={**common, "RJ_PEER_LISTEN": f"127.0.0.1:{pb}", "RJ_PEER_SECRET_FILE": good})
    c = ramjet_factory([sims[0].url], env={**common, "RJ_PEER_LISTEN": f"127.0.0.1:{pc}",
                                           "RJ_PEER_SECRET_FILE": secret_file(tmp_path, "other.key", "b")})
    assert f"received on udp port={pa}" in a.output()
    streams = long_streams(b.api_port, 3, "b")
    c_streams = long_streams(c.api_port, 2, "c")  # on engine 0, but signed with another secret
    try:
        poll(lambda: (foreign(a, 1) or 0) >= 3, 10, what="A sees B's three streams on its engine 1")
        m = a.metrics()
        assert m.get(FOREIGN, upstream=0) == 0, "C's datagrams carry no weight"
        assert m.get("ramjet_peer_entries_total", outcome="unknown_engine") == 0
        assert m.get("ramjet_peers_fresh") == 1
        poll(lambda: (a.metrics().get("ramjet_peer_datagrams_total", outcome="bad_mac") or 0) >= 1, 10,
             what="C's datagrams counted as bad_mac")
        served = short_requests(a, 6, "a")
        assert served == ["0"] * 6, served
    finally:
        for s in streams + c_streams:
            s.close()
    poll(lambda: foreign(a, 1) == 0, 10, what="B's released load, sent as its next absolute value")
    streams = long_streams(b.api_port, 2, "b2")
    try:
        poll(lambda: (foreign(a, 1) or 0) >= 2, 10, what="B's new streams")
        b.expect_exit = True
        b.proc.kill()  # B stops without a word: its last state goes stale
        b.wait_exit(5)
        poll(lambda: foreign(a, 1) == 0 and a.metrics().get("ramjet_peers_fresh") == 0, 10,
             what="a dead peer forgotten")
    finally:
        for s in streams:
            s.close()
    assert "aaaaaaaa" not in a.output()


def test_hostile_datagrams_on_the_peer_port_are_counted_and_change_nothing(sims, ramjet_factory, tmp_path):
    """Anyone who can reach RJ_PEER_LISTEN: empty, garbage, oversized, truncated and well-formed but
    unsigned datagrams are counted by outcome, never logged, and move no load; ramjet keeps serving."""
    import os
    import socket
    port = udp_port()
    a = ramjet_factory([s.url for s in sims], env={
        "RJ_ENGINE_SCRAPE_INTERVAL_MS": "0", "RJ_PEERS": f"127.0.0.1:{udp_port()}", "RJ_PEER_INTERVAL_MS": "20",
        "RJ_PEER_LISTEN": f"127.0.0.1:{port}", "RJ_PEER_SECRET_FILE": secret_file(tmp_path, "peer.key", "c")})
    header = b"RJPL" + bytes([1, 0, 0, 0]) + (7).to_bytes(8, "little") * 3 + (1).to_bytes(4, "little")
    sent = [b"", os.urandom(17), os.urandom(60000), b"RJPL" + os.urandom(200), header,
            header + (42).to_bytes(8, "little") + (9).to_bytes(4, "little") * 2 + bytes(32)]  # the last: a bad MAC
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _ in range(20):
            for d in sent:
                s.sendto(d, ("127.0.0.1", port))
            time.sleep(0.01)  # within the socket's receive buffer (UDP drops the rest, uncounted)
    m = poll(lambda: (lambda m: m if (m.get("ramjet_peer_datagrams_total", outcome="malformed") or 0) +
                      (m.get("ramjet_peer_datagrams_total", outcome="bad_mac") or 0) >= 100 else None)(a.metrics()),
             10, what="the datagrams counted")
    print({o: m.get("ramjet_peer_datagrams_total", outcome=o) for o in ("malformed", "bad_mac", "receive_error")})
    assert m.get("ramjet_peer_datagrams_total", outcome="bad_mac") >= 10
    assert m.get("ramjet_peer_datagrams_total", outcome="accepted") == 0
    assert m.get("ramjet_peers_fresh") == 0
    assert m.get(FOREIGN, upstream=0) == 0 and m.get(FOREIGN, upstream=1) == 0
    assert short_requests(a, 2, "after") and a.alive()
    assert "RJPL" not in a.output()


def test_replicas_deciding_at_once_spread_a_burst_as_one_router_would(ramjet_factory, tmp_path):
    """Three replicas sharing their load (RJ_PEERS) get one new request each at the same instant,
    before any of them can hear of the others' (peer interval 1 s). Each decides on the same view
    of three idle engines; the view alone would send all three to the same engine (each replica's
    rotation starts at 0). Each replica takes its own place in the sequence one router would place
    the burst in (lanes by sender id, journal `spread_place` 0, 1, 2): three different engines."""
    import threading
    sims3 = [SimProc(*SLOW) for _ in range(3)]
    try:
        ports = [udp_port() for _ in range(3)]
        key = secret_file(tmp_path, "peer.key", "d")
        peers = ",".join(f"127.0.0.1:{p}" for p in ports)
        journals = [tmp_path / f"journal{i}.jsonl" for i in range(3)]
        rjs = [ramjet_factory([s.url for s in sims3], env={
            "RJ_ENGINE_SCRAPE_INTERVAL_MS": "0", "RJ_PEERS": peers, "RJ_PEER_INTERVAL_MS": "1000",
            "RJ_PEER_LISTEN": f"127.0.0.1:{ports[i]}", "RJ_PEER_SECRET_FILE": key,
            "RJ_ROUTE_JOURNAL": "true", "RJ_ROUTE_JOURNAL_FILE": str(journals[i])}) for i in range(3)]
        for rj in rjs:
            poll(lambda: rj.metrics().get("ramjet_peers_fresh") == 2, 10, what="every replica hears both others")

        def starts(i):
            if not journals[i].exists():
                return []
            return [json.loads(l) for l in journals[i].read_text().splitlines() if '"event":"start"' in l]

        placed_apart = 0
        for rnd in range(8):
            barrier = threading.Barrier(3)
            served = [None] * 3

            def go(i):
                barrier.wait()
                r = http_request(rjs[i].api_port, "POST", CHAT, json.dumps(chat_body(f"r{rnd}x{i}", 2, False)).encode(),
                                 {"Content-Type": "application/json"}, timeout=30)
                served[i] = (r.status, r.header("X-Ramjet-Upstream"))

            threads = [threading.Thread(target=go, args=(i,)) for i in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert all(s and s[0] == 200 for s in served), served
            recs = poll(lambda: (lambda r: r if all(len(x) == rnd + 1 for x in r) else None)([starts(i) for i in range(3)]),
                        5, what="the round's journal records")
            last = [r[-1] for r in recs]
            assert all(s["routers"] == 3 for s in last), [s["routers"] for s in last]
            same_view = all(c["load_units"] + c["foreign_load_units"] == 0 for s in last for c in s["candidates"]) \
                and len({s["spread_tie"] for s in last}) == 1
            if not same_view:
                continue  # a datagram arrived between the decisions: not a simultaneous burst
            assert sorted(s["spread_place"] for s in last) == [0, 1, 2], [s["spread_place"] for s in last]
            assert len({s["chosen"] for s in last}) == 3, [s["chosen"] for s in last]
            assert sorted(int(s[1]) for s in served) == sorted(s["chosen"] for s in last)
            placed_apart += 1
            time.sleep(0.2)
        print("rounds placed apart:", placed_apart)
        assert placed_apart >= 4, placed_apart
    finally:
        for s in sims3:
            s.stop()
