"""ramjet's priority classes carried to a real vLLM's own scheduler (issue 30).

With RJ_ADMISSION_ENGINE_PRIORITY, a request to a vLLM engine carries its class (batch key or the
operator's header) as vLLM's per-request "priority" (interactive 0, batch 1), and a client's own
priority is left out. This module's engine runs `--scheduling-policy priority` with one sequence
at a time, so its queue order is visible: while one long request runs, a batch request and then
an interactive one queue in vLLM; the interactive one is served first. Through a ramjet without
the setting the same two go first come, first served (the test can tell the two apart), and a
client's own priority -10 on a batch request then jumps the queue — what the setting takes away.
ramjet's waiting room is off here: the order is vLLM's alone."""

from __future__ import annotations

import json
import threading
import time

import pytest

from conftest import start_fixture_engines
from support.ramjet_proc import http_request, poll

HEADER = "X-Priority-Class"


@pytest.fixture(scope="module")
def engine(request, vllm_model, vllm_logs):
    (e,) = start_fixture_engines(request, vllm_model, vllm_logs, 1,
                                 extra=("--scheduling-policy", "priority", "--max-num-seqs", "1"))
    return e


def gauge(engine, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in engine.metrics_text().splitlines()
               if line.startswith(name + "{"))


def body(tag: str, what: str, max_tokens: int, **extra) -> dict:
    return {"model": "qwen3", "max_tokens": max_tokens, "ignore_eos": True,
            "messages": [{"role": "user", "content": f"{tag} {what}: tell me about the old mill"}], **extra}


def queue_order(engine, rj, tag: str, first: tuple, second: tuple, want: list, rounds: int = 3) -> list:
    """While a long request holds the engine's one sequence, `first` then `second` ((name, headers,
    extra body members)) queue in vLLM; returns the order they finished in: `want` as soon as a
    round gives it, else the last round's. vLLM's gauges lag its scheduler by a step, so a long
    request that ended just as they queued could let `first` start alone: such a round (the long
    one done less than a second after both were seen queued) does not count. And vLLM 0.32's
    scheduler now and then takes the request that queued first although the other's priority is
    better (seen about one round in four on the two-core test machine, with both queued for many
    seconds; not ramjet's doing: test_admission checks the bytes ramjet sends): up to `rounds`
    counted rounds. A ramjet that sent no priority would never give `want` for the classes; where
    `want` is first come, first served (the fluke's own order) one counted round decides."""
    order, counted = [], 0
    for attempt in range(6):
        order, long_end, queued_at = queue_round(engine, rj, f"{tag}{attempt}", first, second)
        if long_end == float("-inf"):
            print(f"queue order, round {attempt}: {order} — vLLM ran a queued request beside the long one "
                  "(--max-num-seqs 1 notwithstanding, seen once on a loaded machine); again")
            continue
        if long_end <= queued_at + 1.0:
            print(f"queue order, round {attempt}: the long request ended {long_end - queued_at:+.2f} s after both "
                  "were seen queued; again")
            continue
        if order == want:
            return order
        counted += 1
        print(f"queue order, round {attempt}: {order}, not {want}")
        if counted == rounds:
            return order
    if not counted:
        pytest.fail("the long request kept ending before the two were queued", pytrace=False)
    return order


def queue_round(engine, rj, tag: str, first: tuple, second: tuple):
    finished, errors, ended = [], [], {}

    def send(name, headers, extra, max_tokens):
        r = http_request(rj.api_port, "POST", "/v1/chat/completions",
                         json.dumps(body(tag, name, max_tokens, **extra)).encode(),
                         {"Content-Type": "application/json", **headers}, timeout=120)
        ended[name] = time.monotonic()
        if r.status != 200:
            errors.append((name, r.status, r.body[:300]))
        finished.append(name)

    threads = [threading.Thread(target=send, args=("long", {}, {}, 1500))]
    threads[0].start()
    poll(lambda: gauge(engine, "vllm:num_requests_running") == 1, 30, what="the long request runs")
    for k, (name, headers, extra) in enumerate((first, second)):
        t = threading.Thread(target=send, args=(name, headers, extra, 16))
        t.start()
        threads.append(t)
        poll(lambda: gauge(engine, "vllm:num_requests_waiting") == k + 1, 30, what=f"{name} queues in vLLM")
    # Both wait behind the long one: what vLLM takes next is its own choice.
    queued_at = time.monotonic()
    for t in threads:
        t.join(150)
    assert not errors, errors
    if finished[0] != "long":  # the engine ran another beside the long one: no queue to read
        return finished, float("-inf"), queued_at
    return finished[1:], ended["long"], queued_at


def test_the_class_reaches_vllms_scheduler_and_orders_its_queue(engine, ramjet_factory, tag):
    common = {"RJ_ADMISSION_PRIORITY_HEADER": HEADER}
    batch = ("batch", {HEADER: "batch"}, {})
    interactive = ("interactive", {}, {})
    rj = ramjet_factory([engine.url], env=dict(common, RJ_ADMISSION_ENGINE_PRIORITY="true"))
    assert queue_order(engine, rj, tag + "a", batch, interactive, want := ["interactive", "batch"]) == want
    # A client's own priority does not get a batch request ahead: ramjet's class replaces it.
    cheat = ("batch", {HEADER: "batch"}, {"priority": -10})
    assert queue_order(engine, rj, tag + "b", cheat, interactive, want) == want

    plain = ramjet_factory([engine.url], env=common)
    assert queue_order(engine, plain, tag + "c", batch, interactive, fcfs := ["batch", "interactive"], rounds=1) == fcfs
    late_cheat = ("cheat", {}, {"priority": -10})
    assert queue_order(engine, plain, tag + "d", interactive, late_cheat, cheated := ["cheat", "interactive"]) == cheated
