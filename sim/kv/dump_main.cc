// kv_event_dump: a test tool for the Python conformance suite (test_kv_conformance.py).
//
// Encode mode (default): reads a script from stdin and prints, per batch, the hex of the payload
// (cache::kv::encode_batch()) on its own line.
//   {"format":"array"|"map", "hash_type":"u64"|"bytes", "dp_rank":0,
//    "array_layout":{"stored":12,"removed":4,"with_dp_rank":true},        (optional)
//    "batches":[{"ts":"1700000000.5", "events":[EVENT, ...]}, ...]}
//   EVENT = {"type":"BlockStored","block_hashes":[HEX64,...],"parent_block_hash":HEX64|null,
//            "token_ids":[...],"block_size":16,"medium":"GPU","group_idx":0,
//            "kv_cache_spec_kind":"full_attention"}     (one None extra key per block)
//         | {"type":"BlockRemoved","block_hashes":[HEX64,...],"medium":"GPU","group_idx":0}
//         | {"type":"AllBlocksCleared"}
//   HEX64 = the 32-byte digest as 64 hex digits; "" for medium or kv_cache_spec_kind is None. "ts" may be a number or a decimal string
//   (parsed with strtod, exact for Python's repr()).
//
// Publish mode: kv_event_dump --publish '<kv-events-config JSON>' --script FILE
//                 [--format array|map] [--hash-type u64|bytes] [--layout with-topic|legacy]
//                 [--dp-rank N]
//   Starts a KvPublisher, prints "ready <endpoint> <replay endpoint or ->", then executes
//   commands from stdin, one per line, answering "ok <next_sequence>" once applied:
//   "publish I" (batch I of the script), "publish_all", "drop N", "skip N", "restart", "quit".
#include <boost/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "sim/kv/publisher.h"

namespace {

using namespace ramjet::sim;
namespace json = boost::json;
namespace kv = ramjet::cache::kv;

[[noreturn]] void die(const std::string& msg) {
  std::cerr << "kv_event_dump: " << msg << "\n";
  std::exit(2);
}

BlockHash parse_digest(const json::value& v) {
  if (!v.is_string() || v.get_string().size() != 64) die("a hash must be 64 hex digits");
  const std::string s(v.get_string());
  uint8_t d[32];
  for (size_t i = 0; i < 32; ++i) d[i] = static_cast<uint8_t>(std::stoul(s.substr(2 * i, 2), nullptr, 16));
  return BlockHash::from_bytes(d);
}

std::vector<BlockHash> parse_digests(const json::value& v) {
  std::vector<BlockHash> out;
  for (const auto& h : v.as_array()) out.push_back(parse_digest(h));
  return out;
}

uint32_t u32(const json::object& o, std::string_view key, uint32_t def) {
  const auto* v = o.if_contains(key);
  return v ? static_cast<uint32_t>(v->to_number<uint64_t>()) : def;
}

// Absent: `def`; null or "": None.
std::optional<std::string> str(const json::object& o, std::string_view key,
                               const std::string& def) {
  const auto* v = o.if_contains(key);
  if (!v) return def;
  if (v->is_null() || v->as_string().empty()) return std::nullopt;
  return std::string(v->as_string());
}

KvEvent parse_event(const json::value& v) {
  const auto& o = v.as_object();
  const std::string type(o.at("type").as_string());
  if (type == "BlockStored") {
    BlockStored e;
    e.block_hashes = parse_digests(o.at("block_hashes"));
    if (const auto* p = o.if_contains("parent_block_hash"); p && !p->is_null()) {
      e.parent_block_hash = parse_digest(*p);
    }
    for (const auto& t : o.at("token_ids").as_array()) {
      e.token_ids.push_back(static_cast<uint32_t>(t.to_number<uint64_t>()));
    }
    e.block_size = u32(o, "block_size", 16);
    e.medium = str(o, "medium", "GPU");
    e.extra_keys.emplace(e.block_hashes.size());
    e.group_idx = u32(o, "group_idx", 0);
    e.kv_cache_spec_kind = str(o, "kv_cache_spec_kind", "full_attention");
    return e;
  }
  if (type == "BlockRemoved") {
    BlockRemoved e;
    e.block_hashes = parse_digests(o.at("block_hashes"));
    e.medium = str(o, "medium", "GPU");
    e.group_idx = u32(o, "group_idx", 0);
    return e;
  }
  if (type == "AllBlocksCleared") return AllBlocksCleared{};
  die("unknown event type " + type);
}

struct Batch {
  double ts = 0;
  std::vector<KvEvent> events;
};

struct Script {
  kv::EncodeOptions encoding{kv::Layout::kMap, /*int_block_hashes=*/true, {}};
  int dp_rank = 0;
  std::vector<Batch> batches;
};

Script parse_script(const std::string& text) {
  json::error_code ec;
  json::value root = json::parse(text, ec);
  if (ec) die("invalid script JSON: " + ec.message());
  const auto& o = root.as_object();
  Script s;
  if (str(o, "format", "map") == "array") s.encoding.layout = kv::Layout::kArray;
  if (str(o, "hash_type", "u64") == "bytes") s.encoding.int_block_hashes = false;
  if (const auto* r = o.if_contains("dp_rank")) s.dp_rank = static_cast<int>(r->to_number<int64_t>());
  if (const auto* l = o.if_contains("array_layout")) {
    const auto& lo = l->as_object();
    s.encoding.array.stored_fields = static_cast<int>(u32(lo, "stored", 12));
    s.encoding.array.removed_fields = static_cast<int>(u32(lo, "removed", 4));
    if (const auto* w = lo.if_contains("with_dp_rank")) s.encoding.array.with_dp_rank = w->as_bool();
  }
  if (const auto* bs = o.if_contains("batches")) {
    for (const auto& b : bs->as_array()) {
      const auto& bo = b.as_object();
      Batch batch;
      const auto& ts = bo.at("ts");
      batch.ts = ts.is_string() ? std::strtod(std::string(ts.get_string()).c_str(), nullptr)
                                : ts.to_number<double>();
      for (const auto& e : bo.at("events").as_array()) batch.events.push_back(parse_event(e));
      s.batches.push_back(std::move(batch));
    }
  }
  return s;
}

std::string hex(const std::string& s) {
  static const char* k = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) {
    out.push_back(k[c >> 4]);
    out.push_back(k[c & 15]);
  }
  return out;
}

