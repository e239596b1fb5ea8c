#include "metrics/prom_text.h"

#include <charconv>
#include <cmath>
#include <limits>

namespace ramjet::metrics {
namespace {

bool name_start(char c, bool colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
}
bool name_char(char c, bool colon) { return name_start(c, colon) || (c >= '0' && c <= '9'); }
bool blank(char c) { return c == ' ' || c == '\t'; }

// Reads a name at `pos`; empty when there is none.
std::string_view read_name(std::string_view line, size_t& pos, bool colon) {
  const size_t start = pos;
  if (pos >= line.size() || !name_start(line[pos], colon)) return {};
  ++pos;
  while (pos < line.size() && name_char(line[pos], colon)) ++pos;
  return line.substr(start, pos - start);
}

void skip_blanks(std::string_view line, size_t& pos) {
  while (pos < line.size() && blank(line[pos])) ++pos;
}

std::string_view read_token(std::string_view line, size_t& pos) {
  const size_t start = pos;
  while (pos < line.size() && !blank(line[pos])) ++pos;
  return line.substr(start, pos - start);
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// Go's strconv.ParseFloat spellings as exposition writers use them.
bool parse_value(std::string_view t, double& out) {
  if (t.empty()) return false;
  std::string_view body = t;
  bool negative = false;
  if (body.front() == '+' || body.front() == '-') {
    negative = body.front() == '-';
    body.remove_prefix(1);
  }
  if (iequals(body, "inf") || iequals(body, "infinity")) {
    out = negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    return true;
  }
  if (iequals(body, "nan")) {
    out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (body.empty() || body.front() == '+' || body.front() == '-') return false;
  // from_chars would also take "inf"/"nan" spellings and hex without 0x; only decimal here.
  for (char c : body) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) return false;
  }
  double v = 0;
  auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), v);
  if (end != body.data() + body.size()) return false;
  if (ec == std::errc::result_out_of_range) {
    // Overflow is ±Inf as in Go; underflow is (signed) zero.
    const bool big = body.find_first_of("eE") != std::string_view::npos &&
                     body[body.find_first_of("eE") + 1] != '-';
    v = big ? std::numeric_limits<double>::infinity() : 0.0;
  } else if (ec != std::errc()) {
    return false;
  }
  out = negative ? -v : v;
  return true;
}

