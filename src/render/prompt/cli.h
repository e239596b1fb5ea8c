// render::cli: the `ramjet render` subcommand — renders chat requests to prompt text and token
// ids offline, from a model's tokenizer.json and its chat template (or a native formatter),
// exactly as the router renders them in-process. Needs no RJ_* configuration.
//
//   ramjet render --tokenizer tokenizer.json [--added-tokens override.json]
//                 (--template chat_template.jinja [--tokenizer-config tokenizer_config.json]
//                  | --formatter deepseek-v32) [--no-tokenize] [--jsonl]
//       stdin: one chat-completions request body (JSON)
//       stdout: {"rendered": "...", "token_ids": [...]}   (no token_ids with --no-tokenize)
//   ramjet render --text --tokenizer tokenizer.json [--added-tokens override.json] [--jsonl]
//       stdin: raw text; stdout: {"token_ids": [...]}
//
// Template variables bos_token, eos_token, ... come from --tokenizer-config, else from a
// tokenizer_config.json beside the tokenizer.json when there is one. --tokenizer may be left
// out with --no-tokenize. Token ids are encoded with add_special_tokens=false, as vLLM does for
// chat (special tokens come from the template text).
//
// --jsonl: many inputs in one process (loading a tokenizer takes ~0.5 s). Each non-empty stdin
// line is one input — a request body, or with --text a JSON string — and produces one stdout
// line: the object above, or {"error": {"kind", "code", "message"}} for that line.
//
// Exit status: 0 success; 2 bad arguments or an unusable file named by one (missing,
// unreadable, not a valid tokenizer/template/config); 1 the input could not be rendered or
// tokenized (in --jsonl mode: at least one line failed). Errors are typed
// ("ramjet render: <kind> error (<code>): <message>" on stderr), never crashes.
#pragma once

#include <iosfwd>

namespace ramjet::render::cli {

// Runs the subcommand. argv[0] is "render"; argv[1..] are its options.
int run(int argc, char** argv, std::istream& in, std::ostream& out, std::ostream& err);
int run(int argc, char** argv);  // stdin, stdout, stderr

}  // namespace ramjet::render::cli
