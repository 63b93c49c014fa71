// Tokens to statements (see chat_template_parser.h); the precedence climb follows jinja2's parser.py:
// conditional < or < and < not < comparison < + - < ~ < * / // % < ** < unary - + < postfix . [] () and
// filters / tests.
#include "chat_template_parser.h"

#include "chat_template_filters.h"
#include "moe/core/check.h"

#include <charconv>
#include <cstdlib>
#include <initializer_list>

namespace moe::chat {
namespace {

// NOTE: nesting (brackets, unary operators, blocks in blocks) is bounded so that no template can overflow
// the stack of the parser or of the evaluator, which recurse as deep; real templates nest a few levels.
constexpr int kMaxNesting = 100;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body run() {
    Body body = parse_body({});
    MOE_CHECK(at().kind == Token::Kind::eof, "line {}: unexpected '{}'", at().line, at().text);
    return body;
  }

 private:
  const Token& at(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(i_++, t_.size() - 1)]; }
  bool is_op(const char* op, size_t ahead = 0) const {
    return at(ahead).kind == Token::Kind::op && at(ahead).text == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    return at(ahead).kind == Token::Kind::name && at(ahead).text == name;
  }
  void expect_op(const char* op) {
    MOE_CHECK(is_op(op), "line {}: expected '{}', found '{}'", at().line, op, describe(at()));
    ++i_;
  }
  std::string expect_name() {
    MOE_CHECK(at().kind == Token::Kind::name, "line {}: expected a name, found '{}'", at().line, describe(at()));
    return next().text;
  }
  void expect_block_end() {
    MOE_CHECK(at().kind == Token::Kind::block_end, "line {}: expected the end of the tag (%}}), found '{}'",
              at().line, describe(at()));
    ++i_;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::eof: return "end of template";
      case Token::Kind::block_end: return "%}";
      case Token::Kind::variable_end: return "}}";
      case Token::Kind::block_begin: return "{%";
      case Token::Kind::variable_begin: return "{{";
      default: return t.text;
    }
  }

  // Statements until a block tag named in `ends` (left unconsumed after its {%) or the end of the tokens.
  // Counts one level of nesting for its lifetime.
  struct Nest {
    explicit Nest(Parser& p) : parser(p) {
      MOE_CHECK(++parser.nesting_ <= kMaxNesting, "line {}: the template nests deeper than {} levels",
                parser.at().line, kMaxNesting);
    }
    ~Nest() { --parser.nesting_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
    Parser& parser;
  };

  Body parse_body(std::initializer_list<const char*> ends) {
    const Nest nest(*this);
    Body body;
    for (;;) {
      const Token& tok = at();
      if (tok.kind == Token::Kind::eof) {
        MOE_CHECK(ends.size() == 0, "line {}: unclosed block: expected {{% {} %}} before the end of the template",
                  tok.line, *ends.begin());
        return body;
      }
      if (tok.kind == Token::Kind::data) {
        body.push_back(std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::text, .line = tok.line, .text = tok.text}));
        ++i_;
      } else if (tok.kind == Token::Kind::variable_begin) {
        ++i_;
        auto s = std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::print, .line = tok.line});
        s->expr = parse_tuple(true);
        MOE_CHECK(at().kind == Token::Kind::variable_end, "line {}: expected '}}}}', found '{}'", at().line,
                  describe(at()));
        ++i_;
        body.push_back(std::move(s));
      } else if (tok.kind == Token::Kind::block_begin) {
        for (const char* end : ends)
          if (is_name(end, 1)) return body;
        const std::string& tag = at(1).text;
        if (at(1).kind == Token::Kind::name && (tag.rfind("end", 0) == 0 || tag == "else" || tag == "elif")) {
          std::string expected;
          for (const char* end : ends) expected += std::string(expected.empty() ? "" : " or ") + "{% " + end + " %}";
          MOE_FAIL("line {}: unexpected {{% {} %}} ({})", at(1).line, tag,
                   expected.empty() ? "no block is open" : "expected " + expected);
        }
        ++i_;
        body.push_back(parse_statement());
      } else {
        MOE_FAIL("line {}: unexpected '{}'", tok.line, describe(tok));
      }
    }
  }

  // After `{% name`: consumes the closing {% end... %} too.
  void end_block(const char* end) {
    MOE_CHECK(at().kind == Token::Kind::block_begin && is_name(end, 1), "line {}: expected {{% {} %}}", at().line,
              end);
    i_ += 2;
    expect_block_end();
  }

  std::unique_ptr<Stmt> parse_statement() {
    const Token& tok = at();
    MOE_CHECK(tok.kind == Token::Kind::name, "line {}: expected a tag name after {{%", tok.line);
    const std::string tag = tok.text;
    const int line = tok.line;
    ++i_;
    if (tag == "if") return parse_if(line);
    if (tag == "for") return parse_for(line);
    if (tag == "set") return parse_set(line);
    if (tag == "macro") return parse_macro(line);
    if (tag == "call") return parse_call_block(line);
    if (tag == "filter") return parse_filter_block(line);
    if (tag == "with") return parse_with(line);
    if (tag == "generation") {
      expect_block_end();
      auto s = std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::scoped, .line = line});
      s->bodies.push_back(parse_body({"endgeneration"}));
      end_block("endgeneration");
      return s;
    }
    if (tag == "break" || tag == "continue") {
      MOE_CHECK(loop_depth_ > 0, "line {}: '{}' outside of a for loop", line, tag);
      expect_block_end();
      return std::make_unique<Stmt>(
          Stmt{.kind = tag == "break" ? Stmt::Kind::loop_break : Stmt::Kind::loop_continue, .line = line});
    }
    MOE_FAIL("line {}: unknown or unsupported tag '{}'", line, tag);
  }

  std::unique_ptr<Stmt> parse_if(int line) {
    auto s = std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::if_chain, .line = line});
    for (;;) {
      s->conditions.push_back(parse_tuple(true));
      expect_block_end();
      s->bodies.push_back(parse_body({"elif", "else", "endif"}));
      const std::string which = at(1).text;
      i_ += 2;
      if (which == "elif") continue;
      if (which == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"});
        end_block("endif");
      } else {
        expect_block_end();
      }
      return s;
    }
  }

  Target parse_target(bool allow_attribute) {
    Target target;
    const bool parenthesised = is_op("(");
    if (parenthesised) ++i_;
    target.names.push_back(expect_name());
    if (allow_attribute && is_op(".")) {
      ++i_;
      target.attribute = expect_name();
      return target;
    }
    while (is_op(",")) {
      ++i_;
      if (at().kind != Token::Kind::name) break;
      target.names.push_back(expect_name());
    }
    if (parenthesised) expect_op(")");
    return target;
  }

  std::unique_ptr<Stmt> parse_for(int line) {
    auto s = std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::for_loop, .line = line});
    s->target = parse_target(false);
    MOE_CHECK(is_name("in"), "line {}: expected 'in' in the for tag", at().line);
    ++i_;
    s->expr = parse_tuple(false);
    if (is_name("if")) {
      ++i_;
      s->condition = parse_expression(true);
    }
    MOE_CHECK(!is_name("recursive"), "line {}: recursive for loops are not supported", at().line);
    expect_block_end();
    ++loop_depth_;
    s->bodies.push_back(parse_body({"else", "endfor"}));
    --loop_depth_;
    if (is_name("else", 1)) {
      i_ += 2;
      expect_block_end();
      s->else_body = parse_body({"endfor"});
    }
    end_block("endfor");
    return s;
  }

  std::unique_ptr<Stmt> parse_set(int line) {
    Target target = parse_target(true);
    if (is_op("=")) {
      ++i_;
      auto s = std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::set, .line = line, .target = std::move(target)});
      s->expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    MOE_CHECK(target.attribute.empty() && target.names.size() == 1,
              "line {}: expected '=' after the target of a set tag", line);
    auto s = std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::set_block, .line = line, .target = std::move(target)});
    if (is_op("|")) s->expr = parse_filters(nullptr);
    expect_block_end();
    s->bodies.push_back(parse_body({"endset"}));
    end_block("endset");
    return s;
  }

  void parse_signature(MacroDef& m) {
    expect_op("(");
    while (!is_op(")")) {
      if (!m.params.empty()) expect_op(",");
      if (is_op(")")) break;
      m.params.push_back(expect_name());
      if (is_op("=")) {
        ++i_;
        m.defaults.push_back(parse_expression(true));
      } else {
        MOE_CHECK(m.defaults.empty(), "line {}: a parameter without a default follows one with a default",
                  at().line);
      }
    }
    ++i_;
  }

  std::unique_ptr<Stmt> parse_macro(int line) {
    auto s = std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::macro, .line = line});
    s->macro = std::make_unique<MacroDef>();
    s->macro->name = expect_name();
    parse_signature(*s->macro);
    expect_block_end();
    s->macro->body = parse_body({"endmacro"});
    end_block("endmacro");
    return s;
  }

  std::unique_ptr<Stmt> parse_call_block(int line) {
    auto s = std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::call_block, .line = line});
    s->macro = std::make_unique<MacroDef>();
    s->macro->name = "caller";
    if (is_op("(")) parse_signature(*s->macro);
    s->expr = parse_expression(true);
    MOE_CHECK(s->expr->kind == Expr::Kind::call, "line {}: expected a call in the call tag", line);
    expect_block_end();
    s->macro->body = parse_body({"endcall"});
    end_block("endcall");
    return s;
  }

  std::unique_ptr<Stmt> parse_filter_block(int line) {
    auto s = std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::filter_block, .line = line});
    s->expr = parse_filters(nullptr, /*first_bar=*/false);
    expect_block_end();
    s->bodies.push_back(parse_body({"endfilter"}));
    end_block("endfilter");
    return s;
  }

  std::unique_ptr<Stmt> parse_with(int line) {
    auto s = std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::with_block, .line = line});
    while (at().kind != Token::Kind::block_end) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(parse_target(false));
      expect_op("=");
      s->exprs.push_back(parse_expression(true));
    }
    expect_block_end();
    s->bodies.push_back(parse_body({"endwith"}));
    end_block("endwith");
    return s;
  }

  // ---- expressions ----

  ExprPtr make(Expr::Kind kind, int line) { return std::make_unique<Expr>(Expr{.kind = kind, .line = line}); }

  bool at_tuple_end() const {
    const Token& tok = at();
    return tok.kind == Token::Kind::block_end || tok.kind == Token::Kind::variable_end ||
           tok.kind == Token::Kind::eof || is_op(")") || (tok.kind == Token::Kind::name &&
           (tok.text == "if" || tok.text == "recursive"));
  }

  ExprPtr parse_tuple(bool with_conditional) {
    const int line = at().line;
    ExprPtr first = parse_expression(with_conditional);
    if (!is_op(",")) return first;
    auto tuple = make(Expr::Kind::tuple, line);
    tuple->items.push_back(std::move(first));
    while (is_op(",")) {
      ++i_;
      if (at_tuple_end()) break;
      tuple->items.push_back(parse_expression(with_conditional));
    }
    return tuple;
  }

  ExprPtr parse_expression(bool with_conditional) {
    if (!with_conditional) return parse_or();
    const int line = at().line;
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      ++i_;
      auto cond = make(Expr::Kind::conditional, line);
      cond->items.push_back(parse_or());
      cond->items.push_back(std::move(expr));
      if (is_name("else")) {
        ++i_;
        cond->items.push_back(parse_expression(true));
      } else {
        cond->items.push_back(nullptr);
      }
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const int line = next().line;
      auto node = make(Expr::Kind::logical_or, line);
      node->items.push_back(std::move(left));
      node->items.push_back(parse_and());
      left = std::move(node);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const int line = next().line;
      auto node = make(Expr::Kind::logical_and, line);
      node->items.push_back(std::move(left));
      node->items.push_back(parse_not());
      left = std::move(node);
    }
    return left;
  }

  ExprPtr parse_not() {
    const Nest nest(*this);
    if (is_name("not")) {
      const int line = next().line;
      auto node = make(Expr::Kind::logical_not, line);
      node->items.push_back(parse_not());
      return node;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = at().line;
    ExprPtr first = parse_math1();
    ExprPtr node;
    for (;;) {
      std::string op;
      if (at().kind == Token::Kind::op &&
          (at().text == "==" || at().text == "!=" || at().text == "<" || at().text == "<=" || at().text == ">" ||
           at().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        ++i_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        i_ += 2;
        op = "notin";
      } else {
        break;
      }
      if (!node) {
        node = make(Expr::Kind::compare, line);
        node->items.push_back(std::move(first));
      }
      node->ops.push_back(op);
      node->items.push_back(parse_math1());
    }
    return node ? std::move(node) : std::move(first);
  }

  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr right, int line) {
    auto node = make(Expr::Kind::binary, line);
    node->name = op;
    node->items.push_back(std::move(left));
    node->items.push_back(std::move(right));
    return node;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& op = next();
      left = binary(op.text, std::move(left), parse_concat(), op.line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const int line = next().line;
      left = binary("~", std::move(left), parse_math2(), line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& op = next();
      left = binary(op.text, std::move(left), parse_pow(), op.line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const int line = next().line;
      left = binary("**", std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    const Nest nest(*this);
    const int line = at().line;
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const bool minus = next().text == "-";
      node = make(minus ? Expr::Kind::negate : Expr::Kind::plus, line);
      node->items.push_back(parse_unary(false));
    } else {
      node = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filter_expr(std::move(node)) : std::move(node);
  }

  ExprPtr parse_primary() {
    const Token& tok = at();
    switch (tok.kind) {
      case Token::Kind::name: {
        ++i_;
        auto node = make(Expr::Kind::literal, tok.line);
        if (tok.text == "true" || tok.text == "True") {
          node->value = true;
        } else if (tok.text == "false" || tok.text == "False") {
          node->value = false;
        } else if (tok.text == "none" || tok.text == "None") {
          node->value = nullptr;
        } else {
          node->kind = Expr::Kind::name;
          node->name = tok.text;
        }
        return node;
      }
      case Token::Kind::string: {
        auto node = make(Expr::Kind::literal, tok.line);
        std::string s;
        while (at().kind == Token::Kind::string) s += next().text;
        node->value = s;
        return node;
      }
      case Token::Kind::integer: {
        ++i_;
        auto node = make(Expr::Kind::literal, tok.line);
        int64_t v = 0;
        const auto res = std::from_chars(tok.text.data(), tok.text.data() + tok.text.size(), v);
        MOE_CHECK(res.ec == std::errc(), "line {}: integer literal {} is out of range", tok.line, tok.text);
        node->value = v;
        return node;
      }
      case Token::Kind::floating: {
        ++i_;
        auto node = make(Expr::Kind::literal, tok.line);
        // strtod, not stod: an out-of-range literal is inf or 0, as Python's float() makes it, not an exception.
        node->value = std::strtod(tok.text.c_str(), nullptr);
        return node;
      }
      default: break;
    }
    if (is_op("(")) {
      ++i_;
      if (is_op(")")) {
        ++i_;
        return make(Expr::Kind::tuple, tok.line);
      }
      ExprPtr first = parse_expression(true);
      if (is_op(")")) {
        ++i_;
        return first;
      }
      auto tuple = make(Expr::Kind::tuple, tok.line);
      tuple->items.push_back(std::move(first));
      while (is_op(",")) {
        ++i_;
        if (is_op(")")) break;
        tuple->items.push_back(parse_expression(true));
      }
      expect_op(")");
      return tuple;
    }
    if (is_op("[")) {
      ++i_;
      auto list = make(Expr::Kind::list, tok.line);
      while (!is_op("]")) {
        if (!list->items.empty()) expect_op(",");
        if (is_op("]")) break;
        list->items.push_back(parse_expression(true));
      }
      ++i_;
      return list;
    }
    if (is_op("{")) {
      ++i_;
      auto dict = make(Expr::Kind::dict, tok.line);
      while (!is_op("}")) {
        if (!dict->items.empty()) expect_op(",");
        if (is_op("}")) break;
        dict->items.push_back(parse_expression(true));
        expect_op(":");
        dict->items.push_back(parse_expression(true));
      }
      ++i_;
      return dict;
    }
    MOE_FAIL("line {}: unexpected '{}' in an expression", tok.line, describe(tok));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    for (;;) {
      if (is_op(".")) {
        const int line = next().line;
        auto attr = make(Expr::Kind::attribute, line);
        if (at().kind == Token::Kind::integer) {
          attr->kind = Expr::Kind::item;
          attr->items.push_back(std::move(node));
          auto index = make(Expr::Kind::literal, line);
          const Token& digits = next();
          int64_t i = 0;
          const auto res = std::from_chars(digits.text.data(), digits.text.data() + digits.text.size(), i);
          MOE_CHECK(res.ec == std::errc(), "line {}: index {} is out of range", digits.line, digits.text);
          index->value = i;
          attr->items.push_back(std::move(index));
        } else {
          attr->name = expect_name();
          attr->items.push_back(std::move(node));
        }
        node = std::move(attr);
      } else if (is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const int line = next().line;
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!is_op("]")) {
      if (is_op(":")) {
        ++i_;
        is_slice = true;
        ++part;
        MOE_CHECK(part < 3, "line {}: too many ':' in a slice", line);
        continue;
      }
      MOE_CHECK(!parts[part], "line {}: expected ']' or ':' in a subscript", at().line);
      parts[part] = parse_expression(true);
    }
    ++i_;
    if (!is_slice) {
      MOE_CHECK(parts[0] != nullptr, "line {}: empty subscript", line);
      auto item = make(Expr::Kind::item, line);
      item->items.push_back(std::move(node));
      item->items.push_back(std::move(parts[0]));
      return item;
    }
    auto slice = make(Expr::Kind::slice, line);
    slice->items.push_back(std::move(node));
    for (auto& p : parts) slice->items.push_back(std::move(p));
    return slice;
  }

  // Arguments after '(' into `node` (items from index 1, keyword).
  void parse_args(Expr& node) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      MOE_CHECK(!is_op("*") && !is_op("**"), "line {}: *args and **kwargs in calls are not supported", at().line);
      if (at().kind == Token::Kind::name && is_op("=", 1)) {
        std::string key = next().text;
        ++i_;
        node.keyword.emplace_back(std::move(key), parse_expression(true));
      } else {
        MOE_CHECK(node.keyword.empty(), "line {}: a positional argument follows a keyword argument", at().line);
        node.items.push_back(parse_expression(true));
      }
    }
    ++i_;
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto call = make(Expr::Kind::call, at().line);
    call->items.push_back(std::move(callee));
    parse_args(*call);
    return call;
  }

  // `| name(args) | name ...` applied to `input` (null in filter blocks and block sets).
  ExprPtr parse_filters(ExprPtr input, bool first_bar = true) {
    bool need_bar = first_bar;
    do {
      if (need_bar) expect_op("|");
      need_bar = true;
      const int line = at().line;
      std::string name = expect_name();
      while (is_op(".")) {
        ++i_;
        name += '.';
        name += expect_name();
      }
      auto filter = make(Expr::Kind::filter, line);
      filter->known = has_filter(name);
      filter->name = name;
      filter->items.push_back(std::move(input));
      if (is_op("(")) parse_args(*filter);
      input = std::move(filter);
    } while (is_op("|"));
    return input;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    for (;;) {
      if (is_op("|")) {
        node = parse_filters(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_test(ExprPtr node) {
    const int line = next().line;
    auto test = make(Expr::Kind::test, line);
    if (is_name("not")) {
      ++i_;
      test->negated = true;
    }
    test->name = expect_name();
    while (is_op(".")) {
      ++i_;
      test->name += '.';
      test->name += expect_name();
    }
    test->known = has_test(test->name);
    test->items.push_back(std::move(node));
    const Token& tok = at();
    const bool arg_follows =
        (tok.kind == Token::Kind::name || tok.kind == Token::Kind::string || tok.kind == Token::Kind::integer ||
         tok.kind == Token::Kind::floating || is_op("(") || is_op("[") || is_op("{")) &&
        !(is_name("else") || is_name("or") || is_name("and"));
    if (arg_follows) {
      MOE_CHECK(!is_name("is"), "line {}: tests cannot be chained with 'is'", tok.line);
      if (is_op("(")) {
        parse_args(*test);
      } else {
        test->items.push_back(parse_postfix(parse_primary()));
      }
    }
    return test;
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;
};

// An unknown filter or test is an error as the template loads, except where jinja2 defers it to when it
// runs: in the test and the branches of an if, and in a conditional expression ("soft" frames; the body
// of a for, macro, call, filter or set block opens a frame that is not soft again).
void check_names(const Expr* e, bool soft) {
  if (!e) return;
  const bool in_conditional = soft || e->kind == Expr::Kind::conditional;
  if ((e->kind == Expr::Kind::filter || e->kind == Expr::Kind::test) && !e->known && !in_conditional)
    MOE_FAIL("line {}: no {} named '{}'", e->line, e->kind == Expr::Kind::filter ? "filter" : "test", e->name);
  for (const auto& item : e->items) check_names(item.get(), in_conditional);
  for (const auto& [_, value] : e->keyword) check_names(value.get(), in_conditional);
}

void check_names(const Body& body, bool soft) {
  for (const auto& s : body) {
    check_names(s->expr.get(), soft);
    for (const auto& e : s->exprs) check_names(e.get(), soft);
    switch (s->kind) {
      case Stmt::Kind::if_chain:
        for (const auto& c : s->conditions) check_names(c.get(), true);
        for (const auto& b : s->bodies) check_names(b, true);
        check_names(s->else_body, true);
        break;
      case Stmt::Kind::scoped:
        check_names(s->bodies[0], soft);
        break;
      case Stmt::Kind::for_loop:
        check_names(s->condition.get(), false);
        check_names(s->bodies[0], false);
        check_names(s->else_body, false);
        break;
      case Stmt::Kind::macro:
      case Stmt::Kind::call_block:
        for (const auto& d : s->macro->defaults) check_names(d.get(), false);
        check_names(s->macro->body, false);
        break;
      default:
        for (const auto& b : s->bodies) check_names(b, false);
    }
  }
}

}  // namespace

Body parse(const std::vector<Token>& tokens) {
  Body body = Parser(tokens).run();
  check_names(body, false);
  return body;
}

}  // namespace moe::chat
