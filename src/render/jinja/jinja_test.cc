#include <gtest/gtest.h>

#include "render/chat_template.h"
#include "render/jinja/template.h"

namespace ramjet::render::jinja {
namespace {

std::string R(std::string_view src, std::string_view ctx_json = "{}", RenderOptions opt = {}) {
  auto t = Template::parse(src, opt.limits);
  if (!t.ok()) return "PARSE:" + std::string(to_string(t.error().code)) + ":" + t.error().message;
  auto ctx = ramjet::render::value_from_json(ctx_json);
  EXPECT_TRUE(ctx.ok());
  auto r = t.value()->render(ctx.value(), opt);
  if (!r.ok()) return "ERR:" + std::string(to_string(r.error().code)) + ":" + r.error().message;
  return r.value();
}

TEST(Jinja, TextAndWhitespaceControl) {
  EXPECT_EQ(R("a {{- ' b ' -}} c"), "a b c");
  EXPECT_EQ(R("x\n  {% if true %}\n  y\n  {% endif %}\nz"), "x\n  y\nz");
  EXPECT_EQ(R("a\n{%+ if true %}b{% endif %}"), "a\nb");
  EXPECT_EQ(R("line\n"), "line");
  EXPECT_EQ(R("{# c #}\nx"), "x");
  EXPECT_EQ(R("a {% raw %}{{ x }}{% if %}{% endraw %} b"), "a {{ x }}{% if %} b");
  EXPECT_EQ(R("a\u3000 {%- if true -%} \u00a0 b{% endif %}"), "ab");  // Unicode whitespace
}

TEST(Jinja, PythonValues) {
  EXPECT_EQ(R("{{ true }} {{ False }} {{ none }} {{ 1.0 }} {{ 1e-5 }} {{ [1, 'a', \"b'\"] }}"),
            "True False None 1.0 1e-05 [1, 'a', \"b'\"]");
  EXPECT_EQ(R("{{ {'a': 1, 'b': [true, none]} }}"), "{'a': 1, 'b': [True, None]}");
  EXPECT_EQ(R("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 'a' ~ 1 }}"),
            "3 -4 2 1024 3.5 a1");
}

TEST(Jinja, LoopsAndNamespace) {
  EXPECT_EQ(R("{% for x in xs %}{{ loop.index }}{{ x }}{% if loop.last %}!{% endif %}{% endfor %}",
              R"({"xs":["a","b"]})"),
            "1a2b!");
  EXPECT_EQ(R("{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% else %}E{% endfor %}",
              R"({"xs":[1,2,3]})"),
            "2232");
  EXPECT_EQ(R("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(R("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}"
              "{% break %}{% endif %}{{ x }}{% endfor %}"),
            "13");
  EXPECT_EQ(R("{% set ns = namespace(n=0) %}{% for x in [1,2,3] %}{% set ns.n = ns.n + x %}"
              "{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(R("{% set n = 0 %}{% for x in [1,2] %}{% set n = n + x %}{% endfor %}{{ n }}"), "0");
  EXPECT_EQ(R("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", R"({"d":{"b":1,"a":2}})"),
            "b=1;a=2;");
  EXPECT_EQ(R("{% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}"),
            "-2,1-3,2-,");
  // Each iteration starts from the enclosing scope (jinja2 semantics).
  EXPECT_EQ(R("{% set a = 5 %}{% for x in [1,2,3] %}{{ a }}{% set a = x %}{{ a }}{% endfor %}{{ a }}"),
            "5152535");
  EXPECT_EQ(R("{% for x in [1,2] %}{% if loop.first %}{% set b = 1 %}{% endif %}[{{ b }}]{% endfor %}"),
            "[1][]");
}

TEST(Jinja, MacrosAndTests) {
  EXPECT_EQ(R("{% macro m(a, b='d') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}"),
            "[1d][12]");
  EXPECT_EQ(R("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}").substr(0, 8), "ERR:type");
  EXPECT_EQ(R("{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}"),
            "1(2,){'k': 3}");
  EXPECT_EQ(R("{% macro w() %}<{{ caller(2) }}>{% endmacro %}{% call(y) w() %}[{{ y }}]{% endcall %}"),
            "<[2]>");
  EXPECT_EQ(R("{% set t = [] %}{{ t.append(1) }}").substr(0, 15), "ERR:unsupported");
  EXPECT_EQ(R("{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 'a' is string }} "
              "{{ {} is mapping }} {{ [] is iterable }} {{ 1 is number }} {{ true is false }}"),
            "False True True True True True True False");
  EXPECT_EQ(R("{{ 'a' in 'cat' }} {{ 2 not in [1] }} {{ 'k' in {'k': 1} }}"), "True True True");
}

TEST(Jinja, StringsAndFilters) {
  EXPECT_EQ(R("{{ 'a,b,c'.split(',')[-1] }} {{ '  x '.strip() }} {{ 'xxhixx'.strip('x') }} "
              "{{ 'abc'[::-1] }} {{ 'Hello'.upper() }} {{ 'hello world'.title() }}"),
            "c x hi cba HELLO Hello World");
  EXPECT_EQ(R("{{ x | tojson }}", R"({"x":{"a":[1,2.5,"é\n"],"b":null,"c":true}})"),
            R"({"a": [1, 2.5, "é\n"], "b": null, "c": true})");
  EXPECT_EQ(R("{{ x | tojson(indent=2) }}", R"({"x":{"a":[1]}})"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(R("{{ [3,1,2] | length }} {{ 'abc' | first }} {{ [1,2] | last }} {{ [1,2] | join('-') }} "
              "{{ x | default('d') }} {{ ' t ' | trim }} {{ '5' | int + 1 }} {{ [1,2] | reverse | list }}"),
            "3 a 2 1-2 d t 6 [2, 1]");
  EXPECT_EQ(R("{{ xs | selectattr('a') | map(attribute='b') | join(',') }}",
              R"({"xs":[{"a":1,"b":"x"},{"a":0,"b":"y"},{"a":true,"b":"z"}]})"),
            "x,z");
  EXPECT_EQ(R("{{ '%s-%d' | format('a', 3) }} {{ 'a\nb' | indent(2) }}"), "a-3 a\n  b");
}

TEST(Jinja, UndefinedSemantics) {
  EXPECT_EQ(R("[{{ x }}]{{ x | length }}{% if not x %}f{% endif %}{{ d.missing }}", R"({"d":{}})"),
            "[]0f");
  EXPECT_EQ(R("{{ x.y }}").substr(0, 14), "ERR:undefined:");
  EXPECT_EQ(R("{{ raise_exception('boom') }}"), "ERR:raised:boom");
  EXPECT_EQ(R("{{ [1][5] }}|{{ none.x }}"), "|");
}

TEST(Jinja, ErrorsAndLimits) {
  EXPECT_EQ(R("{% if %}").substr(0, 12), "PARSE:syntax");
  EXPECT_EQ(R("{{ x | nosuchfilter }}").substr(0, 12), "PARSE:syntax");
  EXPECT_EQ(R("{% for %}").substr(0, 12), "PARSE:syntax");
  RenderOptions o;
  o.limits.max_steps = 1000;
  EXPECT_EQ(R("{% for i in range(100000) %}x{% endfor %}", "{}", o).substr(0, 9), "ERR:limit");
  o = {};
  o.limits.max_output_bytes = 100;
  EXPECT_EQ(R("{{ 'x' * 1000 }}", "{}", o).substr(0, 9), "ERR:limit");
  o = {};
  EXPECT_EQ(R("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", o).substr(0, 9),
            "ERR:limit");
  EXPECT_EQ(R("{{" + std::string(5000, '(') + "1" + std::string(5000, ')') + "}}").substr(0, 12),
            "PARSE:syntax");
  // Left-deep chains are bounded at render time (no stack overflow).
  std::string chain = "{{ 'x'";
  for (int i = 0; i < 50000; ++i) chain += "|string";
  EXPECT_EQ(R(chain + " }}").substr(0, 9), "ERR:limit");
  std::string sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) sum += "+1";
  EXPECT_EQ(R(sum + " }}").substr(0, 9), "ERR:limit");
  // Values stored across iterations cannot nest without bound nor form cycles.
  EXPECT_EQ(R("{% set ns = namespace(x=1) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
              "{% endfor %}{{ ns.x }}").substr(0, 9),
            "ERR:limit");
  EXPECT_EQ(R("{% set ns = namespace(x=1) %}{% set ns.x = [ns] %}").substr(0, 15), "ERR:unsupported");
  EXPECT_EQ(R("{{ 1 / 0 }}").substr(0, 8), "ERR:type");
  EXPECT_EQ(R("{{ 'a' + 1 }}").substr(0, 8), "ERR:type");
  o = {};
  o.now = [] { return int64_t{0}; };
  EXPECT_EQ(R("{{ strftime_now('%Y-%m-%d') }}", "{}", o), "1970-01-01");
}

}  // namespace
}  // namespace ramjet::render::jinja
