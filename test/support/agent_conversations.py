"""Agent conversations in the Responses and Anthropic Messages shapes, for the exact-routing tests
(test/integration/test_agent_exact.py against ramjet-sim, test/vllm/test_exact.py against vLLM).

responses_conv: a Codex-shaped conversation — instructions (the agent's manual), then per turn a
user message, and for every turn but the last: reasoning, a shell call, its output and the answer.
messages_conv: a Claude-Code-shaped one — system blocks led by the per-request billing header (vLLM
drops it so that it does not defeat prefix caching), then per turn a user message, and for every
turn but the last: thinking, a Bash call, its result and the answer. `k` names the conversation's
call ids.
"""

from __future__ import annotations

import json

TOOLS_RESPONSES = [{"type": "function", "name": "shell", "description": "Runs a shell command.",
                    "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}},
                                   "required": ["command"]}, "strict": False}]
TOOLS_MESSAGES = [{"name": "Bash", "description": "Executes a bash command.",
                   "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]


def responses_conv(model: str, manual: str, k: int, turns) -> dict:
    items = []
    for i, t in enumerate(turns):
        items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": t}]})
        if i < len(turns) - 1:
            items += [
                {"type": "reasoning", "id": f"rs_{i}", "summary": [],
                 "content": [{"type": "reasoning_text", "text": f"Turn {i}: run the tests first."}]},
                {"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{k}_{i}", "name": "shell",
                 "arguments": json.dumps({"command": ["make", "test"]})},
                {"type": "function_call_output", "call_id": f"call_{k}_{i}", "output": f"{i * 11} tests passed"},
                {"type": "message", "role": "assistant", "id": f"msg_{i}", "status": "completed",
                 "content": [{"type": "output_text", "text": f"All {i * 11} tests pass.", "annotations": []}]},
            ]
    return {"model": model, "instructions": manual, "input": items, "tools": TOOLS_RESPONSES, "max_output_tokens": 2}


def messages_conv(model: str, manual: str, k: int, billing: str, turns) -> dict:
    messages = []
    for i, t in enumerate(turns):
        messages.append({"role": "user", "content": t})
        if i < len(turns) - 1:
            messages += [
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": f"Turn {i}: run the tests first.", "signature": "sig"},
                    {"type": "tool_use", "id": f"toolu_{k}_{i}", "name": "Bash", "input": {"command": "make test"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{k}_{i}",
                                              "content": [{"type": "text", "text": f"{i * 11} tests passed"}]}]},
                {"role": "assistant", "content": [{"type": "text", "text": f"All {i * 11} tests pass."}]},
            ]
    return {"model": model, "max_tokens": 2, "tools": TOOLS_MESSAGES,
            "system": [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.3; cch={billing};"},
                       {"type": "text", "text": manual}],
            "messages": messages}
