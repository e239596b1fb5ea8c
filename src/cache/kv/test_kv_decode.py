"""ramjet's KV-event decoder against batches written by Debian's python3-msgpack.

Run with /usr/bin/python3 (python3-msgpack, python3-pytest); the C++ side is the kv_decode_dump
tool named by $KV_DECODE_DUMP (src/cache/kv/decode_dump_main.cc).

The batches follow vLLM's msgspec classes: the batch is array_like [ts, events,
data_parallel_rank]; an event is a tagged map ("type" first, then fields in declaration order,
None-default fields left out when None; vLLM >= 0.26) or a tagged array (tag, then the first
width-1 fields, None as nil; before 0.26). Values cover every field, int hashes of every width
(including >= 2**63 and negative ones from old vLLM) and bytes digests of 32 and 16 bytes. Maps
are also written with shuffled keys and unknown extra fields, which a decoder must take too.
"""

import json
import os
import sys
import random
import subprocess

import msgpack
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "test", "support"))
from vllm_kv import FIELDS, REQUIRED  # noqa: E402  (the declaration order and defaults vLLM uses)

DUMP = os.environ.get("KV_DECODE_DUMP", "")

pytestmark = pytest.mark.skipif(not DUMP, reason="KV_DECODE_DUMP not set")


def random_hash(rng):
    r = rng.random()
    if r < 0.5:
        return rng.choice([0, 1, 0x7F, 0x80, 0xFFFF, 2**32, 2**63 - 1, 2**63, 2**64 - 1,
                           rng.getrandbits(64)])
    if r < 0.65:
        return -rng.choice([1, 32, 33, 2**15, 2**31, 2**63])
    return rng.randbytes(rng.choice([32, 16]))


def maybe(rng, value):
    return value if rng.random() < 0.5 else None


def random_event(rng):
    r = rng.random()
    if r < 0.5:
        n = rng.choice([0, 1, 3, 17])
        bs = rng.choice([1, 4, 16])
        extra = None
        if rng.random() < 0.6:
            extra = [rng.choice([None, None, ("lora-a",), (("mm-" + "x" * 20, 3),), ("salt", b"\x01\x02")])
                     for _ in range(n)]
        return {
            "type": "BlockStored",
            "block_hashes": [random_hash(rng) for _ in range(n)],
            "parent_block_hash": maybe(rng, random_hash(rng)),
            "token_ids": [rng.choice([0, 127, 128, 65535, 65536, 151643, 2**32 - 1])
                          for _ in range(n * bs)],
            "block_size": bs,
            "lora_id": maybe(rng, rng.choice([1, 7, 2**40, -3])),
            "medium": rng.choice(["GPU", "CPU", "STORAGE", None]),
            "lora_name": maybe(rng, "adapter-é"),
            "extra_keys": extra,
            "group_idx": rng.choice([None, 0, 1, 70000]),
            "kv_cache_spec_kind": rng.choice([None, "full_attention", "sliding_window", "mamba"]),
            "kv_cache_spec_sliding_window": maybe(rng, rng.choice([128, 4096])),
            "locality": rng.choice([None, "LOCAL", "REMOTE"]),
            "ownership": maybe(rng, "tier-" + str(rng.randrange(100))),
        }
    if r < 0.9:
        return {
            "type": "BlockRemoved",
            "block_hashes": [random_hash(rng) for _ in range(rng.choice([0, 1, 2]))],
            "medium": rng.choice(["GPU", "CPU", None]),
            "group_idx": rng.choice([None, 0, 3]),
            "locality": rng.choice([None, "LOCAL"]),
            "ownership": maybe(rng, "o"),
        }
    return {"type": "AllBlocksCleared"}


def wire_event(ev, fmt, width=None, rng=None):
    """The event as msgspec puts it on the wire (tuples become arrays via msgpack)."""
    kind = ev["type"]
    if fmt == "array":
        width = width or {"BlockStored": 12, "BlockRemoved": 4}.get(kind, 1)
        return [kind] + [ev[name] for name, _ in FIELDS[kind]][: width - 1]
    items = [("type", kind)] + [(name, ev[name]) for name, default in FIELDS[kind]
                                if default is REQUIRED or ev[name] != default]
    if fmt == "shuffled":
        items += [("x_future", {"nested": [1, [2, [3]]], "b": b"\x00"}), ("zz", None)]
        rng.shuffle(items)
    return dict(items)


def shown_hash(h):
    if isinstance(h, bytes):
        return {"b": h.hex()}
    return {"u": h} if h >= 0 else {"i": h}


