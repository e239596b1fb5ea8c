// The tree-walking interpreter: statements, scopes (a for loop, a with block and a macro call
// open one; if does not), loop objects (recursive loops call back into run_loop one level
// deeper), macros with jinja2's argument binding (varargs, kwargs, caller), call arguments
// including *args / **kwargs, expression evaluation.
#include "render/template/jinja/interp.h"

#include <algorithm>
#include <optional>

#include "render/template/jinja/parser.h"

namespace ramjet::render::jinja {

std::string_view to_string(RenderErrc code) {
  switch (code) {
    case RenderErrc::kTooLarge: return "too_large";
    case RenderErrc::kSyntax: return "syntax";
    case RenderErrc::kUndefined: return "undefined";
    case RenderErrc::kType: return "type";
    case RenderErrc::kRaised: return "raised";
    case RenderErrc::kLimit: return "limit";
    case RenderErrc::kUnsupported: return "unsupported";
    case RenderErrc::kBadRequest: return "bad_request";
  }
  return "unknown";
}

Template::Template() = default;
Template::~Template() = default;

RenderResult<std::shared_ptr<const Template>> Template::parse(std::string_view source,
                                                              const Limits& limits) {
  auto t = std::shared_ptr<Template>(new Template());
  RenderError err;
  if (!parse_template(source, limits, *t, err)) return err;
  return std::shared_ptr<const Template>(std::move(t));
}

RenderResult<std::string> Template::render(const Value& context,
                                           const RenderOptions& options) const {
  std::string out;
  Interp in(options, out);
  auto scope = std::make_shared<Scope>();
  if (context.is_dict()) scope->vars = context.dict_ref();
  auto flow = in.exec(root_, scope);
  if (flow == Interp::Flow::kError || in.failed_) {
    if (!in.failed_) in.fail(RenderErrc::kType, "render failed");
    return in.err_;
  }
  return out;
}

namespace {

struct DepthGuard {
  Interp& in;
  explicit DepthGuard(Interp& i) : in(i) { ++in.depth_; }
  ~DepthGuard() { --in.depth_; }
};

bool assign_targets(Interp& in, const std::vector<std::string>& names, const Value& v,
                    Scope& scope) {
  if (names.size() == 1) {
    scope.vars.set(names[0], v);
    return true;
  }
  std::vector<Value> items;
  if (!in.iterate(v, items)) return false;
  if (items.size() != names.size())
    return in.fail(RenderErrc::kType, "cannot unpack " + std::to_string(items.size()) +
                                          " values into " + std::to_string(names.size()));
  for (size_t i = 0; i < names.size(); ++i) scope.vars.set(names[i], items[i]);
  return true;
}

}  // namespace

bool Interp::capture(const Node* body, const std::shared_ptr<Scope>& scope, std::string& out) {
  return capture_flow([&] { return exec(body, scope); }, out);
}

bool Interp::capture_flow(const std::function<Flow()>& run, std::string& out) {
  std::string* saved = out_;
  std::string buf;
  out_ = &buf;
  Flow f = run();
  out_ = saved;
  if (f != Flow::kError && !charge(buf.size())) return false;
  if (f == Flow::kError || failed_) return false;
  if (out_->size() + buf.size() > opt_.limits.max_output_bytes)
    return fail(RenderErrc::kLimit, "output larger than the limit");
  out = std::move(buf);
  return true;
}

Interp::Flow Interp::exec(const Node* n, const std::shared_ptr<Scope>& scope) {
  if (!step()) return Flow::kError;
  line_ = n->line;
  switch (n->kind) {
    case NK::kBody: {
      DepthGuard g(*this);
      if (depth_ > opt_.limits.max_depth) {
        fail(RenderErrc::kLimit, "nesting too deep");
        return Flow::kError;
      }
      for (const Node* k : n->kids) {
        Flow f = exec(k, scope);
        if (f != Flow::kNormal) return f;
      }
      return Flow::kNormal;
    }
    case NK::kText: return write(n->literal.str()) ? Flow::kNormal : Flow::kError;
    case NK::kEmit: {
      Value tmp;
      const Value* v = eval_ptr(n->a, scope, tmp);
      if (!v) return Flow::kError;
      if (v->is_string()) return write(v->str()) ? Flow::kNormal : Flow::kError;
      std::string s;
      v->append_str(s);
      return write(s) ? Flow::kNormal : Flow::kError;
    }
    case NK::kIf: {
      Value tmp;
      const Value* c = eval_ptr(n->a, scope, tmp);
      if (!c) return Flow::kError;
      if (c->truthy()) return exec(n->b, scope);
      if (n->c) return exec(n->c, scope);
      return Flow::kNormal;
    }
    case NK::kFor: {
      Value seq;
      if (!eval(n->a, scope, seq)) return Flow::kError;
      return run_loop(n, seq, scope, 1);
    }
    case NK::kSet: {
      Value v;
      if (!eval(n->a, scope, v)) return Flow::kError;
      return assign_targets(*this, n->names, v, *scope) ? Flow::kNormal : Flow::kError;
    }
    case NK::kSetAttr: {
      const Value* target = scope->lookup(n->names[0]);
      Value ns = target ? *target : globals_lookup(n->names[0]);
      if (!ns.is_namespace()) {
        fail(RenderErrc::kType, "cannot assign attribute on non-namespace object");
        return Flow::kError;
      }
      Value v;
      if (!eval(n->a, scope, v)) return Flow::kError;
      if (v.nesting() > opt_.limits.max_depth) {
        fail(RenderErrc::kLimit, "value nested too deeply");
        return Flow::kError;
      }
      if (contains_namespace(v, ns)) {  // would make a reference cycle
        fail(RenderErrc::kUnsupported, "a namespace cannot contain itself (nor a loop object)");
        return Flow::kError;
      }
      ns.dict_mut().set(n->names[1], std::move(v));
      return Flow::kNormal;
    }
    case NK::kSetBlock: {
      std::string s;
      if (!capture(n->b, scope, s)) return Flow::kError;
      Value v(std::move(s));
      if (n->d) {
        auto tmp = std::make_shared<Scope>();
        tmp->parent = scope;
        tmp->vars.set("\x01block", v);
        if (!eval(n->d, tmp, v)) return Flow::kError;
      }
      scope->vars.set(n->names[0], std::move(v));
      return Flow::kNormal;
    }
    case NK::kFilterBlock: {
      std::string s;
      if (!capture(n->b, scope, s)) return Flow::kError;
      auto tmp = std::make_shared<Scope>();
      tmp->parent = scope;
      tmp->vars.set("\x01block", Value(std::move(s)));
      Value v;
      if (!eval(n->d, tmp, v)) return Flow::kError;
      std::string o;
      v.append_str(o);
      return write(o) ? Flow::kNormal : Flow::kError;
    }
    case NK::kMacro: {
      std::weak_ptr<Scope> weak = scope;  // a macro stored in its own scope must not leak it
      scope->weakly_held = true;
      const Node* def = n;
      Callable fn;
      fn.name = n->name;
      fn.fn = [def, weak](Interp& in, CallArgs& args, Value& out, RenderError&) {
        return in.call_macro(def, weak.lock(), args, out);
      };
      fn.repr = n->name == "caller" ? "<Macro anonymous>" : "<Macro '" + n->name + "'>";
      scope->vars.set(n->name, Value::callable(std::move(fn)));
      return Flow::kNormal;
    }
    case NK::kCallBlock: {
      // {% call m(args) %}body{% endcall %}: m gets caller=<macro rendering body>.
      const Node* sig = n->b;
      Node tmp_macro = *sig;
      auto caller_scope = std::make_shared<Scope>();
      caller_scope->parent = scope;
      Flow f = exec(&tmp_macro, caller_scope);
      if (f != Flow::kNormal) return f;
      Value caller = *caller_scope->vars.find("caller");
      const Node* call = n->a;
      Value callee;
      if (!eval(call->a, scope, callee)) return Flow::kError;
      CallArgs args;
      if (!eval_args(call, scope, args)) return Flow::kError;
      if (args.get_kw("caller")) {
        fail(RenderErrc::kType, "got multiple values for keyword argument 'caller'");
        return Flow::kError;
      }
      args.kw.emplace_back("caller", caller);
      Value out;
      if (!this->call(callee, args, out)) return Flow::kError;
      std::string s;
      out.append_str(s);
      return write(s) ? Flow::kNormal : Flow::kError;
    }
    case NK::kWith: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      for (const Node* set : n->kids) {
        Value v;
        if (!eval(set->a, scope, v) || !assign_targets(*this, set->names, v, *inner)) return Flow::kError;
      }
      return exec(n->b, inner);
    }
    case NK::kBreak: return Flow::kBreak;
    case NK::kContinue: return Flow::kContinue;
    default: break;
  }
  fail(RenderErrc::kUnsupported, "unknown statement");
  return Flow::kError;
}

