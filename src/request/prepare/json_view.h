// request/prepare/json_view: a small read-only view over a parsed JSON value, so the rules that
// read a request (the facts, the shim conditions, the canonical writer) are written once and run
// over either parse: Boost.JSON (the DOM that shims mutate and re-serialise) or common/json_tape
// (the fast path for bodies no shim changes). Internal to request/prepare.
//
// A view V provides: kind(); as_bool/as_int64/as_uint64/as_double/as_string; find(key), the
// member a Boost.JSON object would hold for that key (Boost keeps the LAST of duplicate keys, so
// the tape's view returns the last match too); members(), an iterable of (key, V); elements(), an
// iterable of V with an iterator that can be kept and resumed. kUniqueKeys says whether an
// object's keys are known to be unique (Boost: yes; the tape keeps duplicates). kExactDoubles
// says whether a double is the value Boost.JSON would have parsed: Boost 1.81 converts decimal
// to binary imprecisely (mantissa × a power-of-ten table), the tape correctly, so a tape double
// is never trusted and the caller redoes the request on the Boost path. A view may also
// provide raw_string() and raw_escaped(), a string as a validated body spells it: the canonical
// writer then writes it from those bytes instead of unescaping it and escaping it again.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include <boost/json.hpp>

namespace ramjet::request::detail {

enum class JsonKind { kNull, kBool, kInt64, kUint64, kDouble, kString, kArray, kObject };

// Adapts an iterator over the backend's values/members into one yielding views.
template <class It, class Fn>
class MappedRange {
 public:
  class iterator {
   public:
    iterator(It it, const Fn* fn) : it_(it), fn_(fn) {}
    decltype(auto) operator*() const { return (*fn_)(*it_); }
    iterator& operator++() {
      ++it_;
      return *this;
    }
    bool operator==(const iterator& o) const { return it_ == o.it_; }
    bool operator!=(const iterator& o) const { return !(it_ == o.it_); }

   private:
    It it_;
    const Fn* fn_;
  };
  MappedRange(It b, It e, Fn fn) : b_(b), e_(e), fn_(fn) {}
  iterator begin() const { return iterator(b_, &fn_); }
  iterator end() const { return iterator(e_, &fn_); }

 private:
  It b_, e_;
  Fn fn_;
};

class BoostView {
 public:
  static constexpr bool kUniqueKeys = true;
  static constexpr bool kExactDoubles = true;

  BoostView() = default;
  explicit BoostView(const boost::json::value& v) : v_(&v) {}

  JsonKind kind() const {
    switch (v_->kind()) {
      case boost::json::kind::null:
        return JsonKind::kNull;
      case boost::json::kind::bool_:
        return JsonKind::kBool;
      case boost::json::kind::int64:
        return JsonKind::kInt64;
      case boost::json::kind::uint64:
        return JsonKind::kUint64;
      case boost::json::kind::double_:
        return JsonKind::kDouble;
      case boost::json::kind::string:
        return JsonKind::kString;
      case boost::json::kind::array:
        return JsonKind::kArray;
      case boost::json::kind::object:
        return JsonKind::kObject;
    }
    return JsonKind::kNull;
  }
  bool is(JsonKind k) const { return kind() == k; }
  bool as_bool() const { return v_->get_bool(); }
  int64_t as_int64() const { return v_->get_int64(); }
  uint64_t as_uint64() const { return v_->get_uint64(); }
  double as_double() const { return v_->get_double(); }
  std::string_view as_string() const { return v_->get_string(); }

  std::optional<BoostView> find(std::string_view key) const {
    if (const boost::json::value* m = v_->get_object().if_contains(key)) return BoostView(*m);
    return std::nullopt;
  }
  auto members() const {
    const boost::json::object& o = v_->get_object();
    auto fn = [](const boost::json::key_value_pair& kv) {
      return std::pair<std::string_view, BoostView>(kv.key(), BoostView(kv.value()));
    };
    return MappedRange<boost::json::object::const_iterator, decltype(fn)>(o.begin(), o.end(), fn);
  }
  auto elements() const {
    const boost::json::array& a = v_->get_array();
    auto fn = [](const boost::json::value& e) { return BoostView(e); };
    return MappedRange<boost::json::array::const_iterator, decltype(fn)>(a.begin(), a.end(), fn);
  }
  bool array_empty() const { return v_->get_array().empty(); }

 private:
  const boost::json::value* v_ = nullptr;
};

}  // namespace ramjet::request::detail
