#include <gtest/gtest.h>

#include "render/template/chat_template.h"
#include "render/template/jinja/template.h"

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

TEST(Jinja, RecursiveLoopRendersChildrenOneLevelDeeperWithDepthAndDepth0) {
  const char* tree = R"({"t":[{"n":"a","c":[{"n":"b","c":[{"n":"c"}]}]},{"n":"d"}]})";
  EXPECT_EQ(R("{% for x in t recursive %}[{{ x.n }}:{{ loop.depth }}/{{ loop.depth0 }}"
              "{% if x.c %}({{ loop(x.c) }}){% endif %}]{% endfor %}",
              tree),
            "[a:1/0([b:2/1([c:3/2])])][d:1/0]");
  // The filter applies at every level; else runs for an empty level; loop.length is per level.
  EXPECT_EQ(R("{% for x in [1,2,3] if x > 1 recursive %}{{ x }}{{ loop.length }}{% if x == 2 %}"
              "<{{ loop([4,5,1]) }}>{% endif %}{% endfor %}"),
            "22<4252>32");
  EXPECT_EQ(R("{% for x in [[], 1] recursive %}{% if x is iterable %}<{{ loop(x) }}>{% else %}{{ x }}"
              "{% endif %}{% else %}E{% endfor %}"),
            "<E>1");
  // Each level starts from the loop's enclosing scope, not from the calling iteration.
  EXPECT_EQ(R("{% set f = 1 %}{% for x in [1,[2]] recursive %}{% if loop.depth == 1 %}{% set f = 2 %}"
              "{% endif %}{% if x is iterable %}{{ loop(x) }}{% else %}{{ x }}{{ f }}{% endif %}{% endfor %}{{ f }}"),
            "12211");
  // break leaves only the level it is in; the loop object can be called from an inner loop.
  EXPECT_EQ(R("{% for x in [[1,2,3],4] recursive %}{% if x == 2 %}{% break %}{% endif %}"
              "{% if x is iterable %}({{ loop(x) }}){% else %}{{ x }}{% endif %}{% endfor %}"),
            "(1)4");
  EXPECT_EQ(R("{% for x in [1] recursive %}{% set outer = loop %}{% for y in [2] %}{{ loop.depth }}"
              "{{ outer([]) }}{% endfor %}{% endfor %}"),
            "1");
  EXPECT_EQ(R("{% for x in [1] %}{{ loop([1]) }}{% endfor %}").substr(0, 8), "ERR:type");
  EXPECT_EQ(R("{% for x in [1] recursive %}{{ loop(5) }}{% endfor %}").substr(0, 8), "ERR:type");
  EXPECT_EQ(R("{% for x in [1] recursive %}{{ loop([1], 2) }}{% endfor %}").substr(0, 8), "ERR:type");
}

TEST(Jinja, RecursiveLoopIsBoundedByTheDepthAndStepLimits) {
  EXPECT_EQ(R("{% for x in [1] recursive %}{{ loop([x]) }}{% endfor %}").substr(0, 9), "ERR:limit");
  RenderOptions o;
  o.limits.max_depth = 40;
  EXPECT_EQ(R("{% for x in [1] recursive %}{{ loop.depth }}{% if loop.depth < 5 %}{{ loop([x]) }}"
              "{% endif %}{% endfor %}", "{}", o),
            "12345");
  EXPECT_EQ(R("{% for x in [1] recursive %}{% if loop.depth < 100 %}{{ loop([x]) }}{% endif %}"
              "{% endfor %}", "{}", o).substr(0, 9),
            "ERR:limit");
  o = {};
  o.limits.max_steps = 100000;  // 10 children per level, 8 levels: 10^8 iterations
  EXPECT_EQ(R("{% for x in range(10) recursive %}{% if loop.depth < 8 %}{{ loop(range(10)) }}"
              "{% endif %}{% endfor %}", "{}", o).substr(0, 9),
            "ERR:limit");
  o = {};
  o.limits.max_output_bytes = 1000;
  EXPECT_EQ(R("{% for x in range(10) recursive %}xxxxxxxxxx{% if loop.depth < 4 %}{{ loop(range(10)) }}"
              "{% endif %}{% endfor %}", "{}", o).substr(0, 9),
            "ERR:limit");
}