bool Interp::eval_args(const Node* n, const std::shared_ptr<Scope>& scope, CallArgs& args) {
  for (const Node* k : n->kids) {
    Value v;
    if (!eval(k, scope, v)) return false;
    args.pos.push_back(std::move(v));
  }
  if (n->b) {  // *args: any iterable (undefined iterates as empty, like jinja2's Undefined)
    Value v;
    if (!eval(n->b, scope, v)) return false;
    if (!v.is_list() && !v.is_string() && !v.is_dict() && !v.is_undefined())
      return fail(RenderErrc::kType, "value after * must be an iterable");
    std::vector<Value> items;
    if (!iterate(v, items)) return false;
    if (!charge(items.size() * 8)) return false;
    for (auto& x : items) args.pos.push_back(std::move(x));
  }
  for (size_t i = 0; i < n->kw.size(); ++i) {
    Value v;
    if (!eval(n->kw[i], scope, v)) return false;
    args.kw.emplace_back(n->names[i], std::move(v));
  }
  if (n->c) {  // **kwargs: a dict
    Value v;
    if (!eval(n->c, scope, v)) return false;
    if (v.is_undefined()) return fail(RenderErrc::kUndefined, "'" + v.undefined_name() + "' is undefined");
    if (!v.is_dict()) return fail(RenderErrc::kType, "argument after ** must be a mapping");
    // Dict keys are unique and so are the explicit keywords (the parser checks): only the
    // two sets can collide.
    const size_t explicit_kw = args.kw.size();
    if (!charge(v.dict_ref().items.size() * (8 + explicit_kw))) return false;
    for (const auto& [k, x] : v.dict_ref().items) {
      for (size_t i = 0; i < explicit_kw; ++i)
        if (args.kw[i].first == k)
          return fail(RenderErrc::kType, "got multiple values for keyword argument '" + k + "'");
      args.kw.emplace_back(k, x);
    }
  }
  return true;
}