int encode_mode() {
  std::stringstream in;
  in << std::cin.rdbuf();
  const Script s = parse_script(in.str());
  for (const auto& b : s.batches) {
    PublisherConfig cfg;
    cfg.encoding = s.encoding;
    cfg.data_parallel_rank = s.dp_rank;
    std::cout << hex(encode_payload(cfg, b.ts, b.events)) << "\n";
  }
  return 0;
}

int publish_mode(int argc, char** argv) {
  PublisherConfig cfg;
  std::string script_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value for " + a);
      return argv[++i];
    };
    if (a == "--publish") {
      if (auto err = parse_kv_events_config(next(), cfg); !err.empty()) die(err);
    } else if (a == "--script") {
      script_path = next();
    } else if (a == "--format") {
      cfg.encoding.layout = next() == "array" ? kv::Layout::kArray : kv::Layout::kMap;
    } else if (a == "--hash-type") {
      cfg.encoding.int_block_hashes = next() != "bytes";
    } else if (a == "--layout") {
      cfg.replay_layout = next() == "legacy" ? ReplayLayout::kLegacy : ReplayLayout::kWithTopic;
    } else if (a == "--dp-rank") {
      cfg.data_parallel_rank = std::stoi(next());
    } else {
      die("unknown argument " + a);
    }
  }
  Script script;
  if (!script_path.empty()) {
    std::ifstream f(script_path);
    if (!f) die("cannot read " + script_path);
    std::stringstream ss;
    ss << f.rdbuf();
    script = parse_script(ss.str());
  }
  KvPublisher pub(cfg);
  if (auto err = pub.start(); !err.empty()) die(err);
  const std::string replay = pub.bound_replay_endpoint();
  std::cout << "ready " << pub.bound_endpoint() << " " << (replay.empty() ? "-" : replay)
            << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream cmd(line);
    std::string op;
    cmd >> op;
    uint64_t n = 0;
    if (op == "publish") {
      cmd >> n;
      if (n >= script.batches.size()) die("no batch " + std::to_string(n));
      pub.publish(script.batches[n].ts, script.batches[n].events);
    } else if (op == "publish_all") {
      for (const auto& b : script.batches) pub.publish(b.ts, b.events);
    } else if (op == "drop") {
      cmd >> n;
      pub.fault_drop(static_cast<uint32_t>(n));
    } else if (op == "skip") {
      cmd >> n;
      pub.fault_skip(static_cast<uint32_t>(n));
    } else if (op == "restart") {
      pub.fault_restart();
    } else if (op == "quit") {
      break;
    } else if (!op.empty()) {
      die("unknown command " + op);
    }
    if (!pub.flush()) die("publisher did not drain");
    std::cout << "ok " << pub.next_sequence() << std::endl;
  }
  pub.stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1) return publish_mode(argc, argv);
    return encode_mode();
  } catch (const std::exception& e) {
    die(e.what());
  }
}