def shown_event(ev, width=None):
    """What kv_decode_dump prints for the event (fields the array width lacks are None)."""
    kind = ev["type"]
    if kind == "AllBlocksCleared":
        return {"type": kind}
    present = [name for name, _ in FIELDS[kind]]
    if width is not None:
        present = present[: width - 1]
    out = {"type": kind}
    for name, _ in FIELDS[kind]:
        v = ev[name] if name in present else None
        if name == "block_hashes":
            v = [shown_hash(h) for h in v]
        elif name == "parent_block_hash" and v is not None:
            v = shown_hash(v)
        elif name == "extra_keys" and v is not None:
            v = [None if k is None else msgpack.packb(k, use_bin_type=True).hex() for k in v]
        out[name] = v
    return out


def decode(payloads):
    text = "".join(p.hex() + "\n" for p in payloads)
    out = subprocess.run([DUMP], input=text, capture_output=True, text=True, check=True,
                         timeout=60)
    return [json.loads(line) for line in out.stdout.splitlines()]


def make_batches(seed, count=40):
    rng = random.Random(seed)
    batches = []
    for _ in range(count):
        events = [random_event(rng) for _ in range(rng.choice([1, 2, 5, 16]))]
        ts = rng.choice([0.0, 1789095808.83, 1700000000.123456789, rng.uniform(1e9, 2e9)])
        batches.append((ts, events, rng.choice([0, 3])))
    return batches


@pytest.mark.parametrize("fmt", ["map", "shuffled"])
def test_map_layout(fmt):
    rng = random.Random(11)
    batches = make_batches(seed=len(fmt))
    payloads = [msgpack.packb([ts, [wire_event(e, fmt, rng=rng) for e in events], rank],
                              use_bin_type=True) for ts, events, rank in batches]
    for (ts, events, rank), got in zip(batches, decode(payloads), strict=True):
        assert "error" not in got, got
        assert got["ts"] == ts and got["data_parallel_rank"] == rank
        assert got["events"] == [shown_event(e) for e in events]


@pytest.mark.parametrize("width", range(6, 13))
def test_array_layout_every_release_width(width):
    batches = make_batches(seed=100 + width)
    removed_width = {6: 2, 7: 3, 8: 3, 9: 3}.get(width, 4)
    widths = {"BlockStored": width, "BlockRemoved": removed_width, "AllBlocksCleared": 1}
    with_rank = width > 6  # vLLM <= 0.9 had no data_parallel_rank
    payloads = []
    for ts, events, rank in batches:
        batch = [ts, [wire_event(e, "array", widths[e["type"]]) for e in events]]
        if with_rank:
            batch.append(rank)
        payloads.append(msgpack.packb(batch, use_bin_type=True))
    for (ts, events, rank), got in zip(batches, decode(payloads), strict=True):
        assert "error" not in got, got
        assert got["ts"] == ts
        assert got["data_parallel_rank"] == (rank if with_rank else None)
        assert got["events"] == [shown_event(e, widths[e["type"]]) for e in events]


def test_kthena_capture_shape():
    """The map batch captured from a live vLLM 0.26.0 (one 16-token block)."""
    ev = {"type": "BlockStored", "block_hashes": [15760518052499183552],
          "parent_block_hash": None, "token_ids": list(range(16)), "block_size": 16,
          "lora_id": None, "medium": "GPU", "lora_name": None, "extra_keys": [None],
          "group_idx": 0, "kv_cache_spec_kind": "full_attention"}
    payload = msgpack.packb([1789095808.83, [ev], 0], use_bin_type=True)
    assert payload.hex().startswith("93cb")
    [got] = decode([payload])
    want = shown_event({**ev, "kv_cache_spec_sliding_window": None, "locality": None,
                        "ownership": None})
    assert got == {"ts": 1789095808.83, "events": [want], "data_parallel_rank": 0}


def test_invalid_batches_are_typed_errors():
    cases = {
        "unknown_event_type": [1.0, [{"type": "BlockMoved"}], 0],
        "missing_field": [1.0, [{"type": "BlockRemoved", "medium": "GPU"}], 0],
        "bad_block_hash": [1.0, [["BlockRemoved", ["h"], None, 0]], 0],
        "bad_field": [1.0, [["BlockStored", [], None, [-1], 1, None]], 0],
        "bad_batch": {"ts": 1.0},
        "bad_timestamp": [float("inf"), [], 0],
    }
    payloads = [msgpack.packb(v, use_bin_type=True) for v in cases.values()]
    payloads.append(payloads[0][:-3])
    got = decode(payloads)
    assert [g.get("error") for g in got] == list(cases) + ["truncated"]