// jinja2's Macro.__call__: positional arguments fill the parameters in order, keywords fill the
// rest; a body that reads `caller` takes the caller keyword; leftovers go to kwargs / varargs
// when the body reads them and are a TypeError otherwise.
bool Interp::call_macro(const Node* def, const std::shared_ptr<Scope>& parent, CallArgs& args,
                        Value& out) {
  auto local = std::make_shared<Scope>();
  local->parent = parent;
  const size_t np = def->names.size();
  const size_t off = std::min(args.pos.size(), np);
  for (size_t i = 0; i < off; ++i) local->vars.set(def->names[i], args.pos[i]);
  auto take_kw = [&](std::string_view name, Value& v) {
    for (auto it = args.kw.begin(); it != args.kw.end(); ++it)
      if (it->first == name) {
        v = std::move(it->second);
        args.kw.erase(it);
        return true;
      }
    return false;
  };
  if (!charge(args.kw.size() * np)) return false;  // take_kw below
  bool found_caller = def->explicit_caller;
  if (off != np) {
    found_caller = false;
    for (size_t i = off; i < np; ++i) {
      Value v;
      if (take_kw(def->names[i], v)) local->vars.set(def->names[i], std::move(v));
      if (def->names[i] == "caller") found_caller = true;
    }
  }
  if (def->uses_caller && !found_caller) {
    Value c;
    if (!take_kw("caller", c) || c.is_none()) c = Value::undefined("caller");
    local->vars.set("caller", std::move(c));
  }
  Dict kwargs;
  if (def->uses_kwargs) {  // the keywords are unique (eval_args)
    kwargs.items = std::move(args.kw);
  } else if (!args.kw.empty()) {
    for (auto& [k, v] : args.kw)
      if (k == "caller")
        return fail(RenderErrc::kType, "macro '" + def->name +
                                           "' was invoked with two values for the special caller argument");
    return fail(RenderErrc::kType, "macro '" + def->name + "' takes no keyword argument '" +
                                       args.kw.front().first + "'");
  }
  if (!def->uses_varargs && args.pos.size() > np)
    return fail(RenderErrc::kType, "macro '" + def->name + "' takes not more than " +
                                       std::to_string(np) + " argument(s)");
  for (size_t i = 0; i < np; ++i) {
    if (local->vars.find(def->names[i])) continue;
    if (def->kw[i]) {
      Value d;
      if (!eval(def->kw[i], local, d)) return false;
      local->vars.set(def->names[i], std::move(d));
    } else {
      local->vars.set(def->names[i], Value::undefined(def->names[i]));
    }
  }
  if (def->uses_varargs)
    local->vars.set("varargs", Value::list(List(args.pos.begin() + static_cast<std::ptrdiff_t>(off),
                                                args.pos.end()), true));
  if (def->uses_kwargs) local->vars.set("kwargs", Value::dict(std::move(kwargs)));
  std::string s;
  if (!capture(def->b, local, s)) return false;
  out = Value(std::move(s));
  return true;
}

