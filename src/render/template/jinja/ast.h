// render::jinja AST: one node type for statements and expressions (owned by Template::pool_).
#pragma once

#include <string>
#include <vector>

#include "render/template/jinja/value.h"

namespace ramjet::render::jinja {

enum class NK {
  // statements
  kBody, kText, kEmit, kIf, kFor, kSet, kSetAttr, kSetBlock, kMacro, kBreak, kContinue,
  kCallBlock, kFilterBlock, kWith,
  // expressions
  kLiteral, kName, kAttr, kItem, kSlice, kCall, kFilter, kTest, kNeg, kPos, kNot, kAnd, kOr,
  kBinary, kCompare, kCond, kList, kTuple, kDict,
};

struct Node {
  NK kind;
  int line = 0;
  std::string name;                // name, attribute, operator, filter/test/macro name
  Value literal;                   // kLiteral
  std::vector<const Node*> kids;   // body statements, positional args, list items, operands
  std::vector<std::string> names;  // for/set targets, kwarg names, macro params, compare ops
  std::vector<const Node*> kw;     // kwarg values / macro param defaults (nullptr = none)
  const Node* a = nullptr;         // condition / object / iterable / value / callee
  const Node* b = nullptr;         // body / slice start / then-branch / call: *args
  const Node* c = nullptr;         // else body / slice stop / else-branch / call: **kwargs
  const Node* d = nullptr;         // for filter / slice step
  bool flag = false;               // negated test; for: recursive
  // macro / call-block signature: whether the body reads varargs, kwargs or caller (jinja2 then
  // accepts extra positional / keyword arguments, or a caller), and whether `caller` is a
  // declared parameter.
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false, explicit_caller = false;
};

}  // namespace ramjet::render::jinja
