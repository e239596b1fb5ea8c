// Lexer and parser: template source -> AST, following jinja2 3.1's lexer (newline
// normalisation, keep_trailing_newline=False, trim_blocks, lstrip_blocks, -/+ whitespace
// control) and parser (operator precedence, filters and tests, statements).
#include <algorithm>
#include <charconv>
#include <cstring>
#include <set>

#include "render/template/jinja/ast.h"
#include "render/template/jinja/parser.h"

namespace ramjet::render::jinja {

namespace {

enum class TK { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kInt, kFloat, kString, kOp, kEof };

struct Tok {
  TK type;
  std::string text;
  int line;
  Value value;  // int/float/string literal
};

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Python's str.rstrip()/lstrip() and re's \s on template text: Unicode whitespace.
size_t ws_len_at(const std::string& s, size_t p) {
  if (p >= s.size()) return 0;
  auto c = static_cast<unsigned char>(s[p]);
  if (c < 0x80) return is_ws(s[p]) || (c >= 0x1c && c <= 0x1f) ? 1 : 0;
  size_t n = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
  auto cps = utf8_decode(std::string_view(s).substr(p, n));
  return cps.size() == 1 && py_isspace(cps[0]) ? n : 0;
}
void rstrip_ws(std::string& text) {
  size_t e = text.size();
  while (e > 0) {
    size_t b = e - 1;
    while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80 && e - b < 4) --b;
    if (ws_len_at(text, b) != e - b) break;
    e = b;
  }
  text.resize(e);
}
bool all_ws_from(const std::string& text, size_t p) {
  while (p < text.size()) {
    size_t n = ws_len_at(text, p);
    if (!n) return false;
    p += n;
  }
  return true;
}

// Python str.splitlines() boundaries become "\n"; one trailing line break is dropped.
std::string normalize_newlines(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    auto c = static_cast<unsigned char>(src[i]);
    if (c == '\r') {
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
      out += '\n';
    } else if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
      out += '\n';
    } else if (c == 0xC2 && i + 1 < src.size() && static_cast<unsigned char>(src[i + 1]) == 0x85) {
      out += '\n';
      ++i;
    } else if (c == 0xE2 && i + 2 < src.size() && static_cast<unsigned char>(src[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(src[i + 2]) == 0xA8 ||
                static_cast<unsigned char>(src[i + 2]) == 0xA9)) {
      out += '\n';
      i += 2;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  bool run(std::vector<Tok>& toks, RenderError& err) {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      size_t start = find_tag(pos);
      std::string text = s_.substr(pos, start - pos);
      if (start == s_.size()) {
        emit_data(toks, std::move(text));
        break;
      }
      char kind = s_[start + 1];
      char sign = start + 2 < s_.size() ? s_[start + 2] : 0;
      if (sign == '-') {
        rstrip_ws(text);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks
        size_t l = text.rfind('\n');
        l = l == std::string::npos ? 0 : l + 1;
        if ((l > 0 || line_starting) && all_ws_from(text, l)) text.resize(l);
      }
      emit_data(toks, std::move(text));
      line_ = line_at(start);
      size_t p = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '%') {
        size_t raw_end = 0;
        int r = lex_raw(p, toks, raw_end, err);
        if (r < 0) return false;
        if (r > 0) {
          pos = raw_end;
          line_starting = pos == 0 || s_[pos - 1] == '\n';
          continue;
        }
      }
      if (kind == '#') {
        size_t e = s_.find("#}", p);
        if (e == std::string::npos) return fail(err, "missing end of comment tag");
        bool strip = e > p && s_[e - 1] == '-';
        bool keep = e > p && s_[e - 1] == '+';
        pos = after_end(e + 2, strip, keep, true);
      } else {
        toks.push_back({kind == '{' ? TK::kVarBegin : TK::kBlockBegin, {}, line_, {}});
        size_t end_pos = 0;
        if (!lex_expr(p, kind == '{' ? '}' : '%', toks, err, end_pos)) return false;
        pos = end_pos;
      }
      line_starting = pos == 0 || s_[pos - 1] == '\n';
    }
    toks.push_back({TK::kEof, {}, line_at(s_.size()), {}});
    return true;
  }

