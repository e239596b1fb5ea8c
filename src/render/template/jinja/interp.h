// Internal: the tree-walking interpreter (interp.cc) and the builtins it calls (builtins.cc).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "render/template/jinja/ast.h"
#include "render/template/jinja/template.h"

namespace ramjet::render::jinja {

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* get_kw(std::string_view name) const {
    for (const auto& [k, v] : kw)
      if (k == name) return &v;
    return nullptr;
  }
  // Positional i, else keyword `name`, else nullptr.
  const Value* arg(size_t i, std::string_view name) const {
    if (i < pos.size()) return &pos[i];
    return get_kw(name);
  }
};

struct Scope {
  Dict vars;
  std::shared_ptr<Scope> parent;
  // Set when a weak_ptr to this scope is handed out (a macro defined in it, a recursive loop
  // over it): a for loop then gives the next iteration a new scope instead of reusing it.
  bool weakly_held = false;
  const Value* lookup(std::string_view name) const {
    for (const Scope* s = this; s; s = s->parent.get())
      if (const Value* v = s->vars.find(name)) return v;
    return nullptr;
  }
};

// What every iteration's `loop` object of one for loop (at one recursion depth) shares; the
// iteration's own index lives in its Callable (loop_index).
struct LoopState {
  const Node* n = nullptr;          // the kFor node
  std::weak_ptr<Scope> outer;       // recursive loops: must not keep its scope alive
  std::vector<Value> items;         // what the loop iterates (previtem / nextitem)
  int64_t depth = 1;                // loop.depth
  Value changed;                    // loop.changed: one state per loop level
};
// A loop object's attribute `name` (index, index0, revindex, ..., cycle, changed); false when
// it has none.
bool loop_attr(const Callable& loop, std::string_view name, Value& out);

class Interp {
 public:
  Interp(const RenderOptions& options, std::string& out) : opt_(options), out_(&out) {}

  bool fail(RenderErrc code, std::string msg, int line = 0) {
    if (!failed_) {
      failed_ = true;
      err_ = {code, std::move(msg), line ? line : line_};
    }
    return false;
  }
  bool step() {
    if (++steps_ > opt_.limits.max_steps) return fail(RenderErrc::kLimit, "step limit exceeded");
    return true;
  }
  // Charges the work of building `bytes` bytes (one step per 64), so that repeated large
  // string building is bounded by max_steps too.
  bool charge(size_t bytes) {
    steps_ += bytes / 64;
    if (steps_ > opt_.limits.max_steps) return fail(RenderErrc::kLimit, "step limit exceeded");
    return true;
  }
  bool write(std::string_view s) {
    if (out_->size() + s.size() > opt_.limits.max_output_bytes)
      return fail(RenderErrc::kLimit, "output larger than the limit");
    out_->append(s);
    return true;
  }

  enum class Flow { kNormal, kBreak, kContinue, kError };
  Flow exec(const Node* n, const std::shared_ptr<Scope>& scope);
  bool eval(const Node* n, const std::shared_ptr<Scope>& scope, Value& out);
  // eval() without copying names and literals: returns the value in place (valid until the
  // scope's variables change, which no expression does) or in `tmp`; nullptr on error.
  const Value* eval_ptr(const Node* n, const std::shared_ptr<Scope>& scope, Value& tmp);
  // A left-deep chain a + b + c + ...: string operands are appended to one buffer instead of
  // building every intermediate string; same results, charges, limits and errors as eval().
  bool eval_plus_chain(const Node* n, const std::shared_ptr<Scope>& scope, Value& out);
  // Calls a loop object: the recursive loop(iterable).
  bool call_loop(const Callable& loop, CallArgs& args, Value& out);
  bool call(const Value& callee, CallArgs& args, Value& out);
  // Renders `body` into a string with output redirected.
  bool capture(const Node* body, const std::shared_ptr<Scope>& scope, std::string& out);
  bool capture_flow(const std::function<Flow()>& run, std::string& out);
  // Evaluates a call's arguments: positional, *args, keywords, **kwargs.
  bool eval_args(const Node* call, const std::shared_ptr<Scope>& scope, CallArgs& args);
  bool call_macro(const Node* def, const std::shared_ptr<Scope>& parent, CallArgs& args, Value& out);
  // Runs a for loop (n: kFor) over `seq` at recursion depth `depth` (1 = not recursed).
  Flow run_loop(const Node* n, const Value& seq, const std::shared_ptr<Scope>& scope, int64_t depth);

  // builtins.cc
  bool apply_filter(std::string_view name, const Value& input, CallArgs& args, Value& out);
  bool apply_test(std::string_view name, const Value& input, CallArgs& args, bool& out);
  bool get_attr(const Value& obj, const std::string& name, Value& out);
  bool get_item(const Value& obj, const Value& key, Value& out);
  bool binary(std::string_view op, const Value& a, const Value& b, Value& out);
  bool compare(std::string_view op, const Value& a, const Value& b, bool& out);
  bool contains(const Value& container, const Value& item, bool& out);
  bool iterate(const Value& v, std::vector<Value>& out);
  bool slice(const Value& obj, const Value* start, const Value* stop, const Value* step, Value& out);
  bool to_string_checked(const Value& v, std::string& out);  // str() ; fails on nothing
  Value globals_lookup(std::string_view name);
  bool percent_format(const std::string& fmt, const Value& args, std::string& out);

  const RenderOptions& opt_;
  std::string* out_;
  RenderError err_;
  bool failed_ = false;
  uint64_t steps_ = 0;
  int depth_ = 0;
  int line_ = 0;
};

}  // namespace ramjet::render::jinja
