// render::cli: `ramjet render` (see cli.h).
#include "render/prompt/cli.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string_view.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "render/template/api_conversion.h"
#include "render/prompt/prompt.h"
#include "render/tokenize/tokenizer.h"

namespace ramjet::render::cli {
namespace {

constexpr std::string_view kUsage = R"(usage:
  ramjet render --tokenizer tokenizer.json [--added-tokens override.json]
                (--template chat_template.jinja [--tokenizer-config tokenizer_config.json]
                 | --formatter deepseek-v32) [--api chat|responses|messages] [--no-tokenize] [--jsonl]
  ramjet render --text --tokenizer tokenizer.json [--added-tokens override.json] [--jsonl]

Reads one chat-completions request body (JSON) on stdin (with --api responses or messages: an
OpenAI Responses or Anthropic Messages body, turned into the chat request vLLM renders) and prints
{"rendered": "...", "token_ids": [...]} (no token_ids with --no-tokenize; --tokenizer is then
optional). With --text, reads raw text and prints {"token_ids": [...]}.
  --tokenizer-config  bos_token, eos_token, ... for the template; default: the
                      tokenizer_config.json beside tokenizer.json, if any
  --formatter         a native formatter instead of a template: deepseek-v32
  --api               the request's API (default chat); a request vLLM's conversion refuses is
                      an input error (code convert_bad_request or convert_unsupported)
  --jsonl             one input per stdin line (with --text: a JSON string), one output
                      line each; a failed line prints {"error": {kind, code, message}}
Exit status: 0 ok, 2 bad arguments or unusable files, 1 render/tokenize failure.
)";


struct Args {
  std::string tokenizer, added_tokens, templ, tokenizer_config, formatter, api;  // api: "" = chat
  bool no_tokenize = false, text = false, jsonl = false, help = false;
};

// A typed failure: kind (usage, tokenizer, template, config, input, render, tokenize), the
// component's error code, and a message.
struct Failure {
  std::string kind, code, message;
};

std::string describe(const Failure& f) {
  std::string s = "ramjet render: " + f.kind + " error";
  if (!f.code.empty()) s += " (" + f.code + ")";
  return s + ": " + f.message;
}

std::optional<Failure> parse_args(int argc, char** argv, Args& a) {
  auto bad = [](std::string m) { return Failure{"usage", "", std::move(m)}; };
  struct ValueOpt {
    std::string_view name;
    std::string Args::*field;
  };
  static constexpr ValueOpt kValueOpts[] = {
      {"--tokenizer", &Args::tokenizer}, {"--added-tokens", &Args::added_tokens},
      {"--template", &Args::templ},      {"--tokenizer-config", &Args::tokenizer_config},
      {"--formatter", &Args::formatter}, {"--api", &Args::api},
  };
  struct FlagOpt {
    std::string_view name;
    bool Args::*field;
  };
  static constexpr FlagOpt kFlags[] = {
      {"--no-tokenize", &Args::no_tokenize},
      {"--text", &Args::text},
      {"--jsonl", &Args::jsonl},
      {"--help", &Args::help},
      {"-h", &Args::help},
  };
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::optional<std::string_view> inline_value;
    if (auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    bool matched = false;
    for (const auto& o : kValueOpts) {
      if (arg != o.name) continue;
      matched = true;
      std::string_view v;
      if (inline_value) {
        v = *inline_value;
      } else if (i + 1 < argc) {
        v = argv[++i];
      } else {
        return bad(std::string(o.name) + " needs a value");
      }
      if (v.empty()) return bad(std::string(o.name) + " needs a non-empty value");
      if (!(a.*o.field).empty()) return bad(std::string(o.name) + " given twice");
      a.*o.field = std::string(v);
    }
    for (const auto& f : kFlags) {
      if (arg != f.name) continue;
      matched = true;
      if (inline_value) return bad(std::string(f.name) + " takes no value");
      a.*f.field = true;
    }
    if (!matched) return bad("unknown argument '" + std::string(argv[i]) + "'");
  }
  if (a.help) return std::nullopt;
  if (!a.added_tokens.empty() && a.tokenizer.empty())
    return bad("--added-tokens needs --tokenizer");
  if (a.text) {
    if (a.tokenizer.empty()) return bad("--text needs --tokenizer");
    if (!a.templ.empty() || !a.formatter.empty() || !a.tokenizer_config.empty() || a.no_tokenize ||
        !a.api.empty()) {
      return bad("--text takes only --tokenizer, --added-tokens and --jsonl");
    }
    return std::nullopt;
  }
  if (a.templ.empty() == a.formatter.empty())
    return bad("give exactly one of --template and --formatter");
  if (!a.formatter.empty() && !native_formatter_known(a.formatter)) {
    return bad("unknown formatter '" + a.formatter +
               "' (known: " + native_formatter_list() + ")");
  }
  if (!a.formatter.empty() && !a.tokenizer_config.empty()) {
    return bad("--tokenizer-config applies to --template only");
  }
  if (!a.no_tokenize && a.tokenizer.empty())
    return bad("--tokenizer is required (or --no-tokenize)");
  if (a.api.empty()) a.api = "chat";
  if (a.api != "chat" && a.api != "responses" && a.api != "messages")
    return bad("--api takes chat, responses or messages");
  return std::nullopt;
}

void append_ids(std::string& s, const std::vector<uint32_t>& ids) {
  s += "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ids[i]);
  }
  s += "]";
}

