#pragma once
// The parsed form of a chat template: expressions and statements as jinja2's parser builds them, for the
// subset the evaluator runs (chat_template_parser.h lists it).

#include "chat_template_value.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace moe::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,    // value
    name,       // name
    list,       // items
    tuple,      // items
    dict,       // items: key, value, key, value ...
    attribute,  // items[0].name
    item,       // items[0][items[1]]
    slice,      // items[0][items[1]:items[2]:items[3]] (null where omitted)
    call,       // items[0](items[1..], keyword)
    filter,     // items[0] | name(items[1..], keyword)
    test,       // items[0] is [not] name(items[1..], keyword)
    negate,     // -items[0]
    plus,       // +items[0]
    logical_not,
    binary,     // items[0] op items[1]: + - * / // % ** ~
    logical_and,
    logical_or,
    compare,    // items[0] ops[0] items[1] ops[1] items[2] ...: == != < <= > >= in notin
    conditional,  // items[1] if items[0] else items[2] (null: undefined)
  };
  Kind kind;
  int line = 0;
  Json value{};
  std::string name{};
  bool negated = false;
  bool known = true;  // filter / test: its name exists (jinja2 allows an unknown one in an if, until it runs)
  std::vector<std::string> ops{};
  std::vector<ExprPtr> items{};
  std::vector<std::pair<std::string, ExprPtr>> keyword{};
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

// An assignment target: names (several: tuple unpacking) or one namespace attribute (ns.attr).
struct Target {
  std::vector<std::string> names;
  std::string attribute;  // non-empty: names[0].attribute
};

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
};

struct Stmt {
  enum class Kind {
    text,       // text
    print,      // {{ expr }}
    if_chain,   // conditions[i] -> bodies[i]; else_body
    for_loop,   // for target in expr [if condition]: bodies[0]; else_body
    set,        // target = expr
    set_block,  // {% set target %}bodies[0]{% endset %} (| filters in expr, input null)
    macro,      // macro
    call_block, // {% call(macro->params) expr %}macro->body{% endcall %}
    filter_block,  // {% filter expr %}bodies[0]{% endfilter %}: expr is a filter chain whose input is null
    with_block,    // targets[i] = exprs[i]; bodies[0]
    scoped,     // bodies[0] run as is ({% generation %})
    loop_break,
    loop_continue,
  };
  Kind kind;
  int line = 0;
  std::string text{};
  ExprPtr expr{};
  ExprPtr condition{};
  Target target{};
  std::vector<ExprPtr> conditions{};
  std::vector<Body> bodies{};
  Body else_body{};
  std::vector<Target> targets{};
  std::vector<ExprPtr> exprs{};
  std::unique_ptr<MacroDef> macro{};
};

}  // namespace moe::chat