TEST(Jinja, LoopObjectPrintsLikeLoopContextAndOffersChangedAndLength) {
  EXPECT_EQ(R("{% for x in [1,2] %}{{ loop }}|{{ loop is callable }}|{{ loop is mapping }}|"
              "{{ loop['index'] }}|{{ loop | length }};{% endfor %}"),
            "<LoopContext 1/2>|True|False|1|2;<LoopContext 2/2>|True|False|2|2;");
  EXPECT_EQ(R("{% for x in [1,2,2,3,1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}"), "1231");
  EXPECT_EQ(R("{% for x in 'abc' %}{{ loop.cycle('x', 'y') }}{% endfor %}"), "xyx");
  // Values that could close a reference cycle are refused (jinja2 allows them; Python has a GC).
  EXPECT_EQ(R("{% set ns = namespace() %}{% for x in [1] %}{% set ns.l = [loop] %}{% endfor %}").substr(0, 15),
            "ERR:unsupported");
  EXPECT_EQ(R("{% for x in [1] %}{{ loop.changed(loop) }}{% endfor %}").substr(0, 15), "ERR:unsupported");
  EXPECT_EQ(R("{% set ns = namespace() %}{% set d = {'n': ns} %}{% set ns.f = d.get %}").substr(0, 15),
            "ERR:unsupported");
  EXPECT_EQ(R("{% set ns = namespace() %}{% set ns.f = {'a': 1}.get %}{{ ns.f('a') }}"), "1");
}

TEST(Jinja, StarArgsAndDoubleStarKwargsSpreadIntoAnyCall) {
  EXPECT_EQ(R("{{ range(*[1, 7, 2]) | list }} {{ '{}-{}'.format(*'ab') }} {{ dict(b=2, **{'a': 1}) }}"),
            "[1, 3, 5] a-b {'b': 2, 'a': 1}");
  EXPECT_EQ(R("{{ [1,2] | join(*['-']) }} {{ 'a' is in(*['cat']) }} {{ xs | map(**{'attribute': 'k'}) | list }}",
              R"({"xs":[{"k":1},{"k":2}]})"),
            "1-2 True [1, 2]");
  EXPECT_EQ(R("{{ dict(*[], x=1) }}|{{ range(*[2],) | list }}|{{ dict(**{'a': 1},) }}|{{ dict(*u) }}"),
            "{'x': 1}|[0, 1]|{'a': 1}|{}");
  EXPECT_EQ(R("{{ dict(a=2, **{'a': 1}) }}").substr(0, 8), "ERR:type");  // repeated keyword
  EXPECT_EQ(R("{{ range(*5) }}").substr(0, 8), "ERR:type");
  EXPECT_EQ(R("{{ dict(**[1]) }}").substr(0, 8), "ERR:type");
  EXPECT_EQ(R("{{ dict(**u) }}").substr(0, 13), "ERR:undefined");
  // jinja2's grammar: positional, keywords, then *args, then **kwargs (once each).
  for (const char* bad : {"{{ range(*[3], *[1]) }}", "{{ range(*[3], 1) }}", "{{ dict(**{}, b=1) }}",
                          "{{ dict(**{}, **{}) }}", "{{ dict(**{}, *[]) }}", "{{ dict(a=1, a=2) }}",
                          "{{ f(a=1, 2) }}"})
    EXPECT_EQ(R(bad).substr(0, 12), "PARSE:syntax") << bad;
}