std::string failure_json(const Failure& f) {
  return "{\"error\": {\"kind\": " + boost::json::serialize(boost::json::string_view(f.kind)) +
         ", \"code\": " + boost::json::serialize(boost::json::string_view(f.code)) +
         ", \"message\": " + boost::json::serialize(boost::json::string_view(f.message)) + "}}";
}

// The loaded prompt pipeline; turns one input into one output object (JSON text) or a Failure.
class Renderer {
 public:
  std::optional<Failure> load(const Args& a) {
    PromptSources src;
    if (a.text || !a.no_tokenize) {
      src.tokenizer_path = a.tokenizer;
      src.added_tokens_path = a.added_tokens;
    }
    if (a.text) {
      // Text mode needs no template: load the tokenizer alone.
      auto tok = Tokenizer::from_file(a.tokenizer, {}, a.added_tokens);
      if (!tok) return tokenizer_failure(a, tok.error());
      tokenizer_ = std::move(tok.value());
      return std::nullopt;
    }
    src.template_path = a.templ;
    src.native_formatter = a.formatter;
    src.tokenizer_config_path = a.tokenizer_config;
    if (src.tokenizer_config_path.empty() && !a.tokenizer.empty() && !a.templ.empty()) {
      auto sibling = std::filesystem::path(a.tokenizer).parent_path() / "tokenizer_config.json";
      std::error_code ec;
      if (std::filesystem::is_regular_file(sibling, ec)) src.tokenizer_config_path = sibling.string();
    }
    auto r = PromptRenderer::load(src);
    if (!r) return failure(r.error());
    prompt_ = std::move(r.value());
    return std::nullopt;
  }

  // A chat request body -> {"rendered": ..., "token_ids": [...]}.
  std::optional<Failure> chat(std::string_view request, std::string& out) const {
    auto r = prompt_->chat(request);
    if (!r) return failure(r.error());
    out = "{\"rendered\": " + boost::json::serialize(boost::json::string_view(r->text));
    if (prompt_->has_tokenizer()) {
      out += ", \"token_ids\": ";
      append_ids(out, r->ids);
    }
    out += "}";
    return std::nullopt;
  }

  // Raw text -> {"token_ids": [...]}.
  std::optional<Failure> text(std::string_view input, std::string& out) const {
    std::vector<uint32_t> ids;
    if (auto e = tokenizer_->encode_into(input, ids, /*add_special_tokens=*/false)) {
      return Failure{"tokenize", std::string(to_string(e->code)), e->message};
    }
    out = "{\"token_ids\": ";
    append_ids(out, ids);
    out += "}";
    return std::nullopt;
  }