namespace {

bool contains_callable(const Value& v) {
  if (v.is_callable()) return true;
  if (v.is_list()) {
    for (const auto& x : v.items())
      if (contains_callable(x)) return true;
  } else if (v.is_dict() || v.is_namespace()) {
    for (const auto& kv : v.dict_ref().items)
      if (contains_callable(kv.second)) return true;
  }
  return false;
}

// loop.changed(*values): whether the values differ from the previous call's (one state per
// loop level, shared by its iterations).
Value make_changed() {
  auto last = std::make_shared<std::optional<List>>();
  return Value::callable("changed", [last](Interp& in, CallArgs& a, Value& out, RenderError&) {
    // The remembered arguments outlive the iteration: a function among them (the loop object
    // itself, a bound method) could close a reference cycle, so those are refused.
    for (const auto& x : a.pos)
      if (contains_callable(x))
        return in.fail(RenderErrc::kUnsupported, "loop.changed() of a function");
    bool same = last->has_value() && (*last)->size() == a.pos.size();
    for (size_t k = 0; same && k < a.pos.size(); ++k) same = py_equal((**last)[k], a.pos[k]);
    if (!same) *last = a.pos;
    out = Value(!same);
    return true;
  });
}

}  // namespace

bool loop_attr(const Callable& c, std::string_view name, Value& out) {
  const LoopState& st = *c.loop;
  const int64_t i = c.loop_index, len = c.loop_length;
  if (same_name(name, "index")) out = Value(i + 1);
  else if (same_name(name, "index0")) out = Value(i);
  else if (same_name(name, "first")) out = Value(i == 0);
  else if (same_name(name, "last")) out = Value(i == len - 1);
  else if (same_name(name, "length")) out = Value(len);
  else if (same_name(name, "revindex")) out = Value(len - i);
  else if (same_name(name, "revindex0")) out = Value(len - i - 1);
  else if (same_name(name, "depth")) out = Value(st.depth);
  else if (same_name(name, "depth0")) out = Value(st.depth - 1);
  else if (same_name(name, "previtem") && i > 0) out = st.items[static_cast<size_t>(i - 1)];
  else if (same_name(name, "nextitem") && i + 1 < len) out = st.items[static_cast<size_t>(i + 1)];
  else if (same_name(name, "changed")) out = st.changed;
  else if (same_name(name, "cycle"))
    out = Value::callable("cycle", [i](Interp& in, CallArgs& a, Value& o, RenderError&) {
      if (a.pos.empty()) return in.fail(RenderErrc::kType, "no items for cycling given");
      o = a.pos[static_cast<size_t>(i) % a.pos.size()];
      return true;
    });
  else return false;
  return true;
}

// loop(iterable) in a recursive loop: renders the loop body over `iterable` one level deeper
// and returns the text.
bool Interp::call_loop(const Callable& c, CallArgs& a, Value& out) {
  const LoopState& st = *c.loop;
  if (!st.n->flag)
    return fail(RenderErrc::kType, "The loop must have the 'recursive' marker to be called recursively.");
  if (a.pos.size() != 1 || !a.kw.empty()) return fail(RenderErrc::kType, "loop() takes exactly one argument");
  auto scope = st.outer.lock();
  if (!scope) return fail(RenderErrc::kType, "loop called after its scope ended");
  std::string s;
  const Node* n = st.n;
  const int64_t depth = st.depth;
  if (!capture_flow([&] { return run_loop(n, a.pos[0], scope, depth + 1); }, s)) return false;
  out = Value(std::move(s));
  return true;
}

