"""Conformance of ramjet-sim's KV-event publisher with vLLM's wire format.

Run with Debian's /usr/bin/python3 (python3-zmq, python3-msgpack, python3-pytest); the C++ side
is the kv_event_dump tool named by $KV_EVENT_DUMP (see sim/kv/dump_main.cc).

The reference encoder below is written from vLLM's event classes (vllm/distributed/kv_events.py)
alone: it models the msgspec classes (field order, defaults, tag) and msgspec's rules (tagged map struct = "type"
first then fields in declaration order, omit_defaults drops fields equal to their default;
array_like = tag then every field; batch = [ts, events, data_parallel_rank]) and lets
msgpack-python produce the bytes (float64, smallest ints, str/bin types, ordered maps), which
is byte-identical to msgspec for these payloads.
"""

import json
import os
import sys
import random
import subprocess
import tempfile
import zlib

import msgpack
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "test", "support"))
from vllm_kv import FIELDS, REQUIRED  # noqa: E402  (the declaration order and defaults vLLM uses)
import zmq

DUMP = os.environ.get("KV_EVENT_DUMP", "")
END_SEQ = b"\xff" * 8
# Last array_like layout (just before PR #42892): BlockStored 12 = tag + 11 fields,
# BlockRemoved 4 = tag + 3 fields.
LATEST_ARRAY = {"stored": 12, "removed": 4, "with_dp_rank": True}

pytestmark = pytest.mark.skipif(not DUMP, reason="KV_EVENT_DUMP not set")


# ------------------------------------------------------------------------ reference encoder


def external_hash(hex64, hash_type):
    raw = bytes.fromhex(hex64)
    if hash_type == "bytes":
        return raw
    return int.from_bytes(raw, "big") & (2**64 - 1)


def event_values(ev, hash_type):
    """What vLLM's block pool puts in each field for a simulated (text-only, no LoRA) event."""
    kind = ev["type"]
    if kind == "AllBlocksCleared":
        return {}
    hashes = [external_hash(h, hash_type) for h in ev["block_hashes"]]
    values = {name: None for name, _ in FIELDS[kind]}
    values["block_hashes"] = hashes
    values["medium"] = ev.get("medium", "GPU") or None
    values["group_idx"] = ev.get("group_idx", 0)
    if kind == "BlockStored":
        parent = ev.get("parent_block_hash")
        values["parent_block_hash"] = None if parent is None else external_hash(parent, hash_type)
        values["token_ids"] = list(ev["token_ids"])
        values["block_size"] = ev.get("block_size", 16)
        values["extra_keys"] = [None] * len(hashes)
        values["kv_cache_spec_kind"] = ev.get("kv_cache_spec_kind", "full_attention") or None
    return values


def encode_event(ev, fmt, hash_type, layout):
    kind = ev["type"]
    values = event_values(ev, hash_type)
    if fmt == "map":
        out = {"type": kind}
        for name, default in FIELDS[kind]:
            if default is REQUIRED or values[name] != default:
                out[name] = values[name]
        return out
    width = {"BlockStored": layout["stored"], "BlockRemoved": layout["removed"]}.get(kind, 1)
    return [kind] + [values[name] for name, _ in FIELDS[kind]][: width - 1]


def encode_batch(ts, events, dp_rank, fmt, hash_type, layout=LATEST_ARRAY):
    batch = [ts, [encode_event(e, fmt, hash_type, layout) for e in events]]
    if fmt == "map" or layout["with_dp_rank"]:
        batch.append(dp_rank)
    return msgpack.packb(batch, use_bin_type=True)


def spec_bytes(text):
    """Byte notation of the examples below: hex byte pairs and "quoted" raw strings."""
    out = bytearray()
    parts = text.split('"')
    for i, part in enumerate(parts):
        if i % 2:
            out += part.encode()
        else:
            out += bytes.fromhex(part)
    return bytes(out)


# ------------------------------------------------------------------------------- fixtures


