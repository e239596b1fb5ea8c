// render::turn_resume: exact routing's follow-up turn in time proportional to what it adds. An
// agent resends its whole conversation each turn; when a chat body is, byte for byte, the body
// of a turn the session cache kept (render/prompt/turn_cache.h) with messages appended — the
// same bytes up to the end of that turn's last message, the same bytes after it (the closing ']'
// and every key after "messages": tools, kwargs...), only array elements between — only the
// appended messages (and the few before them whose rendering they change) are parsed, rendered
// and encoded. Anything else, or anything the fast path does not model, takes the full path of
// render_routing_body, which keeps the turn for the next one. Both give the same ids
// (turn_resume_test: generated conversations and adversarial edits).
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "render/identity/tokenize_payload.h"

namespace ramjet::model {
class ModelProfile;
}

namespace ramjet::render {

class SessionCache;

// The routing tokens of a chat body that extends a kept turn, or nullopt (take the full path).
std::optional<RoutingTokens> resume_routing_turn(const model::ModelProfile& profile, const PromptRenderer& renderer,
                                                 SessionCache& cache, std::string_view body);

// After the full path rendered `body` (a chat request) with the session cache: keeps what a
// follow-up needs when the native formatter rendered it (`turn` as chat_parsed filled it, with
// the text and ids moved in) and the body's messages can be located byte for byte.
void keep_routing_turn(const model::ModelProfile& profile, const PromptRenderer& renderer, SessionCache& cache,
                       std::string_view body, const RoutingTokens& tokens, std::unique_ptr<Turn> turn);

}  // namespace ramjet::render