 private:
  static Failure tokenizer_failure(const Args& a, const TokenizerError& e) {
    const std::string& m = e.message;
    const bool names_file = m.find(a.tokenizer) != std::string::npos ||
                            (!a.added_tokens.empty() && m.find(a.added_tokens) != std::string::npos);
    return Failure{"tokenizer", std::string(to_string(e.code)),
                   names_file ? m
                              : a.tokenizer + (a.added_tokens.empty() ? "" : " with " + a.added_tokens) +
                                    ": " + m};
  }
  // The CLI's error kinds: a request that is not a chat request is a render error, an encode
  // failure a tokenize error; the rest keep the pipeline's kind.
  static Failure failure(const PromptError& e) {
    std::string kind = e.kind == PromptErrc::kDecode   ? "render"
                       : e.kind == PromptErrc::kEncode ? "tokenize"
                                                       : std::string(to_string(e.kind));
    return Failure{std::move(kind), e.code, e.message};
  }

  std::shared_ptr<const PromptRenderer> prompt_;
  std::shared_ptr<const Tokenizer> tokenizer_;  // --text
};

}  // namespace

int run(int argc, char** argv, std::istream& in, std::ostream& out, std::ostream& err) {
  Args args;
  if (auto f = parse_args(argc, argv, args)) {
    err << describe(*f) << "\n" << kUsage;
    return 2;
  }
  if (args.help) {
    out << kUsage;
    return 0;
  }
  Renderer renderer;
  if (auto f = renderer.load(args)) {
    err << describe(*f) << "\n";
    return 2;
  }
  auto process = [&](std::string_view input, std::string& result) -> std::optional<Failure> {
    if (args.text) return renderer.text(input, result);
    if (args.api == "chat") return renderer.chat(input, result);
    boost::system::error_code ec;
    boost::json::parse_options opt;
    opt.max_depth = 128;  // as the tokenizer service parses
    boost::json::value body = boost::json::parse(input, ec, {}, opt);
    if (ec || !body.is_object()) return Failure{"input", "bad_json", "the request is not a JSON object"};
    auto chat = to_chat_request(args.api == "responses" ? PromptApi::kResponses : PromptApi::kMessages,
                                std::move(body.as_object()));
    if (!chat.ok()) {
      return Failure{"input",
                     chat.error().kind == ConversionError::kBadRequest ? "convert_bad_request" : "convert_unsupported",
                     chat.error().message};
    }
    return renderer.chat(boost::json::serialize(chat.value()), result);
  };

  if (!args.jsonl) {
    const std::string input((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string result;
    if (auto f = process(input, result)) {
      err << describe(*f) << "\n";
      return 1;
    }
    out << result << "\n";
    out.flush();
    return out ? 0 : 1;
  }

  size_t lines = 0, failed = 0;
  std::string line, result;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++lines;
    std::optional<Failure> f;
    if (args.text) {
      // Each line is a JSON string holding the text.
      boost::system::error_code ec;
      auto v = boost::json::parse(line, ec);
      if (ec || !v.is_string()) {
        f = Failure{"input", "bad_json", "line " + std::to_string(lines) + " is not a JSON string"};
      } else {
        const auto& s = v.as_string();
        f = process(std::string_view(s.data(), s.size()), result);
      }
    } else {
      f = process(line, result);
    }
    if (f) {
      ++failed;
      out << failure_json(*f) << "\n";
    } else {
      out << result << "\n";
    }
    out.flush();
  }
  if (failed) {
    err << "ramjet render: " << failed << " of " << lines << " input lines failed\n";
    return 1;
  }
  return out ? 0 : 1;
}

int run(int argc, char** argv) {
  return run(argc, argv, std::cin, std::cout, std::cerr);
}

}  // namespace ramjet::render::cli
