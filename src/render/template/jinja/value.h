// render::jinja value model: the Python objects a HuggingFace chat template sees (None, bool,
// int, float, str, list/tuple, dict with insertion order, jinja2 Undefined, namespace, and
// callables), with Python's truthiness, equality, ordering, str() and repr(), and
// json.dumps(ensure_ascii=False) for the transformers `tojson` filter.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ramjet::render::jinja {

class Value;
using List = std::vector<Value>;

// String equality for the short names templates look up (keys, attributes, methods): sizes,
// then the first byte, before a memcmp call.
inline bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && (a.empty() || (a[0] == b[0] && a.compare(b) == 0));
}

// A dict keeps insertion order (Python 3.7+); keys are strings (JSON objects are all a template
// ever sees; other key types are rejected where they could arise).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(std::string key, Value v);
};

struct CallArgs;
struct RenderError;
class Interp;
// A callable (macro, global function, bound method, loop object). Returns false and fills
// `err` on error. `attrs` are readable attributes (a for loop's `loop.index`, ...); `repr` is what
// str() prints when set (`<LoopContext 1/3>`, `<Macro 'm'>`), else `<function name>`.
using NativeFn = std::function<bool(Interp&, CallArgs&, Value& out, RenderError& err)>;
// `held` are values a bound method keeps alive; `opaque` marks callables whose closures keep
// values alive that contains_namespace cannot see (so they never go into a namespace).
// A for loop's `loop` object is a Callable with `loop` set: its attributes (index, length, ...)
// are computed from the shared per-loop state and `loop_index` when read (interp.cc), and
// calling it is the recursive loop(iterable).
struct LoopState;
struct Callable {
  std::string name;
  NativeFn fn;
  Dict attrs;
  std::string repr;
  std::vector<Value> held;
  bool opaque = false;
  std::shared_ptr<const LoopState> loop;
  int64_t loop_index = 0, loop_length = 0;
};

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict,
                              kNamespace, kCallable };

  Value() = default;  // undefined
  static Value none() { Value v; v.kind_ = Kind::kNone; return v; }
  static Value undefined(std::string name = {}) {
    Value v;
    if (!name.empty()) v.str_ = std::make_shared<const std::string>(std::move(name));
    return v;
  }
  Value(bool b) : kind_(Kind::kBool), i_(b) {}                  // NOLINT
  Value(int i) : kind_(Kind::kInt), i_(i) {}                    // NOLINT
  Value(int64_t i) : kind_(Kind::kInt), i_(i) {}                // NOLINT
  Value(double d) : kind_(Kind::kFloat), d_(d) {}               // NOLINT
  Value(std::string s)                                           // NOLINT
      : kind_(Kind::kString), str_(std::make_shared<const std::string>(std::move(s))) {}
  Value(const char* s) : Value(std::string(s)) {}               // NOLINT
  Value(std::string_view s) : Value(std::string(s)) {}          // NOLINT
  static Value list(List items, bool tuple = false) {
    Value v;
    v.kind_ = Kind::kList;
    v.tuple_ = tuple;
    uint32_t n = 0;
    for (const auto& x : items) n = x.nest_ > n ? x.nest_ : n;
    v.nest_ = static_cast<uint16_t>(n < 65535 ? n + 1 : 65535);
    v.list_ = std::make_shared<List>(std::move(items));
    return v;
  }
  static Value dict(Dict d = {});
  static Value ns(Dict d = {}) {
    Value v = dict(std::move(d));
    v.kind_ = Kind::kNamespace;
    v.nest_ = 0;
    return v;
  }
  static Value callable(std::string name, NativeFn fn) {
    Callable c;
    c.name = std::move(name);
    c.fn = std::move(fn);
    return callable(std::move(c));
  }
  static Value callable(Callable c) {
    Value v;
    v.kind_ = Kind::kCallable;
    v.fn_ = std::make_shared<Callable>(std::move(c));
    return v;
  }

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return i_ != 0; }
  int64_t as_int() const { return i_; }  // int and bool
  double as_double() const { return kind_ == Kind::kFloat ? d_ : static_cast<double>(i_); }
  const std::string& str() const { return *str_; }
  const List& items() const { return *list_; }
  const Dict& dict_ref() const { return *dict_; }
  Dict& dict_mut() const { return *dict_; }  // namespaces only (set ns.x = ...)
  const Callable& fn() const { return *fn_; }
  // The callable when this value is its only holder (so changing it is unobservable), else
  // nullptr.
  Callable* unique_callable() { return fn_ && fn_.use_count() == 1 ? fn_.get() : nullptr; }
  // Name of the variable an undefined value came from ("" when unknown).
  std::string undefined_name() const { return str_ ? *str_ : std::string(); }

  // Python `is` for containers/strings/functions (shared objects); nullptr for scalars.
  const void* identity() const {
    return list_ ? static_cast<const void*>(list_.get()) : dict_ ? static_cast<const void*>(dict_.get())
           : fn_ ? static_cast<const void*>(fn_.get()) : static_cast<const void*>(str_.get());
  }
  // Container nesting depth (0 for scalars and namespaces), saturating: bounds recursion in
  // repr, equality and destruction.
  int nesting() const { return nest_; }
  bool truthy() const;
  // Python str(): what {{ value }} prints (undefined prints nothing).
  std::string to_str() const;
  void append_str(std::string& out, int depth = 0) const;
  // Python repr().
  void append_repr(std::string& out, int depth = 0) const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;
  uint16_t nest_ = 0;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<const std::string> str_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> fn_;
};

// Python ==.
bool py_equal(const Value& a, const Value& b);
// Whether `v` is or (through lists, dicts, namespaces and callables' held values) contains the
// namespace `ns`; true for opaque callables.
bool contains_namespace(const Value& v, const Value& ns);
// Python float repr (shortest round trip: 1.0, 0.1, 1e-05, 1e+16, inf, nan).
void append_float_repr(std::string& out, double d);
// Python json.dumps(v, ensure_ascii=False, indent=indent) with the default separators
// (", " and ": " without indent, "," and ": " with it). Returns false on a value JSON cannot
// represent (undefined, callables), with `bad` naming its type; max_depth bounds nesting.
bool to_json(const Value& v, std::string& out, int indent, bool sort_keys, std::string& bad,
             int max_depth = 512);
// UTF-8 helpers shared by the filters and string methods (invalid bytes decode as U+FFFD-like
// single code points of their byte value so that nothing is lost or crashes).
std::vector<char32_t> utf8_decode(std::string_view s);
void utf8_append(std::string& out, char32_t c);
bool py_isspace(char32_t c);

}  // namespace ramjet::render::jinja