 private:
  size_t find_tag(size_t pos) const {
    while (true) {
      size_t i = s_.find('{', pos);
      if (i == std::string::npos || i + 1 >= s_.size()) return s_.size();
      char n = s_[i + 1];
      if (n == '{' || n == '%' || n == '#') return i;
      pos = i + 1;
    }
  }
  int line_at(size_t pos) {
    // incremental line counting
    while (lc_pos_ < pos && lc_pos_ < s_.size()) {
      if (s_[lc_pos_] == '\n') ++lc_line_;
      ++lc_pos_;
    }
    return lc_line_;
  }
  void emit_data(std::vector<Tok>& toks, std::string text) {
    if (!text.empty()) toks.push_back({TK::kData, std::move(text), line_, {}});
  }
  bool fail(RenderError& err, std::string msg) {
    err = {RenderErrc::kSyntax, std::move(msg), line_};
    return false;
  }
  // Matches `ws* name ws* [-+]? %}` at p; returns the position after it (0 if no match) and
  // the sign before %}.
  size_t match_tag_rest(size_t p, std::string_view name, char& sign) const {
    while (p < s_.size() && is_ws(s_[p])) ++p;
    if (s_.compare(p, name.size(), name) != 0) return 0;
    p += name.size();
    if (p < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[p])) || s_[p] == '_')) return 0;
    while (p < s_.size() && is_ws(s_[p])) ++p;
    sign = 0;
    if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) sign = s_[p++];
    if (s_.compare(p, 2, "%}") != 0) return 0;
    return p + 2;
  }
  // {% raw %}...{% endraw %}: 1 if a raw block was lexed (out = position after it), 0 if the
  // tag is not raw, -1 on error.
  int lex_raw(size_t p, std::vector<Tok>& toks, size_t& out, RenderError& err) {
    char sign = 0;
    size_t body = match_tag_rest(p, "raw", sign);
    if (!body) return 0;
    body = after_end(body, sign == '-', true, true);  // jinja2: no trim_blocks after {% raw %}
    size_t search = body;
    while (true) {
      size_t e = s_.find("{%", search);
      if (e == std::string::npos) { fail(err, "missing endraw"); return -1; }
      size_t q = e + 2;
      char open_sign = 0;
      if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) open_sign = s_[q++];
      char end_sign = 0;
      size_t after = match_tag_rest(q, "endraw", end_sign);
      if (!after) { search = e + 2; continue; }
      std::string text = s_.substr(body, e - body);
      if (open_sign == '-') {
        rstrip_ws(text);
      } else if (open_sign != '+') {  // lstrip_blocks before {% endraw %}
        size_t l = text.rfind('\n');
        l = l == std::string::npos ? 0 : l + 1;
        if (all_ws_from(text, l) && (l > 0 || body == 0 || s_[body - 1] == '\n')) text.resize(l);
      }
      emit_data(toks, std::move(text));
      out = after_end(after, end_sign == '-', end_sign == '+', true);
      return 1;
    }
  }

  // Position after a tag end; `block` tags get trim_blocks.
  size_t after_end(size_t p, bool strip, bool keep, bool block) {
    if (strip) {
      while (size_t n = ws_len_at(s_, p)) p += n;
    } else if (block && !keep && p < s_.size() && s_[p] == '\n') {
      ++p;
    }
    return p;
  }

  bool lex_expr(size_t p, char end_char, std::vector<Tok>& toks, RenderError& err, size_t& out) {
    int balance = 0;
    while (true) {
      while (p < s_.size() && is_ws(s_[p])) ++p;
      if (p >= s_.size()) return fail(err, "unexpected end of template inside a tag");
      line_ = line_at(p);
      if (balance == 0) {
        size_t q = p;
        bool strip = false, keep = false;
        if ((s_[q] == '-' || s_[q] == '+') && q + 2 < s_.size() + 0 && s_[q + 1] == end_char &&
            s_[q + 2] == '}') {
          strip = s_[q] == '-';
          keep = s_[q] == '+';
          ++q;
        }
        if (q + 1 < s_.size() && s_[q] == end_char && s_[q + 1] == '}' && (end_char == '%' || q == p || strip)) {
          if (end_char == '}' && keep) return fail(err, "unexpected '+'");
          toks.push_back({end_char == '}' ? TK::kVarEnd : TK::kBlockEnd, {}, line_, {}});
          out = after_end(q + 2, strip, keep, end_char == '%');
          return true;
        }
      }
      char c = s_[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[q])) || s_[q] == '_')) ++q;
        toks.push_back({TK::kName, s_.substr(p, q - p), line_, {}});
        p = q;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t q = p;
        while (q < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[q])) || s_[q] == '_')) ++q;
        bool is_float = false;
        if (q + 1 < s_.size() && s_[q] == '.' && std::isdigit(static_cast<unsigned char>(s_[q + 1]))) {
          is_float = true;
          ++q;
          while (q < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[q])) || s_[q] == '_')) ++q;
        }
        if (q < s_.size() && (s_[q] == 'e' || s_[q] == 'E')) {
          size_t r = q + 1;
          if (r < s_.size() && (s_[r] == '+' || s_[r] == '-')) ++r;
          if (r < s_.size() && std::isdigit(static_cast<unsigned char>(s_[r]))) {
            is_float = true;
            q = r;
            while (q < s_.size() && std::isdigit(static_cast<unsigned char>(s_[q]))) ++q;
          }
        }
        std::string num;
        for (size_t i = p; i < q; ++i)
          if (s_[i] != '_') num += s_[i];
        Tok t{is_float ? TK::kFloat : TK::kInt, num, line_, {}};
        if (is_float) {
          t.value = Value(std::strtod(num.c_str(), nullptr));
        } else {
          int64_t v = 0;
          auto r = std::from_chars(num.data(), num.data() + num.size(), v);
          if (r.ec != std::errc()) return fail(err, "integer literal too large");
          t.value = Value(v);
        }
        toks.push_back(std::move(t));
        p = q;
      } else if (c == '\'' || c == '"') {
        std::string v;
        size_t q = p + 1;
        while (true) {
          if (q >= s_.size()) return fail(err, "unterminated string");
          char ch = s_[q];
          if (ch == c) break;
          if (ch == '\\' && q + 1 < s_.size()) {
            if (!unescape(q, v)) return fail(err, "bad escape in string");
            continue;
          }
          v += ch;
          ++q;
        }
        toks.push_back({TK::kString, {}, line_, Value(std::move(v))});
        p = q + 1;
      } else {
        static const char* ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                    "~", "<", ">", "=", "(", ")", "[", "]", "{", "}", ",", ".",
                                    ":", "|", ";"};
        std::string op;
        for (const char* o : ops) {
          size_t n = std::strlen(o);
          if (s_.compare(p, n, o) == 0) { op = o; break; }
        }
        if (op.empty()) return fail(err, std::string("unexpected character in tag"));
        if (op == "(" || op == "[" || op == "{") ++balance;
        if (op == ")" || op == "]" || op == "}") {
          if (balance == 0) return fail(err, "unbalanced '" + op + "'");
          --balance;
        }
        toks.push_back({TK::kOp, op, line_, {}});
        p += op.size();
      }
    }
  }

  // Python "unicode-escape" decoding of one escape at s_[q] == '\\'; advances q.
  bool unescape(size_t& q, std::string& v) {
    char e = s_[q + 1];
    auto hex = [&](size_t start, int n, uint32_t& cp) {
      cp = 0;
      if (start + static_cast<size_t>(n) > s_.size()) return false;
      for (int i = 0; i < n; ++i) {
        char h = s_[start + static_cast<size_t>(i)];
        int d = std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (d < 0) return false;
        cp = cp * 16 + static_cast<uint32_t>(d);
      }
      return true;
    };
    switch (e) {
      case 'n': v += '\n'; q += 2; return true;
      case 't': v += '\t'; q += 2; return true;
      case 'r': v += '\r'; q += 2; return true;
      case '\\': v += '\\'; q += 2; return true;
      case '\'': v += '\''; q += 2; return true;
      case '"': v += '"'; q += 2; return true;
      case 'a': v += '\a'; q += 2; return true;
      case 'b': v += '\b'; q += 2; return true;
      case 'f': v += '\f'; q += 2; return true;
      case 'v': v += '\v'; q += 2; return true;
      case '\n': q += 2; return true;
      case 'x': case 'u': case 'U': {
        int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp;
        if (!hex(q + 2, n, cp) || cp > 0x10FFFF) return false;
        utf8_append(v, cp);
        q += 2 + static_cast<size_t>(n);
        return true;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = 0;
          size_t i = q + 1;
          for (int k = 0; k < 3 && i < s_.size() && s_[i] >= '0' && s_[i] <= '7'; ++k, ++i)
            cp = cp * 8 + static_cast<uint32_t>(s_[i] - '0');
          utf8_append(v, cp);
          q = i;
          return true;
        }
        v += '\\';  // unknown escapes stay as written
        q += 1;
        return true;
    }
  }

  std::string s_;
  int line_ = 1;
  size_t lc_pos_ = 0;
  int lc_line_ = 1;
};