TEST(Jinja, MacrosTakeExtraArgumentsOnlyWhenTheyReadVarargsOrKwargs) {
  EXPECT_EQ(R("{% macro m(a, b=2) %}{{ a }}{{ b }}{{ varargs }}{{ kwargs }}{% endmacro %}"
              "{{ m(*[1,2,3], **{'z': 1}) }}|{{ m(1, *[5], k=2, **{'q': 3}) }}"),
            "12(3,){'z': 1}|15(){'k': 2, 'q': 3}");
  EXPECT_EQ(R("{% macro m(a, b=2) %}{{ a }}{{ b }}{% endmacro %}{{ m(**{'a': 1, 'b': 3}) }}"), "13");
  // A keyword for a parameter already given positionally lands in kwargs (or is an error).
  EXPECT_EQ(R("{% macro m(a) %}{{ a }}{{ kwargs }}{% endmacro %}{{ m(1, a=2) }}"), "1{'a': 2}");
  EXPECT_EQ(R("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, a=2) }}").substr(0, 8), "ERR:type");
  EXPECT_EQ(R("{% macro m(a, b=2) %}{% endmacro %}{{ m(*[1,2,3]) }}").substr(0, 8), "ERR:type");
  EXPECT_EQ(R("{% macro m() %}{{ varargs }}{% endmacro %}{{ m(x=3) }}").substr(0, 8), "ERR:type");
  EXPECT_EQ(R("{% macro m() %}{{ kwargs }}{% endmacro %}{{ m(3) }}").substr(0, 8), "ERR:type");
  // A nested macro reading varargs counts for the outer one; a parameter named varargs does not.
  EXPECT_EQ(R("{% macro m(x) %}{% macro n() %}{{ varargs }}{% endmacro %}{{ x }}{% endmacro %}{{ m(1, 2) }}"), "1");
  EXPECT_EQ(R("{% macro m(varargs) %}{{ varargs }}{% endmacro %}{{ m(1, 2) }}").substr(0, 8), "ERR:type");
  EXPECT_EQ(R("{% macro m() %}{{ kwargs }}{% endmacro %}{{ m }}|{% call m() %}{% endcall %}"),
            "<Macro 'm'>|{'caller': <Macro anonymous>}");
}

TEST(Jinja, MacrosTakeACallerOnlyWhenTheyReadIt) {
  EXPECT_EQ(R("{% macro m(x) %}{{ x }}{% endmacro %}{% call m(1) %}c{% endcall %}").substr(0, 8), "ERR:type");
  EXPECT_EQ(R("{% macro m() %}[{{ caller() }}]{% endmacro %}{% call m() %}c{% endcall %}"), "[c]");
  EXPECT_EQ(R("{% macro m() %}{{ caller is defined }}{% endmacro %}{{ m() }}{{ m(caller=1) }}"), "FalseTrue");
  EXPECT_EQ(R("{% macro m() %}{{ caller() }}{% endmacro %}{{ m() }}").substr(0, 13), "ERR:undefined");
  EXPECT_EQ(R("{% macro m(caller) %}{% endmacro %}").substr(0, 12), "PARSE:syntax");  // needs a default
  EXPECT_EQ(R("{% macro m(caller=none) %}{{ caller is none }}{% endmacro %}{{ m() }}{% call m() %}{% endcall %}"),
            "TrueFalse");
}

TEST(Jinja, TruncateFollowsJinja2WithTheDefaultLeewayOfFive) {
  EXPECT_EQ(R("{{ 'foo bar baz qux' | truncate(9) }}|{{ 'foo bar baz qux' | truncate(9, True) }}|"
              "{{ 'foo bar baz qux' | truncate(11) }}|{{ 'foo bar baz qux' | truncate(11, False, '...', 0) }}"),
            "foo...|foo ba...|foo bar baz qux|foo bar...");
  EXPECT_EQ(R("{{ ('x' * 260) | truncate | length }} {{ ('x' * 261) | truncate | length }}"), "260 255");
  EXPECT_EQ(R("{{ 'héllo wörld 日本語' | truncate(10, end='…', leeway=0) }}|"
              "{{ 'abcdefghij' | truncate(3, leeway=0) }}|{{ 'a b c d e f' | truncate(4, end='', leeway=0) }}|"
              "{{ 'ab   cd  ef gh' | truncate(9, leeway=0) }}"),
            "héllo…|...|a b|ab  ...");
  EXPECT_EQ(R("{{ u | truncate(3) }}|{{ [1, 2] | truncate(3) }}"), "|[1, 2]");
  EXPECT_EQ(R("{{ 'abc' | truncate(2) }}").substr(0, 8), "ERR:type");  // length < len(end)
  EXPECT_EQ(R("{{ 'abc' | truncate(5, leeway=-1) }}").substr(0, 8), "ERR:type");
  EXPECT_EQ(R("{{ 5 | truncate(3) }}").substr(0, 8), "ERR:type");
}