def digest_with_low(low, rng):
    return (rng.randbytes(24) + low.to_bytes(8, "big")).hex()


def make_batches(seed=7, count=24):
    """Deterministic batches covering every int width, None/present parents, group/kind/medium
    variants, empty lists and >15-element arrays."""
    rng = random.Random(seed)
    lows = [0, 1, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000, 0xFFFFFFFF, 2**32, 2**63 - 1, 2**63,
            2**64 - 1, 15760518052499183552]
    kinds = ["full_attention", "sliding_window", "mla_attention", "encoder_only_attention", ""]
    batches = []
    for b in range(count):
        events = []
        for _ in range(rng.choice([1, 2, 3, 17])):
            r = rng.random()
            if r < 0.55:
                n = rng.choice([0, 1, 2, 5])
                bs = rng.choice([1, 4, 16, 128])
                hashes = [digest_with_low(rng.choice(lows + [rng.getrandbits(64)]), rng)
                          for _ in range(n)]
                events.append({
                    "type": "BlockStored",
                    "block_hashes": hashes,
                    "parent_block_hash": None if rng.random() < 0.4 else digest_with_low(
                        rng.getrandbits(64), rng),
                    "token_ids": [rng.choice([0, 5, 127, 128, 255, 256, 65535, 65536, 151643,
                                              2**32 - 1]) for _ in range(n * bs)],
                    "block_size": bs,
                    "medium": rng.choice(["GPU", "GPU", "CPU", "", "M" * 40]),
                    "group_idx": rng.choice([0, 0, 1, 200, 70000]),
                    "kv_cache_spec_kind": rng.choice(kinds),
                })
            elif r < 0.9:
                events.append({
                    "type": "BlockRemoved",
                    "block_hashes": [digest_with_low(rng.choice(lows), rng)
                                     for _ in range(rng.choice([0, 1, 3]))],
                    "medium": rng.choice(["GPU", "CPU", ""]),
                    "group_idx": rng.choice([0, 1, 300]),
                })
            else:
                events.append({"type": "AllBlocksCleared"})
        ts = rng.choice([0.0, 1.5, 1789095808.83, 1700000000.123456789, rng.uniform(1e9, 2e9)])
        batches.append({"ts": repr(ts), "events": events})
    return batches


def cpp_encode(batches, fmt, hash_type, dp_rank=0, layout=None):
    script = {"format": fmt, "hash_type": hash_type, "dp_rank": dp_rank, "batches": batches}
    if layout:
        script["array_layout"] = layout
    out = subprocess.run([DUMP], input=json.dumps(script), capture_output=True, text=True,
                         check=True, timeout=60)
    return [bytes.fromhex(line) for line in out.stdout.split()]


# --------------------------------------------------------------------------- encoding tests


@pytest.mark.parametrize("fmt", ["map", "array"])
@pytest.mark.parametrize("hash_type", ["u64", "bytes"])
@pytest.mark.parametrize("dp_rank", [0, 3])
def test_encoding_matches_reference(fmt, hash_type, dp_rank):
    batches = make_batches(seed=zlib.crc32(f"{fmt}/{hash_type}/{dp_rank}".encode()))
    got = cpp_encode(batches, fmt, hash_type, dp_rank)
    assert len(got) == len(batches)
    for i, (b, cpp) in enumerate(zip(batches, got)):
        expected = encode_batch(float(b["ts"]), b["events"], dp_rank, fmt, hash_type)
        assert cpp.hex() == expected.hex(), f"batch {i}: {b}"
        decoded = msgpack.unpackb(cpp, raw=False)
        assert decoded[0] == float(b["ts"]) and decoded[2] == dp_rank


