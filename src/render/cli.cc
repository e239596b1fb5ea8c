// render::cli: `ramjet render` (see cli.h).
#include "render/cli.h"

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

#include "render/chat_template.h"
#include "render/deepseek_v32.h"
#include "render/tokenizer.h"

namespace ramjet::render::cli {
namespace {

constexpr std::string_view kUsage = R"(usage:
  ramjet render --tokenizer tokenizer.json [--added-tokens override.json]
                (--template chat_template.jinja [--tokenizer-config tokenizer_config.json]
                 | --formatter deepseek-v32) [--no-tokenize] [--jsonl]
  ramjet render --text --tokenizer tokenizer.json [--added-tokens override.json] [--jsonl]

Reads one chat-completions request body (JSON) on stdin and prints
{"rendered": "...", "token_ids": [...]} (no token_ids with --no-tokenize; --tokenizer is then
optional). With --text, reads raw text and prints {"token_ids": [...]}.
  --tokenizer-config  bos_token, eos_token, ... for the template; default: the
                      tokenizer_config.json beside tokenizer.json, if any
  --formatter         a native formatter instead of a template: deepseek-v32
  --jsonl             one input per stdin line (with --text: a JSON string), one output
                      line each; a failed line prints {"error": {kind, code, message}}
Exit status: 0 ok, 2 bad arguments or unusable files, 1 render/tokenize failure.
)";

constexpr std::string_view kFormatterDeepseekV32 = "deepseek-v32";

struct Args {
  std::string tokenizer, added_tokens, templ, tokenizer_config, formatter;
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
      {"--formatter", &Args::formatter},
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
    if (!a.templ.empty() || !a.formatter.empty() || !a.tokenizer_config.empty() || a.no_tokenize) {
      return bad("--text takes only --tokenizer, --added-tokens and --jsonl");
    }
    return std::nullopt;
  }
  if (a.templ.empty() == a.formatter.empty())
    return bad("give exactly one of --template and --formatter");
  if (!a.formatter.empty() && a.formatter != kFormatterDeepseekV32) {
    return bad("unknown formatter '" + a.formatter +
               "' (known: " + std::string(kFormatterDeepseekV32) + ")");
  }
  if (!a.formatter.empty() && !a.tokenizer_config.empty()) {
    return bad("--tokenizer-config applies to --template only");
  }
  if (!a.no_tokenize && a.tokenizer.empty())
    return bad("--tokenizer is required (or --no-tokenize)");
  return std::nullopt;
}

std::optional<Failure> read_file(const std::string& kind, const std::string& path,
                                 std::string& out) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return Failure{kind, "io", path + ": is a directory"};
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Failure{kind, "io", path + ": " + std::strerror(errno)};
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) return Failure{kind, "io", path + ": read error"};
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

// The loaded pieces; turns one input into one output object (JSON text) or a Failure.
class Renderer {
 public:
  std::optional<Failure> load(const Args& a) {
    if (a.text || !a.no_tokenize) {
      auto tok = Tokenizer::from_file(a.tokenizer, {}, a.added_tokens);
      if (!tok) {
        const std::string& m = tok.error().message;
        const bool names_file =
            m.find(a.tokenizer) != std::string::npos ||
            (!a.added_tokens.empty() && m.find(a.added_tokens) != std::string::npos);
        return Failure{"tokenizer", std::string(to_string(tok.error().code)),
                       names_file ? m
                                  : a.tokenizer +
                                        (a.added_tokens.empty() ? "" : " with " + a.added_tokens) +
                                        ": " + m};
      }
      tokenizer_ = std::move(tok.value());
    }
    if (a.templ.empty()) return std::nullopt;
    std::string source;
    if (auto f = read_file("template", a.templ, source)) return f;
    auto parsed = ChatTemplate::parse(source);
    if (!parsed) {
      return Failure{"template", std::string(jinja::to_string(parsed.error().code)),
                     a.templ + line_suffix(parsed.error().line) + ": " + parsed.error().message};
    }
    template_ = std::move(parsed.value());
    std::string config_path = a.tokenizer_config;
    if (config_path.empty() && !a.tokenizer.empty()) {
      auto sibling = std::filesystem::path(a.tokenizer).parent_path() / "tokenizer_config.json";
      std::error_code ec;
      if (std::filesystem::is_regular_file(sibling, ec)) config_path = sibling.string();
    }
    if (!config_path.empty()) {
      std::string config;
      if (auto f = read_file("config", config_path, config)) return f;
      auto st = special_tokens_from_config(config);
      if (!st) {
        return Failure{"config", std::string(jinja::to_string(st.error().code)),
                       config_path + ": " + st.error().message};
      }
      specials_ = std::move(st.value());
    }
    return std::nullopt;
  }

  // A chat request body -> {"rendered": ..., "token_ids": [...]}.
  std::optional<Failure> chat(std::string_view request, std::string& out) const {
    std::string rendered;
    if (template_) {
      auto r = render::render(*template_, request, specials_);
      if (!r) {
        return Failure{"render", std::string(jinja::to_string(r.error().code)),
                       r.error().message + line_suffix(r.error().line)};
      }
      rendered = std::move(r.value());
    } else {
      auto r = deepseek_v32::encode(request);
      if (!r)
        return Failure{"render", std::string(deepseek_v32::to_string(r.error().code)),
                       r.error().message};
      rendered = std::move(r.value());
    }
    out = "{\"rendered\": " + boost::json::serialize(boost::json::string_view(rendered));
    if (tokenizer_) {
      std::vector<uint32_t> ids;
      if (auto f = encode(rendered, ids)) return f;
      out += ", \"token_ids\": ";
      append_ids(out, ids);
    }
    out += "}";
    return std::nullopt;
  }

  // Raw text -> {"token_ids": [...]}.
  std::optional<Failure> text(std::string_view input, std::string& out) const {
    std::vector<uint32_t> ids;
    if (auto f = encode(input, ids)) return f;
    out = "{\"token_ids\": ";
    append_ids(out, ids);
    out += "}";
    return std::nullopt;
  }

 private:
  static std::string line_suffix(int line) {
    return line > 0 ? " (line " + std::to_string(line) + ")" : "";
  }

  std::optional<Failure> encode(std::string_view text, std::vector<uint32_t>& ids) const {
    if (auto e = tokenizer_->encode_into(text, ids, /*add_special_tokens=*/false)) {
      return Failure{"tokenize", std::string(to_string(e->code)), e->message};
    }
    return std::nullopt;
  }

  std::shared_ptr<const Tokenizer> tokenizer_;
  std::optional<ChatTemplate> template_;
  SpecialTokens specials_;
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
    return args.text ? renderer.text(input, result) : renderer.chat(input, result);
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
