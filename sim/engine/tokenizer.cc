#include "sim/engine/tokenizer.h"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <array>
#include <string>
#include <vector>

#include "sim/engine/filler.h"

namespace ramjet::sim {

namespace {

constexpr size_t kPieceBytes = 4;

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

// A few hundred common English words; filler text is a deterministic walk over them.
constexpr std::array kWords = {
    "the", "of", "and", "to", "a", "in", "is", "it", "you", "that", "he", "was", "for", "on",
    "are", "with", "as", "his", "they", "be", "at", "one", "have", "this", "from", "or", "had",
    "by", "not", "word", "but", "what", "some", "we", "can", "out", "other", "were", "all",
    "there", "when", "up", "use", "your", "how", "said", "an", "each", "she", "which", "do",
    "their", "time", "if", "will", "way", "about", "many", "then", "them", "write", "would",
    "like", "so", "these", "her", "long", "make", "thing", "see", "him", "two", "has", "look",
    "more", "day", "could", "go", "come", "did", "number", "sound", "no", "most", "people",
    "my", "over", "know", "water", "than", "call", "first", "who", "may", "down", "side",
    "been", "now", "find", "any", "new", "work", "part", "take", "get", "place", "made",
    "live", "where", "after", "back", "little", "only", "round", "man", "year", "came",
    "show", "every", "good", "me", "give", "our", "under", "name", "very", "through", "just",
    "form", "sentence", "great", "think", "say", "help", "low", "line", "differ", "turn",
    "cause", "much", "mean", "before", "move", "right", "boy", "old", "too", "same", "tell",
    "does", "set", "three", "want", "air", "well", "also", "play", "small", "end", "put",
    "home", "read", "hand", "port", "large", "spell", "add", "even", "land", "here", "must",
    "big", "high", "such", "follow", "act", "why", "ask", "men", "change", "went", "light",
    "kind", "off", "need", "house", "picture", "try", "us", "again", "animal", "point",
    "mother", "world", "near", "build", "self", "earth", "father", "head", "stand", "own",
    "page", "should", "country", "found", "answer", "school", "grow", "study", "still",
    "learn", "plant", "cover", "food", "sun", "four", "between", "state", "keep", "eye",
    "never", "last", "let", "thought", "city", "tree", "cross", "farm", "hard", "start",
    "might", "story", "saw", "far", "sea", "draw", "left", "late", "run", "while", "press",
    "close", "night", "real", "life", "few", "north", "open", "seem", "together", "next",
    "white", "children", "begin", "got", "walk", "example", "ease", "paper", "group",
    "always", "music", "those", "both", "mark", "often", "letter", "until", "mile", "river",
    "car", "feet", "care", "second", "book", "carry", "took", "science", "eat", "room",
    "friend", "began", "idea", "fish", "mountain", "stop", "once", "base", "hear", "horse",
    "cut", "sure", "watch", "color", "face", "wood", "main", "enough", "plain", "girl",
    "usual", "young", "ready", "above", "ever", "red", "list", "though", "feel", "talk",
    "bird", "soon", "body", "dog", "family", "direct", "pose", "leave", "song", "measure",
    "door", "product", "black", "short", "numeral", "class", "wind", "question", "happen",
    "complete", "ship", "area", "half", "rock", "order", "fire", "south", "problem", "piece",
    "told", "knew", "pass", "since", "top", "whole", "king", "space", "heard", "best", "hour",
    "better", "true", "during", "hundred", "five", "remember", "step", "early", "hold",
    "west", "ground", "interest", "reach", "fast", "verb", "sing", "listen", "six", "table",
    "travel", "less", "morning", "ten", "simple", "several", "vowel", "toward", "war", "lay",
    "against", "pattern", "slow", "center", "love", "person", "money", "serve", "appear",
    "road", "map", "rain", "rule", "govern", "pull", "cold", "notice", "voice", "unit",
    "power", "town", "fine", "certain", "fly", "fall", "lead", "cry", "dark", "machine",
    "note", "wait", "plan", "figure", "star", "box", "noun", "field", "rest", "correct",
    "able", "pound", "done", "beauty", "drive", "stood", "contain", "front", "teach", "week",
    "final", "gave", "green", "oh", "quick", "develop", "ocean", "warm", "free", "minute",
    "strong", "special", "mind", "behind", "clear", "tail", "produce", "fact", "street",
    "inch", "multiply", "nothing", "course", "stay", "wheel", "full", "force", "blue",
    "object", "decide", "surface", "deep", "moon", "island", "foot", "system", "busy",
    "test", "record", "boat", "common", "gold", "possible", "plane", "stead", "dry",
    "wonder", "laugh", "thousand", "ago", "ran", "check", "game", "shape", "equate", "hot",
    "miss", "brought", "heat", "snow", "tire", "bring", "yes", "distant", "fill", "east",
    "paint", "language", "among"};

uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The filler cycle: whole words (" word", a "." every so often) cut into tokenizer pieces, so
// every filler token re-tokenizes to itself. Built once.
struct Filler {
  std::vector<std::string> pieces;
  std::vector<uint32_t> ids;
  Filler() {
    constexpr size_t kMinPieces = 8192;
    for (uint64_t w = 0; pieces.size() < kMinPieces; ++w) {
      const uint64_t r = mix(w);
      std::string word = " ";
      word += kWords[r % kWords.size()];
      if ((r >> 32) % 11 == 10) word += '.';
      for (size_t off = 0; off < word.size(); off += kPieceBytes) {
        pieces.push_back(word.substr(off, kPieceBytes));
        ids.push_back(piece_token_id(pieces.back()));
      }
    }
  }
};

const Filler& filler() {
  static const Filler f;
  return f;
}

void append_content(std::string& out, const boost::json::value& content) {
  if (const auto* s = content.if_string()) {
    out.append(s->data(), s->size());
    return;
  }
  const auto* parts = content.if_array();
  if (parts == nullptr) return;  // null (e.g. assistant tool calls) or malformed: nothing
  for (const auto& part : *parts) {
    const auto* obj = part.if_object();
    if (obj == nullptr) continue;
    const auto* type = obj->if_contains("type");
    const auto* type_s = type != nullptr ? type->if_string() : nullptr;
    // Text parts, as vLLM's chat_utils reads them (the Responses API's input_text too).
    if (type_s == nullptr || *type_s == "text" || *type_s == "input_text") {
      const auto* text = obj->if_contains("text");
      if (text != nullptr && text->is_string()) {
        out.append(text->get_string().data(), text->get_string().size());
      }
      continue;
    }
    out += "<|";
    out.append(type_s->data(), type_s->size());
    out += "|>";
  }
}

}  // namespace

uint32_t piece_token_id(std::string_view piece) {
  return static_cast<uint32_t>(1000 + fnv1a64(piece) % 150000);
}

uint32_t filler_token_id(uint32_t i) {
  const Filler& f = filler();
  return f.ids[i % f.ids.size()];
}

std::string_view filler_token(uint32_t i) {
  const Filler& f = filler();
  return f.pieces[i % f.pieces.size()];
}

std::vector<uint32_t> tokenize(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3 + 1);
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = i;
    while (i < text.size() && text[i] == ' ') ++i;
    while (i < text.size() && text[i] != ' ') ++i;
    for (size_t off = start; off < i; off += kPieceBytes) {
      out.push_back(piece_token_id(text.substr(off, std::min(kPieceBytes, i - off))));
    }
  }
  return out;
}

std::string render_chat(std::string_view messages_json, bool add_generation_prompt) {
  boost::system::error_code ec;
  const boost::json::value doc = boost::json::parse(messages_json, ec);
  std::string out;
  if (ec || !doc.is_array()) return out;
  for (const auto& msg : doc.get_array()) {
    const auto* obj = msg.if_object();
    if (obj == nullptr) continue;
    out += "<|im_start|>";
    if (const auto* role = obj->if_contains("role"); role != nullptr && role->is_string()) {
      out.append(role->get_string().data(), role->get_string().size());
    }
    out += '\n';
    if (const auto* content = obj->if_contains("content")) append_content(out, *content);
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace ramjet::sim