def test_legacy_example_bytes_from_spec():
    expected = spec_bytes(
        '93 cb 41 d9 54 fc 40 20 00 00 93 98 ab "BlockStored" 91 cf da b8 9b aa 7b 58 57 c0 c0 94 '
        '01 02 03 04 04 c0 a3 "GPU" c0 93 ac "BlockRemoved" 91 07 a3 "GPU" 91 b0 '
        '"AllBlocksCleared" 00')
    rng = random.Random(1)
    events = [
        {"type": "BlockStored", "block_hashes": [digest_with_low(0xDAB89BAA7B5857C0, rng)],
         "parent_block_hash": None, "token_ids": [1, 2, 3, 4], "block_size": 4},
        {"type": "BlockRemoved", "block_hashes": [digest_with_low(7, rng)]},
        {"type": "AllBlocksCleared"},
    ]
    layout = {"stored": 8, "removed": 3, "with_dp_rank": True}
    assert encode_batch(1700000000.5, events, 0, "array", "u64", layout) == expected
    [cpp] = cpp_encode([{"ts": "1700000000.5", "events": events}], "array", "u64", 0, layout)
    assert cpp.hex(" ") == expected.hex(" ")


@pytest.mark.parametrize("stored,removed,with_rank", [(6, 2, False), (7, 3, True), (9, 3, True),
                                                      (10, 4, True), (12, 4, True)])
def test_older_array_layouts(stored, removed, with_rank):
    layout = {"stored": stored, "removed": removed, "with_dp_rank": with_rank}
    batches = make_batches(seed=stored * 10 + removed, count=6)
    got = cpp_encode(batches, "array", "u64", 1, layout)
    for b, cpp in zip(batches, got):
        assert cpp == encode_batch(float(b["ts"]), b["events"], 1, "array", "u64", layout)


def test_map_example_hex_start_from_spec():
    rng = random.Random(2)
    events = [
        {"type": "BlockStored", "block_hashes": [digest_with_low(15760518052499183552, rng)],
         "parent_block_hash": None, "token_ids": list(range(100, 116)), "block_size": 16},
        {"type": "BlockRemoved", "block_hashes": [digest_with_low(7, rng)]},
        {"type": "AllBlocksCleared"},
    ]
    [cpp] = cpp_encode([{"ts": "1789095808.83", "events": events}], "map", "u64")
    start = (spec_bytes("93 cb") + msgpack.packb(1789095808.83)[1:] +
             spec_bytes('93 8b a4 "type" ab "BlockStored" ac "block_hashes" 91 cf') +
             (15760518052499183552).to_bytes(8, "big"))
    assert cpp.startswith(start)
    decoded = msgpack.unpackb(cpp, raw=False)
    assert decoded[1][0] == {
        "type": "BlockStored", "block_hashes": [15760518052499183552], "parent_block_hash": None,
        "token_ids": list(range(100, 116)), "block_size": 16, "lora_id": None, "medium": "GPU",
        "lora_name": None, "extra_keys": [None], "group_idx": 0,
        "kv_cache_spec_kind": "full_attention"}
    assert decoded[1][1] == {"type": "BlockRemoved", "block_hashes": [7], "medium": "GPU",
                             "group_idx": 0}
    assert decoded[1][2] == {"type": "AllBlocksCleared"}


# ---------------------------------------------------------------------------- publish tests

PROBE = {"ts": "0.0", "events": [{"type": "AllBlocksCleared"}]}


