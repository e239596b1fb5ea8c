// sim/engine filler: the token IDs behind filler_token() (tokenizer.h), shared by the
// tokenizer and the engine so generated token i has the ID that re-tokenizing its text gives.
#pragma once

#include <cstdint>
#include <string_view>

namespace ramjet::sim {

// The built-in tokenizer's ID of one piece (<= 4 bytes): 1000 + FNV-1a-64(piece) % 150000.
uint32_t piece_token_id(std::string_view piece);

// ID of generated token i (= piece_token_id(filler_token(i))).
uint32_t filler_token_id(uint32_t i);

}  // namespace ramjet::sim