TEST(Jinja, StriptagsDropsCommentsAndTagsCollapsesWhitespaceThenUnescapes) {
  EXPECT_EQ(R("{{ '<p>Hello <b>World</b></p>' | striptags }}|{{ 'Main &raquo;\t<em>About</em>' | striptags }}"),
            "Hello World|Main » About");
  EXPECT_EQ(R("{{ 'a <!-- c <b> --> b <!-- x' | striptags }}|{{ 'a<b c' | striptags }}|{{ '<<b>>x' | striptags }}"),
            "a b <!-- x|a<b c|>x");
  EXPECT_EQ(R("{{ '&lt;b&gt;kept&lt;/b&gt; &amp;lt; &#x41;&#66 &ampx &notit; &nbsp;|' | striptags }}"),
            "<b>kept</b> &lt; AB &x \u00acit; \u00a0|");
  EXPECT_EQ(R("{{ '&#0;&#128;&#x110000;&#xD800;&#1;&#65534;|&unknown; &; &#; &lang;' | striptags }}"),
            "\ufffd\u20ac\ufffd\ufffd|&unknown; &; &#; \u27e8");
  EXPECT_EQ(R("{{ '  many \n\n spaces\tand\u3000wide  ' | striptags }}|{{ 5 | striptags }}|{{ u | striptags }}"),
            "many spaces and wide|5|");
}

TEST(Jinja, WithBlockAssignsFromTheEnclosingScopeIntoItsOwn) {
  EXPECT_EQ(R("{% set a = 1 %}{% with a = 2, b = a, (c, d) = [3, 4] %}{{ a }}{{ b }}{{ c }}{{ d }}"
              "{% set e = 5 %}{{ e }}{% endwith %}|{{ a }}{{ b }}{{ e }}"),
            "21345|1");
  EXPECT_EQ(R("{% for i in [1,2,3] %}{% with j = i %}{% if j == 2 %}{% break %}{% endif %}{{ j }}"
              "{% endwith %}{% endfor %}"),
            "1");
  EXPECT_EQ(R("{% with ns.a = 1 %}{% endwith %}").substr(0, 12), "PARSE:syntax");
  EXPECT_EQ(R("{% with a = 1 %}").substr(0, 12), "PARSE:syntax");
}

TEST(Jinja, TestsTakeAFixedNumberOfArgumentsAndLookUpFilterAndTestNames) {
  EXPECT_EQ(R("{{ 1 is none(2) }}").substr(0, 8), "ERR:type");
  EXPECT_EQ(R("{{ 1 is sameas(1, 2) }}").substr(0, 8), "ERR:type");
  EXPECT_EQ(R("{{ 1 is eq(b=1) }}").substr(0, 8), "ERR:type");
  EXPECT_EQ(R("{{ 1 is sameas(other=1) }}{{ 4 is divisibleby(num=2) }}{{ 1 is in(seq=[1]) }}"), "TrueTrueTrue");
  EXPECT_EQ(R("{{ 'upper' is filter }}{{ 'zz' is filter }}{{ 'odd' is test }}{{ '>' is test }}{{ 'x' is test }}"),
            "TrueFalseTrueTrueFalse");
  EXPECT_EQ(R("{{ [1,2,3] | select('>', 1) | list }}{{ [1,2,3] | reject('<=', 2) | list }}"), "[2, 3][3]");
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