Interp::Flow Interp::run_loop(const Node* n, const Value& seq, const std::shared_ptr<Scope>& scope,
                              int64_t depth) {
  std::vector<Value> items;
  if (!iterate(seq, items)) return Flow::kError;
  if (n->d) {  // for x in xs if cond
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    std::vector<Value> kept;
    for (auto& it : items) {
      if (!step() || !assign_targets(*this, n->names, it, *inner)) return Flow::kError;
      Value c;
      if (!eval(n->d, inner, c)) return Flow::kError;
      if (c.truthy()) kept.push_back(std::move(it));
    }
    items = std::move(kept);
  }
  if (items.empty()) return n->c ? exec(n->c, scope) : Flow::kNormal;
  const auto len = static_cast<int64_t>(items.size());
  auto state = std::make_shared<LoopState>();
  state->n = n;
  if (n->flag) {  // only a recursive loop's loop(...) goes back to the scope
    state->outer = scope;
    scope->weakly_held = true;
  }
  state->items = std::move(items);
  state->depth = depth;
  state->changed = make_changed();
  const std::vector<Value>& elems = state->items;
  std::shared_ptr<Scope> inner;
  Value loop_obj;
  for (int64_t i = 0; i < len; ++i) {
    if (!step()) return Flow::kError;
    // jinja2: every iteration starts from the enclosing scope (assignments in the body do
    // not carry over to the next iteration nor out of the loop).
    // The previous iteration's scope and loop object are reused when nothing kept them
    // (no reference, no weak reference): a reset scope and a loop object at index i are
    // indistinguishable from new ones.
    if (inner && inner.use_count() == 1 && !inner->weakly_held) {
      inner->vars.items.clear();
    } else {
      inner = std::make_shared<Scope>();
      inner->parent = scope;
      inner->vars.items.reserve(4);
    }
    if (Callable* reuse = loop_obj.unique_callable()) {
      reuse->loop_index = i;
    } else {
      Callable loop;
      loop.name = "loop";
      loop.opaque = true;  // changed() remembers values: never stored in a namespace
      loop.loop = state;
      loop.loop_index = i;
      loop.loop_length = len;
      loop_obj = Value::callable(std::move(loop));
    }
    inner->vars.items.emplace_back("loop", loop_obj);
    if (!assign_targets(*this, n->names, elems[static_cast<size_t>(i)], *inner)) return Flow::kError;
    Flow f = exec(n->b, inner);
    if (f == Flow::kError) return f;
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

bool Interp::call(const Value& callee, CallArgs& args, Value& out) {
  if (!step()) return false;
  if (callee.is_undefined())
    return fail(RenderErrc::kUndefined, "'" + callee.undefined_name() + "' is undefined");
  if (!callee.is_callable()) return fail(RenderErrc::kType, "object is not callable");
  DepthGuard g(*this);
  if (depth_ > opt_.limits.max_depth) return fail(RenderErrc::kLimit, "call depth exceeded");
  if (callee.fn().loop) return call_loop(callee.fn(), args, out);
  RenderError e;
  if (!callee.fn().fn(*this, args, out, e)) {
    if (!failed_) fail(e.code, e.message);
    return false;
  }
  return true;
}

const Value* Interp::eval_ptr(const Node* n, const std::shared_ptr<Scope>& scope, Value& tmp) {
  // eval() would charge one level of depth for these too.
  if (depth_ + 1 <= 4 * opt_.limits.max_depth) {
    if (n->kind == NK::kLiteral) return &n->literal;
    if (n->kind == NK::kName) {
      if (const Value* v = scope->lookup(n->name)) return v;
      tmp = globals_lookup(n->name);
      return &tmp;
    }
  }
  return eval(n, scope, tmp) ? &tmp : nullptr;
}

bool Interp::eval_plus_chain(const Node* n, const std::shared_ptr<Scope>& scope, Value& out) {
  // n is a kBinary "+" whose DepthGuard is held (depth_ = D + 1); its left operand may be
  // another "+" node, and so on: chain[0] = n, chain[i] = chain[i - 1]->a.
  std::vector<const Node*> chain{n};
  while (chain.back()->a->kind == NK::kBinary && chain.back()->a->name == "+")
    chain.push_back(chain.back()->a);
  const int base = depth_;  // chain[i] is evaluated at depth base + i
  const int limit = 4 * opt_.limits.max_depth;
  const size_t k = chain.size();
  // eval(chain[i]) fails on entry when base + i exceeds the limit, before anything is
  // evaluated; the deepest one decides.
  if (base + static_cast<int64_t>(k) - 1 > limit) return fail(RenderErrc::kLimit, "expression nested too deeply");
  struct Restore {
    int& d;
    int v;
    ~Restore() { d = v; }
  } restore{depth_, base};
  Value left_tmp;
  depth_ = base + static_cast<int>(k) - 1;
  const Value* left = eval_ptr(chain[k - 1]->a, scope, left_tmp);
  if (!left) return false;
  // While `acc` holds the left operand it is a string being appended to (left == nullptr).
  std::string acc;
  bool in_acc = false;
  const size_t max_bytes = opt_.limits.max_output_bytes;
  for (size_t j = k; j-- > 0;) {
    const Node* op = chain[j];
    depth_ = base + static_cast<int>(j);
    Value right_tmp;
    const Value* right = eval_ptr(op->b, scope, right_tmp);
    if (!right) return false;
    line_ = op->line;
    if (right->is_string() && (in_acc || left->is_string())) {
      // binary("+") on two strings: size limit, charge, concatenate.
      const size_t left_size = in_acc ? acc.size() : left->str().size();
      if (left_size + right->str().size() > max_bytes) return fail(RenderErrc::kLimit, "string too large");
      if (!charge(left_size + right->str().size())) return false;
      if (!in_acc) {
        acc.reserve(left_size + right->str().size());
        acc = left->str();
        in_acc = true;
        left = nullptr;
        left_tmp = Value();
      }
      acc += right->str();
      continue;
    }
    if (in_acc) {
      left_tmp = Value(std::move(acc));
      acc.clear();
      in_acc = false;
      left = &left_tmp;
    }
    Value result;
    if (!binary("+", *left, *right, result)) return false;
    left_tmp = std::move(result);
    left = &left_tmp;
  }
  out = in_acc ? Value(std::move(acc)) : left == &left_tmp ? std::move(left_tmp) : *left;
  return true;
}

bool Interp::eval(const Node* n, const std::shared_ptr<Scope>& scope, Value& out) {
  // Left-deep chains (a ~ b ~ ..., x|f|g|..., a.b.c...) are not bounded by the parser's
  // nesting limit; bound the evaluation recursion here.
  DepthGuard g(*this);
  if (depth_ > 4 * opt_.limits.max_depth) return fail(RenderErrc::kLimit, "expression nested too deeply");
  switch (n->kind) {
    case NK::kLiteral: out = n->literal; return true;
    case NK::kName: {
      const Value* v = scope->lookup(n->name);
      out = v ? *v : globals_lookup(n->name);
      return true;
    }
    case NK::kAttr: {
      Value tmp;
      const Value* obj = eval_ptr(n->a, scope, tmp);
      if (!obj) return false;
      return get_attr(*obj, n->name, out);
    }
    case NK::kItem: {
      Value tmp_obj, tmp_key;
      const Value* obj = eval_ptr(n->a, scope, tmp_obj);
      if (!obj) return false;
      const Value* key = eval_ptr(n->b, scope, tmp_key);
      if (!key) return false;
      return get_item(*obj, *key, out);
    }
    case NK::kSlice: {
      Value obj, a, b, c;
      if (!eval(n->a, scope, obj)) return false;
      if (n->b && !eval(n->b, scope, a)) return false;
      if (n->c && !eval(n->c, scope, b)) return false;
      if (n->d && !eval(n->d, scope, c)) return false;
      return slice(obj, n->b ? &a : nullptr, n->c ? &b : nullptr, n->d ? &c : nullptr, out);
    }
    case NK::kCall:
    case NK::kFilter:
    case NK::kTest: {
      Value tmp;
      const Value* callee_p = eval_ptr(n->a, scope, tmp);
      if (!callee_p) return false;
      // The callee / filter input must outlive `out` being assigned: hold it here.
      const Value callee = callee_p == &tmp ? std::move(tmp) : *callee_p;
      CallArgs args;
      if (!eval_args(n, scope, args)) return false;
      line_ = n->line;
      if (n->kind == NK::kCall) return call(callee, args, out);
      if (n->kind == NK::kFilter) {
        if (!step()) return false;
        return apply_filter(n->name, callee, args, out);
      }
      bool r = false;
      if (!apply_test(n->name, callee, args, r)) return false;
      out = Value(n->flag ? !r : r);
      return true;
    }
    case NK::kNeg:
    case NK::kPos: {
      Value x;
      if (!eval(n->a, scope, x)) return false;
      if (x.is_int() || x.is_bool()) {
        if (n->kind == NK::kNeg && x.as_int() == INT64_MIN)
          return fail(RenderErrc::kLimit, "integer overflow");
        out = Value(n->kind == NK::kNeg ? -x.as_int() : x.as_int());
      } else if (x.is_float()) {
        out = Value(n->kind == NK::kNeg ? -x.as_double() : x.as_double());
      } else if (x.is_undefined()) {
        return fail(RenderErrc::kUndefined, "'" + x.undefined_name() + "' is undefined");
      } else {
        return fail(RenderErrc::kType, "bad operand type for unary operator");
      }
      return true;
    }
    case NK::kNot: {
      Value tmp;
      const Value* x = eval_ptr(n->a, scope, tmp);
      if (!x) return false;
      out = Value(!x->truthy());
      return true;
    }
    case NK::kAnd:
    case NK::kOr: {
      Value l;
      if (!eval(n->a, scope, l)) return false;
      if (n->kind == NK::kAnd ? !l.truthy() : l.truthy()) {
        out = std::move(l);
        return true;
      }
      return eval(n->b, scope, out);
    }
    case NK::kBinary: {
      if (n->name == "+") return eval_plus_chain(n, scope, out);
      Value tl, tr;
      const Value* l = eval_ptr(n->a, scope, tl);
      if (!l) return false;
      const Value* r = eval_ptr(n->b, scope, tr);
      if (!r) return false;
      line_ = n->line;
      return binary(n->name, *l, *r, out);
    }
    case NK::kCompare: {
      Value tmp[2];
      const Value* l = eval_ptr(n->kids[0], scope, tmp[0]);
      if (!l) return false;
      for (size_t i = 0; i < n->names.size(); ++i) {
        // The right operand goes to whichever temporary the left one does not use.
        Value& rt = l == &tmp[0] ? tmp[1] : tmp[0];
        const Value* r = eval_ptr(n->kids[i + 1], scope, rt);
        if (!r) return false;
        bool res = false;
        const std::string& op = n->names[i];
        if (op == "in" || op == "notin") {
          if (!contains(*r, *l, res)) return false;
          if (op == "notin") res = !res;
        } else if (!compare(op, *l, *r, res)) {
          return false;
        }
        if (!res) {
          out = Value(false);
          return true;
        }
        l = r;
      }
      out = Value(true);
      return true;
    }
    case NK::kCond: {
      Value tmp;
      const Value* c = eval_ptr(n->a, scope, tmp);
      if (!c) return false;
      if (c->truthy()) return eval(n->b, scope, out);
      if (n->c) return eval(n->c, scope, out);
      out = Value::undefined();
      return true;
    }
    case NK::kList:
    case NK::kTuple: {
      List items;
      for (const Node* k : n->kids) {
        Value v;
        if (!eval(k, scope, v)) return false;
        items.push_back(std::move(v));
      }
      out = Value::list(std::move(items), n->kind == NK::kTuple);
      return true;
    }
    case NK::kDict: {
      Dict d;
      for (size_t i = 0; i < n->kids.size(); ++i) {
        Value k, v;
        if (!eval(n->kids[i], scope, k) || !eval(n->kw[i], scope, v)) return false;
        if (!k.is_string()) return fail(RenderErrc::kUnsupported, "non-string dict keys");
        d.set(k.str(), std::move(v));
      }
      out = Value::dict(std::move(d));
      return true;
    }
    default: break;
  }
  return fail(RenderErrc::kUnsupported, "unknown expression");
}

}  // namespace ramjet::render::jinja
