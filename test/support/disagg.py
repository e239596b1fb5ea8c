"""vLLM 0.32's prefill/decode contract as the P/D tests drive it by hand (docs/sim.md §8.4): the
real engines' test (test/vllm/test_disagg.py) and the simulator's (test/integration/
test_sim_disagg.py) hold their engines to the same fields, so they are written once here."""

from __future__ import annotations

# The keys of a prefill answer's kv_transfer_params, in vLLM 0.32's order (NixlConnector pull
# mode, then the scheduler's remote_prefill_cached_tokens).
ANSWER_KEYS = ["do_remote_prefill", "do_remote_decode", "remote_block_ids", "remote_engine_id", "remote_request_id",
               "remote_host", "remote_port", "tp_size", "dcp_size", "pp_size", "remote_num_tokens",
               "remote_blocks_expiry_time", "transfer_mode", "remote_prefill_cached_tokens"]
# What a router asks the prefill engine for (vLLM's toy_proxy_server).
ASK_REMOTE_DECODE = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                     "remote_block_ids": None, "remote_host": None, "remote_port": None}


def request_body(tag: str, chat: bool, model: str, words: int, word: str,
                 stream: bool = False, max_tokens: int = 5) -> tuple[str, dict]:
    """A client's chat or completions request of `words` distinct words after `tag`: (path, body)."""
    text = tag + " " + " ".join(f"{word}{i}" for i in range(words))
    body = {"model": model, "max_tokens": max_tokens, "stream": stream}
    if chat:
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    if stream:
        body["stream_options"] = {"include_usage": True}
    return ("/v1/chat/completions" if chat else "/v1/completions"), body


def prefill_leg(body: dict) -> dict:
    """What the router sends the prefill engine (vLLM's toy_proxy_server.send_request_to_service):
    the client's body asking for remote decode, one token, not streamed."""
    leg = dict(body, kv_transfer_params=dict(ASK_REMOTE_DECODE), stream=False, max_tokens=1)
    if "max_completion_tokens" in leg:
        leg["max_completion_tokens"] = 1
    leg.pop("stream_options", None)
    return leg
