// The simulator's built-in deterministic tokenizer and chat rendering (documented in
// docs/sim.md). Used when no real tokenizer is configured. Prefix-stable: a prompt that
// extends another yields token IDs that extend the other's (except possibly the last token).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ramjet::sim {

// Renders an OpenAI chat messages array (JSON text of the array) into a prompt string:
// "<|im_start|>{role}\n{content}<|im_end|>\n" per message (content parts: text joined; other
// parts as "<|{type}|>"), then "<|im_start|>assistant\n" when add_generation_prompt.
std::string render_chat(std::string_view messages_json, bool add_generation_prompt);

// Tokenizes: splits on word boundaries (a run of non-space bytes with its leading spaces), then
// cuts long words into 4-byte pieces; token id = 1000 + FNV-1a(piece) % 150000.
std::vector<uint32_t> tokenize(std::string_view text);

// Deterministic filler text for generated token i of a response.
std::string_view filler_token(uint32_t i);

}  // namespace ramjet::sim