class DumpPublisher:
    def __init__(self, config, script, fmt, hash_type, layout, dp_rank=0):
        self.tmp = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump(script, self.tmp)
        self.tmp.close()
        self.proc = subprocess.Popen(
            [DUMP, "--publish", json.dumps(config), "--script", self.tmp.name, "--format", fmt,
             "--hash-type", hash_type, "--layout", layout, "--dp-rank", str(dp_rank)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        ready = self.proc.stdout.readline().split()
        assert ready and ready[0] == "ready", ready
        self.endpoint, self.replay_endpoint = ready[1], ready[2]

    def cmd(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline().split()
        assert reply and reply[0] == "ok", (line, reply)
        return int(reply[1])

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            os.unlink(self.tmp.name)


def local(endpoint):
    return endpoint.replace("tcp://0.0.0.0:", "tcp://127.0.0.1:")


@pytest.fixture
def zctx():
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def recv_live(sub, probe_payload):
    while True:
        assert sub.poll(5000), "no live message"
        frames = sub.recv_multipart()
        assert len(frames) == 3
        if frames[2] != probe_payload:
            return frames


def replay(dealer, start, layout, topic):
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    out = []
    while True:
        assert dealer.poll(5000), "replay timed out"
        frames = dealer.recv_multipart()
        assert frames[0] == b""
        if layout == "with-topic":
            assert len(frames) == 4
            if frames[-1] == b"":
                assert frames[1:] == [b"", END_SEQ, b""]
                return out
            assert frames[1] == topic.encode()
            out.append((int.from_bytes(frames[2], "big"), frames[3]))
        else:
            assert len(frames) == 3
            if frames[-1] == b"":
                assert frames[1:] == [END_SEQ, b""]
                return out
            out.append((int.from_bytes(frames[1], "big"), frames[2]))


@pytest.mark.parametrize("layout,fmt,hash_type,dp_rank", [
    ("with-topic", "map", "u64", 0),
    ("with-topic", "array", "bytes", 1),
    ("legacy", "array", "u64", 0),
    ("legacy", "map", "bytes", 2),
])
def test_publish_live_and_replay(zctx, layout, fmt, hash_type, dp_rank):
    topic = "kv-events"
    batches = [PROBE] + make_batches(seed=11, count=19)
    config = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:0",
              "replay_endpoint": "tcp://*:0", "buffer_steps": 100, "hwm": 1000, "topic": topic}
    pub = DumpPublisher(config, {"batches": batches}, fmt, hash_type, layout, dp_rank)
    try:
        assert pub.endpoint.startswith("tcp://0.0.0.0:") and not pub.endpoint.endswith(":0")
        expected = [encode_batch(float(b["ts"]), b["events"], dp_rank, fmt, hash_type)
                    for b in batches]
        sub = zctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
        sub.connect(local(pub.endpoint))
        # Slow joiner: probe until the subscription is live, then restart so real seqs start at 0.
        for _ in range(500):
            pub.cmd("publish 0")
            if sub.poll(20):
                break
        else:
            pytest.fail("subscriber never joined")
        assert pub.cmd("restart") == 0

        for i in range(1, 20):
            assert pub.cmd(f"publish {i}") == i
        for i in range(1, 20):
            topic_frame, seq, payload = recv_live(sub, expected[0])
            assert topic_frame == topic.encode()
            assert len(seq) == 8 and int.from_bytes(seq, "big") == i - 1
            assert payload == expected[i]
            decoded = msgpack.unpackb(payload, raw=False)
            assert decoded[0] == float(batches[i]["ts"]) and decoded[2] == dp_rank

        dealer = zctx.socket(zmq.DEALER)
        dealer.connect(local(pub.replay_endpoint))
        got = replay(dealer, 10, layout, topic)
        assert [s for s, _ in got] == list(range(10, 19))
        assert [p for _, p in got] == expected[11:20]

        # A dropped batch leaves a live gap that replay fills; a skip leaves one it cannot.
        pub.cmd("drop 1")
        assert pub.cmd("publish 1") == 20   # seq 19: buffered, not sent
        assert pub.cmd("publish 2") == 21   # seq 20: sent
        assert pub.cmd("skip 2") == 23
        assert pub.cmd("publish 3") == 24   # seq 23: sent
        _, seq, payload = recv_live(sub, expected[0])
        assert int.from_bytes(seq, "big") == 20 and payload == expected[2]
        _, seq, payload = recv_live(sub, expected[0])
        assert int.from_bytes(seq, "big") == 23 and payload == expected[3]
        got = replay(dealer, 19, layout, topic)
        assert got == [(19, expected[1]), (20, expected[2]), (23, expected[3])]
    finally:
        pub.close()