// jinja2's filters that the interpreter does not implement: they parse, and fail at render time
// as unsupported (the implemented ones are its filter table: is_implemented_filter).
const std::set<std::string, std::less<>>& unimplemented_filters() {
  static const std::set<std::string, std::less<>> f = {
      "filesizeformat", "pprint", "random", "slice", "urlencode", "urlize", "wordwrap", "xmlattr"};
  return f;
}
const std::set<std::string, std::less<>>& known_tests() {
  static const std::set<std::string, std::less<>> t = {
      "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even",
      "false", "filter", "float", "ge", "greaterthan", "gt", "in", "integer", "iterable", "le",
      "lessthan", "lower", "lt", "mapping", "ne", "none", "number", "odd", "sameas", "sequence",
      "string", "test", "true", "undefined", "upper", "==", "!=", "<", "<=", ">", ">="};
  return t;
}

class Parser {
 public:
  Parser(std::vector<Tok> toks, Template& t, const Limits& limits)
      : t_(toks), tpl_(t), limits_(limits) {}

  bool parse(const Node*& root, RenderError& err) {
    Node* body = node(NK::kBody);
    std::string end;
    if (!subparse(body, {}, end)) { err = err_; return false; }
    if (!end.empty()) { err = {RenderErrc::kSyntax, "unexpected '" + end + "'", cur().line}; return false; }
    root = body;
    return true;
  }