bool parse_timestamp(std::string_view t) {
  if (!t.empty() && (t.front() == '-' || t.front() == '+')) t.remove_prefix(1);
  if (t.empty() || t.size() > 19) return false;
  for (char c : t) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

class LineParser {
 public:
  explicit LineParser(const PromTextLimits& limits) : limits_(limits) {}

  PromTextError parse(std::string_view line, PromSample& out) {
    labels_.clear();
    scratch_used_ = 0;
    size_t pos = 0;
    escaped_.clear();
    out.name = read_name(line, pos, true);
    if (out.name.empty()) return PromTextError::kBadName;
    const size_t after_name = pos;
    skip_blanks(line, pos);
    if (pos < line.size() && line[pos] == '{') {
      ++pos;
      if (PromTextError e = parse_labels(line, pos); e != PromTextError::kNone) return e;
    } else if (pos == after_name && pos < line.size()) {
      return PromTextError::kBadName;  // the name runs into a character names cannot hold
    }
    skip_blanks(line, pos);
    if (!parse_value(read_token(line, pos), out.value)) return PromTextError::kBadValue;
    skip_blanks(line, pos);
    if (pos < line.size()) {
      if (!parse_timestamp(read_token(line, pos))) return PromTextError::kBadTimestamp;
      skip_blanks(line, pos);
      if (pos < line.size()) return PromTextError::kTrailingText;
    }
    // Views into scratch_ are final only now (scratch_ may have grown while parsing).
    for (size_t i = 0; i < labels_.size(); ++i) {
      if (escaped_[i].second != SIZE_MAX) {
        labels_[i].value = std::string_view(scratch_).substr(escaped_[i].first, escaped_[i].second);
      }
    }
    out.labels = labels_;
    return PromTextError::kNone;
  }

 private:
  PromTextError parse_labels(std::string_view line, size_t& pos) {
    for (;;) {
      skip_blanks(line, pos);
      if (pos >= line.size()) return PromTextError::kBadLabels;
      if (line[pos] == '}') {
        ++pos;
        return PromTextError::kNone;
      }
      if (labels_.size() >= limits_.max_labels) return PromTextError::kTooManyLabels;
      std::string_view name = read_name(line, pos, false);
      if (name.empty()) return PromTextError::kBadName;
      skip_blanks(line, pos);
      if (pos >= line.size() || line[pos] != '=') return PromTextError::kBadLabels;
      ++pos;
      skip_blanks(line, pos);
      if (pos >= line.size() || line[pos] != '"') return PromTextError::kBadLabels;
      ++pos;
      const size_t start = pos;
      bool has_escape = false;
      while (pos < line.size() && line[pos] != '"') {
        if (line[pos] == '\\') {
          has_escape = true;
          if (pos + 1 >= line.size()) return PromTextError::kBadLabels;
          char e = line[pos + 1];
          if (e != '\\' && e != '"' && e != 'n') return PromTextError::kBadLabels;
          pos += 2;
        } else {
          ++pos;
        }
      }
      if (pos >= line.size()) return PromTextError::kBadLabels;
      std::string_view raw = line.substr(start, pos - start);
      ++pos;  // closing quote
      if (has_escape) {
        const size_t at = scratch_used_;
        if (scratch_.size() < at + raw.size()) scratch_.resize(at + raw.size());
        size_t n = 0;
        for (size_t i = 0; i < raw.size(); ++i) {
          char c = raw[i];
          if (c == '\\') {
            c = raw[++i];
            if (c == 'n') c = '\n';
          }
          scratch_[at + n++] = c;
        }
        scratch_used_ = at + n;
        labels_.push_back(PromLabel{name, {}});
        escaped_.emplace_back(at, n);
      } else {
        labels_.push_back(PromLabel{name, raw});
        escaped_.emplace_back(0, SIZE_MAX);
      }
      skip_blanks(line, pos);
      if (pos < line.size() && line[pos] == ',') {
        ++pos;
        continue;
      }
      skip_blanks(line, pos);
      if (pos >= line.size() || line[pos] != '}') return PromTextError::kBadLabels;
    }
  }

  const PromTextLimits& limits_;
  std::vector<PromLabel> labels_;
  std::vector<std::pair<size_t, size_t>> escaped_;  // (offset, length) in scratch_, or length SIZE_MAX
  std::string scratch_;
  size_t scratch_used_ = 0;
};

}  // namespace

std::string_view prom_text_error_label(PromTextError e) {
  switch (e) {
    case PromTextError::kNone: return "none";
    case PromTextError::kTooLarge: return "too_large";
    case PromTextError::kLineTooLong: return "line_too_long";
    case PromTextError::kTooManySamples: return "too_many_samples";
    case PromTextError::kTooManyLabels: return "too_many_labels";
    case PromTextError::kBadName: return "bad_name";
    case PromTextError::kBadLabels: return "bad_labels";
    case PromTextError::kBadValue: return "bad_value";
    case PromTextError::kBadTimestamp: return "bad_timestamp";
    case PromTextError::kTrailingText: return "trailing_text";
  }
  return "unknown";
}

const PromLabel* PromSample::label(std::string_view n) const {
  for (const PromLabel& l : labels) {
    if (l.name == n) return &l;
  }
  return nullptr;
}

PromTextResult parse_prom_text(std::string_view text, const PromTextLimits& limits,
                               const std::function<void(const PromSample&)>& on_sample) {
  PromTextResult r;
  if (text.size() > limits.max_bytes) {
    r.error = PromTextError::kTooLarge;
    return r;
  }
  LineParser parser(limits);
  PromSample sample;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.size() > limits.max_line) {
      r.error = PromTextError::kLineTooLong;
      r.line = line_no;
      return r;
    }
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t pos = 0;
    skip_blanks(line, pos);
    if (pos == line.size() || line[pos] == '#') continue;  // blank, HELP, TYPE, comment, # EOF
    if (r.samples >= limits.max_samples) {
      r.error = PromTextError::kTooManySamples;
      r.line = line_no;
      return r;
    }
    PromTextError e = parser.parse(line.substr(pos), sample);
    if (e != PromTextError::kNone) {
      r.error = e;
      r.line = line_no;
      return r;
    }
    ++r.samples;
    on_sample(sample);
  }
  return r;
}

}  // namespace ramjet::metrics
