"""An independent KV-event subscriber for tests (Debian's python3-zmq + python3-msgpack; no ramjet
code): it follows one vLLM publisher and keeps what the engine's prefix cache holds, so a test can
hold ramjet's exact index to a second reading of the same events.

Mirror(live, topic, replay=...) subscribes at once (a SUB socket on its own thread) and records
every batch: (seq, decoded payload). With the engine's replay endpoint it first asks for its whole
buffered history (from sequence 0, as ramjet does when it connects), so it starts from the
engine's state rather than from nothing; live batches already replayed are skipped. resident() is the number of distinct (group, block hash) keys with more
stores than removals (vLLM does not de-duplicate copies: vllm-contracts.md §1.3); an
AllBlocksCleared empties it. Events are decoded by name (map layout) or position (array layout).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import msgpack
import zmq

ARRAY_FIELDS = {
    "BlockStored": ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
                    "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window",
                    "locality", "ownership"],
    "BlockRemoved": ["block_hashes", "medium", "group_idx", "locality", "ownership"],
    "AllBlocksCleared": [],
}


def as_event(raw) -> dict:
    if isinstance(raw, dict):
        return raw
    tag, rest = raw[0], raw[1:]
    out = {"type": tag}
    out.update(zip(ARRAY_FIELDS.get(tag, []), rest))
    return out


def hashable(h):
    return bytes(h) if isinstance(h, (bytes, bytearray)) else h


class Mirror:
    def __init__(self, live: str, topic: str = "", replay_endpoint: str = ""):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
        self.sub.setsockopt(zmq.RCVTIMEO, 100)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.connect(live)
        self.topic = topic.encode()
        self.batches: list = []       # (seq, [ts, events, rank], raw payload bytes)
        self.copies: Counter = Counter()
        self.raw_frames: list = []
        self._lock = threading.Lock()
        self._stop = False
        self._next = 0
        self._ready = threading.Event()
        self._replay_endpoint = replay_endpoint
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise AssertionError("the mirror's replay from 0 did not finish")

    def _take(self, seq: int, payload: bytes, frames=None) -> None:
        if seq < self._next:
            return  # already replayed
        if seq > self._next and self._replay_endpoint:
            # A gap (a batch the SUB socket missed): fill it from the replay socket first.
            for f in replay(self._replay_endpoint, self._next):
                if f[-1] != b"" and int.from_bytes(f[-2], "big") < seq:
                    self._take(int.from_bytes(f[-2], "big"), f[-1])
        self._next = seq + 1
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        with self._lock:
            if frames is not None:
                self.raw_frames.append(frames)
            self.batches.append((seq, batch, payload))
            for ev in batch[1]:
                self._apply(as_event(ev))

    def _run(self) -> None:
        if self._replay_endpoint:
            time.sleep(0.3)  # the SUB socket has joined: nothing published from here on is lost
            for frames in replay(self._replay_endpoint, 0):
                if frames[-1] != b"":
                    self._take(int.from_bytes(frames[-2], "big"), frames[-1])
        self._ready.set()
        while not self._stop:
            try:
                frames = self.sub.recv_multipart()
            except zmq.Again:
                continue
            except zmq.ZMQError:
                return
            topic, seq, payload = frames
            self._take(int.from_bytes(seq, "big"), payload, frames)

    def _apply(self, ev: dict) -> None:
        kind = ev["type"]
        group = ev.get("group_idx") or 0
        if kind == "BlockStored":
            for h in ev["block_hashes"]:
                self.copies[(group, hashable(h))] += 1
        elif kind == "BlockRemoved":
            for h in ev["block_hashes"]:
                k = (group, hashable(h))
                self.copies[k] -= 1
                if self.copies[k] <= 0:
                    del self.copies[k]
        elif kind == "AllBlocksCleared":
            self.copies.clear()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def resident(self) -> int:
        with self._lock:
            return len(self.copies)

    def events(self) -> list:
        with self._lock:
            return [as_event(e) for _, b, _ in self.batches for e in b[1]]

    def count(self) -> int:
        with self._lock:
            return len(self.batches)

    def quiet(self, seconds: float = 0.5, timeout: float = 10.0) -> None:
        """Waits until no batch arrived for `seconds` (the engine finished publishing)."""
        deadline = time.monotonic() + timeout
        last, since = self.count(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            n = self.count()
            if n != last:
                last, since = n, time.monotonic()
            elif time.monotonic() - since >= seconds:
                return
        raise AssertionError("KV events kept coming")

    def close(self) -> None:
        self._stop = True
        self._thread.join(2)
        self.sub.close(0)
        self.ctx.term()


def replay(endpoint: str, start: int, timeout: float = 5.0) -> list:
    """Asks a publisher's ROUTER for every buffered batch from `start` (a DEALER, as vLLM's own
    tests do); returns the reply messages' frames up to the end marker."""
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, int(timeout * 1000))
    s.connect(endpoint)
    try:
        s.send_multipart([b"", start.to_bytes(8, "big")])
        out = []
        while True:
            frames = s.recv_multipart()
            out.append(frames)
            if frames[-1] == b"":
                return out
    finally:
        s.close(0)
        ctx.term()