 private:
  Node* node(NK kind) {
    tpl_.pool_.push_back(std::make_unique<Node>());
    Node* n = tpl_.pool_.back().get();
    n->kind = kind;
    n->line = cur().line;
    return n;
  }
  const Tok& cur() const { return t_[i_]; }
  const Tok& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void next() { if (i_ + 1 < t_.size()) ++i_; }
  bool fail(std::string msg) {
    if (err_.message.empty()) err_ = {RenderErrc::kSyntax, std::move(msg), cur().line};
    return false;
  }
  bool is_op(const char* op) const { return cur().type == TK::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == TK::kName && cur().text == n; }
  bool expect_op(const char* op) {
    if (!is_op(op)) return fail(std::string("expected '") + op + "'");
    next();
    return true;
  }
  bool expect_block_end() {
    if (cur().type != TK::kBlockEnd) return fail("expected end of statement block");
    next();
    return true;
  }
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) { ++p.depth_; }
    ~DepthGuard() { --p.depth_; }
  };
  bool too_deep() { return depth_ > limits_.max_depth && !fail("template nested too deeply"); }

  // Parses statements until `{% <one of ends> ...`; `end` gets the name found ("" at EOF).
  bool subparse(Node* body, const std::vector<std::string>& ends, std::string& end) {
    DepthGuard g(*this);
    if (too_deep()) return false;
    end.clear();
    while (cur().type != TK::kEof) {
      if (cur().type == TK::kData) {
        Node* n = node(NK::kText);
        n->literal = Value(cur().text);
        body->kids.push_back(n);
        next();
      } else if (cur().type == TK::kVarBegin) {
        next();
        Node* n = node(NK::kEmit);
        const Node* e = nullptr;
        if (!parse_tuple(e, false)) return false;
        n->a = e;
        if (cur().type != TK::kVarEnd) return fail("expected end of print statement");
        next();
        body->kids.push_back(n);
      } else if (cur().type == TK::kBlockBegin) {
        next();
        if (cur().type != TK::kName) return fail("expected statement name");
        std::string name = cur().text;
        if (std::find(ends.begin(), ends.end(), name) != ends.end()) {
          end = name;
          return true;
        }
        const Node* stmt = nullptr;
        if (!parse_statement(name, stmt)) return false;
        if (stmt) body->kids.push_back(stmt);
      } else {
        return fail("unexpected token");
      }
    }
    return true;
  }

  bool parse_statement(const std::string& name, const Node*& out) {
    int line = cur().line;
    if (name == "if") return parse_if(out);
    if (name == "for") return parse_for(out);
    if (name == "set") return parse_set(out);
    if (name == "macro") return parse_macro(out);
    if (name == "call") return parse_call_block(out);
    if (name == "filter") return parse_filter_block(out);
    if (name == "with") return parse_with(out);
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return fail("'" + name + "' outside of a loop");
      next();
      Node* n = node(name == "break" ? NK::kBreak : NK::kContinue);
      n->line = line;
      out = n;
      return expect_block_end();
    }
    if (name == "generation") {  // transformers' AssistantTracker: renders its body
      next();
      if (!expect_block_end()) return false;
      Node* body = node(NK::kBody);
      std::string end;
      if (!subparse(body, {"endgeneration"}, end)) return false;
      if (end.empty()) return fail("missing endgeneration");
      next();
      out = body;
      return expect_block_end();
    }
    return fail("unknown tag '" + name + "'");
  }

  bool parse_if(const Node*& out) {
    next();  // if / elif
    Node* n = node(NK::kIf);
    const Node* cond = nullptr;
    if (!parse_tuple(cond, false) || !expect_block_end()) return false;
    n->a = cond;
    Node* body = node(NK::kBody);
    std::string end;
    if (!subparse(body, {"elif", "else", "endif"}, end)) return false;
    n->b = body;
    if (end.empty()) return fail("missing endif");
    if (end == "elif") {
      const Node* rest = nullptr;
      if (!parse_if(rest)) return false;
      Node* eb = node(NK::kBody);
      eb->kids.push_back(rest);
      n->c = eb;
      out = n;
      return true;  // the nested if consumed endif
    }
    if (end == "else") {
      next();
      if (!expect_block_end()) return false;
      Node* eb = node(NK::kBody);
      if (!subparse(eb, {"endif"}, end)) return false;
      if (end.empty()) return fail("missing endif");
      n->c = eb;
    }
    next();  // endif
    out = n;
    return expect_block_end();
  }

  bool parse_assign_target(std::vector<std::string>& names) {
    bool paren = is_op("(");
    if (paren) next();
    while (true) {
      if (cur().type != TK::kName) return fail("expected a name");
      names.push_back(cur().text);
      next();
      if (!is_op(",")) break;
      next();
      if (paren && is_op(")")) break;
      if (!paren && is_name("in")) break;
    }
    if (paren && !expect_op(")")) return false;
    return true;
  }

  bool parse_for(const Node*& out) {
    next();
    Node* n = node(NK::kFor);
    if (!parse_assign_target(n->names)) return false;
    if (!is_name("in")) return fail("expected 'in'");
    next();
    const Node* it = nullptr;
    if (!parse_tuple(it, true, /*no_cond=*/true)) return false;
    n->a = it;
    if (is_name("if")) {
      next();
      const Node* f = nullptr;
      if (!parse_expression(f)) return false;
      n->d = f;
    }
    if (is_name("recursive")) {
      n->flag = true;
      next();
    }
    if (!expect_block_end()) return false;
    Node* body = node(NK::kBody);
    std::string end;
    ++loop_depth_;
    bool ok = subparse(body, {"else", "endfor"}, end);
    --loop_depth_;
    if (!ok) return false;
    if (end.empty()) return fail("missing endfor");
    n->b = body;
    if (end == "else") {
      next();
      if (!expect_block_end()) return false;
      Node* eb = node(NK::kBody);
      int saved = loop_depth_;
      loop_depth_ = 0;
      ok = subparse(eb, {"endfor"}, end);
      loop_depth_ = saved;
      if (!ok) return false;
      if (end.empty()) return fail("missing endfor");
      n->c = eb;
    }
    next();
    out = n;
    return expect_block_end();
  }

  bool parse_set(const Node*& out) {
    next();
    if (cur().type == TK::kName && peek().type == TK::kOp && peek().text == "." &&
        peek(2).type == TK::kName) {
      Node* n = node(NK::kSetAttr);
      n->names = {cur().text, peek(2).text};
      next(); next(); next();
      if (!expect_op("=")) return false;
      const Node* v = nullptr;
      if (!parse_tuple(v, false)) return false;
      n->a = v;
      out = n;
      return expect_block_end();
    }
    std::vector<std::string> names;
    if (!parse_assign_target(names)) return false;
    if (is_op("=")) {
      next();
      Node* n = node(NK::kSet);
      n->names = std::move(names);
      const Node* v = nullptr;
      if (!parse_tuple(v, false)) return false;
      n->a = v;
      out = n;
      return expect_block_end();
    }
    if (names.size() != 1) return fail("expected '='");
    Node* n = node(NK::kSetBlock);
    n->names = std::move(names);
    if (is_op("|")) {  // {% set x | filter %}
      const Node* f = nullptr;
      Node* placeholder = node(NK::kName);
      placeholder->name = "\x01block";
      if (!parse_filters(placeholder, f)) return false;
      n->d = f;
      n->a = placeholder;
    }
    if (!expect_block_end()) return false;
    Node* body = node(NK::kBody);
    std::string end;
    if (!subparse(body, {"endset"}, end)) return false;
    if (end.empty()) return fail("missing endset");
    next();
    n->b = body;
    out = n;
    return expect_block_end();
  }

  bool parse_signature(Node* n) {
    if (!expect_op("(")) return false;
    while (!is_op(")")) {
      if (!n->names.empty() && !expect_op(",")) return false;
      if (is_op(")")) break;
      if (cur().type != TK::kName) return fail("expected parameter name");
      n->names.push_back(cur().text);
      next();
      const Node* def = nullptr;
      if (is_op("=")) {
        next();
        if (!parse_expression(def)) return false;
      }
      if (n->names.back() == "caller") {
        if (!def)
          return fail("the special 'caller' argument must be omitted or be given a default");
        n->explicit_caller = true;
      }
      n->kw.push_back(def);
    }
    next();
    return true;
  }

  bool parse_macro(const Node*& out) {
    next();
    if (cur().type != TK::kName) return fail("expected macro name");
    Node* n = node(NK::kMacro);
    n->name = cur().text;
    next();
    if (!parse_signature(n) || !expect_block_end()) return false;
    Node* body = node(NK::kBody);
    std::string end;
    int saved = loop_depth_;
    loop_depth_ = 0;
    macros_.push_back(n);
    bool ok = subparse(body, {"endmacro"}, end);
    macros_.pop_back();
    loop_depth_ = saved;
    if (!ok) return false;
    if (end.empty()) return fail("missing endmacro");
    next();
    if (cur().type == TK::kName && cur().text == n->name) next();
    n->b = body;
    out = n;
    return expect_block_end();
  }

  bool parse_call_block(const Node*& out) {
    next();
    Node* n = node(NK::kCallBlock);
    Node* sig = node(NK::kMacro);  // caller's own parameters
    sig->name = "caller";
    macros_.push_back(sig);
    if (is_op("(")) {
      if (!parse_signature(sig)) return false;
    }
    const Node* call = nullptr;
    if (!parse_expression(call)) return false;
    if (call->kind != NK::kCall) return fail("expected a call");
    if (!expect_block_end()) return false;
    Node* body = node(NK::kBody);
    std::string end;
    bool ok = subparse(body, {"endcall"}, end);
    macros_.pop_back();
    if (!ok) return false;
    if (end.empty()) return fail("missing endcall");
    next();
    sig->b = body;
    n->a = call;
    n->b = sig;
    out = n;
    return expect_block_end();
  }

  // {% with a = x, (b, c) = y %}body{% endwith %}: kids are kSet nodes whose values are
  // evaluated in the enclosing scope and assigned in the block's own scope.
  bool parse_with(const Node*& out) {
    next();
    Node* n = node(NK::kWith);
    while (cur().type != TK::kBlockEnd) {
      if (!n->kids.empty() && !expect_op(",")) return false;
      Node* set = node(NK::kSet);
      if (!parse_assign_target(set->names) || !expect_op("=")) return false;
      const Node* v = nullptr;
      if (!parse_expression(v)) return false;
      set->a = v;
      n->kids.push_back(set);
    }
    next();
    Node* body = node(NK::kBody);
    std::string end;
    if (!subparse(body, {"endwith"}, end)) return false;
    if (end.empty()) return fail("missing endwith");
    next();
    n->b = body;
    out = n;
    return expect_block_end();
  }

  bool parse_filter_block(const Node*& out) {
    next();
    Node* n = node(NK::kFilterBlock);
    Node* placeholder = node(NK::kName);
    placeholder->name = "\x01block";
    const Node* f = nullptr;
    --i_;  // parse_filters expects to sit on '|'; fake it by reusing the 'filter' name token
    t_[i_] = Tok{TK::kOp, "|", t_[i_].line, {}};
    if (!parse_filters(placeholder, f)) return false;
    n->a = placeholder;
    n->d = f;
    if (!expect_block_end()) return false;
    Node* body = node(NK::kBody);
    std::string end;
    if (!subparse(body, {"endfilter"}, end)) return false;
    if (end.empty()) return fail("missing endfilter");
    next();
    n->b = body;
    out = n;
    return expect_block_end();
  }

  // ---- expressions
  // tuple without parentheses: `a, b` (only where jinja allows it).
  bool parse_tuple(const Node*& out, bool allow_tuple, bool no_cond = false) {
    const Node* first = nullptr;
    if (!(no_cond ? parse_or(first) : parse_expression(first))) return false;
    if (!allow_tuple || !is_op(",")) {
      if (!is_op(",")) { out = first; return true; }
    }
    Node* t = node(NK::kTuple);
    t->kids.push_back(first);
    while (is_op(",")) {
      next();
      if (cur().type == TK::kVarEnd || cur().type == TK::kBlockEnd || is_name("if") || is_op(")")) break;
      const Node* e = nullptr;
      if (!(no_cond ? parse_or(e) : parse_expression(e))) return false;
      t->kids.push_back(e);
    }
    out = t;
    return true;
  }

  bool parse_expression(const Node*& out) {
    DepthGuard g(*this);
    if (too_deep()) return false;
    const Node* e = nullptr;
    if (!parse_or(e)) return false;
    while (is_name("if")) {
      next();
      Node* n = node(NK::kCond);
      const Node* cond = nullptr;
      if (!parse_or(cond)) return false;
      n->a = cond;
      n->b = e;
      if (is_name("else")) {
        next();
        const Node* other = nullptr;
        if (!parse_expression(other)) return false;
        n->c = other;
      }
      e = n;
    }
    out = e;
    return true;
  }

  // A left-associative chain `operand word operand word ...` of one node kind.
  bool parse_chain(const Node*& out, const char* word, NK kind, bool (Parser::*operand)(const Node*&)) {
    const Node* l = nullptr;
    if (!(this->*operand)(l)) return false;
    while (is_name(word)) {
      next();
      const Node* r = nullptr;
      if (!(this->*operand)(r)) return false;
      Node* n = node(kind);
      n->a = l;
      n->b = r;
      l = n;
    }
    out = l;
    return true;
  }
  bool parse_or(const Node*& out) { return parse_chain(out, "or", NK::kOr, &Parser::parse_and); }
  bool parse_and(const Node*& out) { return parse_chain(out, "and", NK::kAnd, &Parser::parse_not); }
  bool parse_not(const Node*& out) {
    if (is_name("not")) {
      DepthGuard g(*this);
      if (too_deep()) return false;
      next();
      Node* n = node(NK::kNot);
      const Node* x = nullptr;
      if (!parse_not(x)) return false;
      n->a = x;
      out = n;
      return true;
    }
    return parse_compare(out);
  }
  bool parse_compare(const Node*& out) {
    const Node* l = nullptr;
    if (!parse_math1(l)) return false;
    Node* cmp = nullptr;
    while (true) {
      std::string op;
      if (cur().type == TK::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == TK::kName && peek().text == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(NK::kCompare);
        cmp->kids.push_back(l);
      }
      const Node* r = nullptr;
      if (!parse_math1(r)) return false;
      cmp->names.push_back(op);
      cmp->kids.push_back(r);
    }
    out = cmp ? cmp : l;
    return true;
  }
  Node* binary(const std::string& op, const Node* l, const Node* r) {
    Node* n = node(NK::kBinary);
    n->name = op;
    n->a = l;
    n->b = r;
    return n;
  }
  bool parse_math1(const Node*& out) {
    const Node* l = nullptr;
    if (!parse_concat(l)) return false;
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      next();
      const Node* r = nullptr;
      if (!parse_concat(r)) return false;
      l = binary(op, l, r);
    }
    out = l;
    return true;
  }
  bool parse_concat(const Node*& out) {
    const Node* l = nullptr;
    if (!parse_math2(l)) return false;
    while (is_op("~")) {
      next();
      const Node* r = nullptr;
      if (!parse_math2(r)) return false;
      l = binary("~", l, r);
    }
    out = l;
    return true;
  }
  bool parse_math2(const Node*& out) {
    const Node* l = nullptr;
    if (!parse_pow(l)) return false;
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      next();
      const Node* r = nullptr;
      if (!parse_pow(r)) return false;
      l = binary(op, l, r);
    }
    out = l;
    return true;
  }
  bool parse_pow(const Node*& out) {
    const Node* l = nullptr;
    if (!parse_unary(l, true)) return false;
    while (is_op("**")) {
      next();
      const Node* r = nullptr;
      if (!parse_unary(r, true)) return false;
      l = binary("**", l, r);
    }
    out = l;
    return true;
  }
  bool parse_unary(const Node*& out, bool with_filter) {
    DepthGuard g(*this);
    if (too_deep()) return false;
    const Node* e = nullptr;
    if (is_op("-") || is_op("+")) {
      bool neg = is_op("-");
      next();
      const Node* x = nullptr;
      if (!parse_unary(x, false)) return false;
      Node* n = node(neg ? NK::kNeg : NK::kPos);
      n->a = x;
      e = n;
    } else if (!parse_primary(e)) {
      return false;
    }
    if (!parse_postfix(e)) return false;
    if (with_filter && !parse_filter_expr(e)) return false;
    out = e;
    return true;
  }
  bool parse_primary(const Node*& out) {
    const Tok& t = cur();
    if (t.type == TK::kName) {
      Node* n;
      if (t.text == "true" || t.text == "True") { n = node(NK::kLiteral); n->literal = Value(true); }
      else if (t.text == "false" || t.text == "False") { n = node(NK::kLiteral); n->literal = Value(false); }
      else if (t.text == "none" || t.text == "None") { n = node(NK::kLiteral); n->literal = Value::none(); }
      else {
        n = node(NK::kName);
        n->name = t.text;
        for (Node* m : macros_) {  // jinja2: a macro accepts extra args only if it reads them
          if (std::find(m->names.begin(), m->names.end(), t.text) != m->names.end()) continue;
          if (t.text == "varargs") m->uses_varargs = true;
          if (t.text == "kwargs") m->uses_kwargs = true;
          if (t.text == "caller") m->uses_caller = true;
        }
      }
      next();
      out = n;
      return true;
    }
    if (t.type == TK::kString) {
      std::string s = t.value.str();
      next();
      while (cur().type == TK::kString) {
        s += cur().value.str();
        next();
      }
      Node* n = node(NK::kLiteral);
      n->literal = Value(std::move(s));
      out = n;
      return true;
    }
    if (t.type == TK::kInt || t.type == TK::kFloat) {
      Node* n = node(NK::kLiteral);
      n->literal = t.value;
      next();
      out = n;
      return true;
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) {
        next();
        out = node(NK::kTuple);
        return true;
      }
      const Node* e = nullptr;
      if (!parse_tuple(e, true)) return false;
      if (!expect_op(")")) return false;
      out = e;
      return true;
    }
    if (is_op("[")) {
      next();
      Node* n = node(NK::kList);
      while (!is_op("]")) {
        if (!n->kids.empty() && !expect_op(",")) return false;
        if (is_op("]")) break;
        const Node* e = nullptr;
        if (!parse_expression(e)) return false;
        n->kids.push_back(e);
      }
      next();
      out = n;
      return true;
    }
    if (is_op("{")) {
      next();
      Node* n = node(NK::kDict);
      while (!is_op("}")) {
        if (!n->kids.empty() && !expect_op(",")) return false;
        if (is_op("}")) break;
        const Node* k = nullptr;
        const Node* v = nullptr;
        if (!parse_expression(k) || !expect_op(":") || !parse_expression(v)) return false;
        n->kids.push_back(k);
        n->kw.push_back(v);
      }
      next();
      out = n;
      return true;
    }
    return fail("unexpected token in expression");
  }
  // `(args, k=v, *dyn_args, **dyn_kwargs)` with jinja2's ordering rules: no positional
  // argument after a keyword or *args, nothing but **kwargs after *args' keywords, nothing
  // after **kwargs. *args goes to call->b, **kwargs to call->c.
  bool parse_call_args(Node* call) {
    next();  // (
    bool need_comma = false;
    while (!is_op(")")) {
      if (need_comma) {
        if (!expect_op(",")) return false;
        if (is_op(")")) break;
      }
      need_comma = true;
      if (is_op("*") || is_op("**")) {
        bool star = is_op("*");
        if (call->c || (star && call->b)) return fail("invalid syntax for function call expression");
        next();
        const Node* v = nullptr;
        if (!parse_expression(v)) return false;
        (star ? call->b : call->c) = v;
      } else if (cur().type == TK::kName && peek().type == TK::kOp && peek().text == "=") {
        if (call->c) return fail("invalid syntax for function call expression");
        if (std::find(call->names.begin(), call->names.end(), cur().text) != call->names.end())
          return fail("keyword argument repeated");
        call->names.push_back(cur().text);
        next();
        next();
        const Node* v = nullptr;
        if (!parse_expression(v)) return false;
        call->kw.push_back(v);
      } else {
        if (!call->kw.empty() || call->b || call->c)
          return fail("invalid syntax for function call expression");
        const Node* v = nullptr;
        if (!parse_expression(v)) return false;
        call->kids.push_back(v);
      }
    }
    next();
    return true;
  }
  bool parse_postfix(const Node*& e) {
    while (true) {
      if (is_op(".")) {
        next();
        Node* n = node(NK::kAttr);
        if (cur().type == TK::kName) {
          n->name = cur().text;
        } else if (cur().type == TK::kInt) {
          n->kind = NK::kItem;
          Node* idx = node(NK::kLiteral);
          idx->literal = cur().value;
          n->b = idx;
        } else {
          return fail("expected attribute name");
        }
        next();
        n->a = e;
        e = n;
      } else if (is_op("[")) {
        next();
        const Node* parts[3] = {nullptr, nullptr, nullptr};
        int idx = 0;
        bool is_slice = false;
        while (!is_op("]")) {
          if (is_op(":")) {
            is_slice = true;
            if (++idx > 2) return fail("bad slice");
            next();
            continue;
          }
          if (parts[idx]) return fail("expected ']'");
          const Node* x = nullptr;
          if (!parse_expression(x)) return false;
          parts[idx] = x;
          if (is_op(",")) return fail("tuple subscripts are not supported");
        }
        next();
        Node* n = node(is_slice ? NK::kSlice : NK::kItem);
        n->a = e;
        if (is_slice) {
          n->b = parts[0];
          n->c = parts[1];
          n->d = parts[2];
        } else {
          if (!parts[0]) return fail("empty subscript");
          n->b = parts[0];
        }
        e = n;
      } else if (is_op("(")) {
        Node* n = node(NK::kCall);
        n->a = e;
        if (!parse_call_args(n)) return false;
        e = n;
      } else {
        return true;
      }
    }
  }
  bool parse_filters(const Node* input, const Node*& out) {
    const Node* e = input;
    while (is_op("|")) {
      next();
      if (cur().type != TK::kName) return fail("expected filter name");
      Node* n = node(NK::kFilter);
      n->name = cur().text;
      next();
      while (is_op(".") && peek().type == TK::kName) {
        n->name += "." + peek().text;
        next();
        next();
      }
      if (!is_known_filter(n->name)) return fail("no filter named '" + n->name + "'");
      n->a = e;
      if (is_op("(") && !parse_call_args(n)) return false;
      e = n;
    }
    out = e;
    return true;
  }
  bool parse_filter_expr(const Node*& e) {
    while (true) {
      if (is_op("|")) {
        if (!parse_filters(e, e)) return false;
      } else if (is_name("is")) {
        next();
        Node* n = node(NK::kTest);
        if (is_name("not")) {
          n->flag = true;
          next();
        }
        if (cur().type == TK::kName) {
          n->name = cur().text;
        } else if (is_op("==")) {
          n->name = "==";
        } else {
          return fail("expected test name");
        }
        next();
        if (n->name == "none" || n->name == "true" || n->name == "false") {}  // names, not literals
        if (!known_tests().count(n->name)) return fail("no test named '" + n->name + "'");
        n->a = e;
        if (is_op("(")) {
          if (!parse_call_args(n)) return false;
        } else if ((cur().type == TK::kName || cur().type == TK::kString || cur().type == TK::kInt ||
                    cur().type == TK::kFloat || is_op("[") || is_op("{")) &&
                   !(cur().type == TK::kName &&
                     (cur().text == "else" || cur().text == "or" || cur().text == "and" ||
                      cur().text == "if" || cur().text == "in" || cur().text == "not" ||
                      cur().text == "is"))) {
          const Node* arg = nullptr;
          if (!parse_primary(arg) || !parse_postfix(arg)) return false;
          n->kids.push_back(arg);
        }
        e = n;
      } else if (is_op("(")) {
        Node* n = node(NK::kCall);
        n->a = e;
        if (!parse_call_args(n)) return false;
        e = n;
      } else {
        return true;
      }
    }
  }

  std::vector<Tok> t_;
  size_t i_ = 0;
  Template& tpl_;
  const Limits& limits_;
  RenderError err_;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<Node*> macros_;  // macros being parsed (innermost last)
};

}  // namespace

bool is_known_filter(std::string_view name) {
  return is_implemented_filter(name) || unimplemented_filters().count(name) > 0;
}
bool is_known_test(std::string_view name) { return known_tests().count(name) > 0; }

bool parse_template(std::string_view source, const Limits& limits, Template& out,
                    RenderError& err) {
  if (source.size() > limits.max_template_bytes) {
    err = {RenderErrc::kTooLarge, "template larger than the limit", 0};
    return false;
  }
  Lexer lexer(normalize_newlines(source));
  std::vector<Tok> toks;
  if (!lexer.run(toks, err)) return false;
  Parser parser(std::move(toks), out, limits);
  return parser.parse(out.root_, err);
}

}  // namespace ramjet::render::jinja
