// The chat template evaluator (see chat_template_eval.h).
#include "chat_template_eval.h"

#include "chat_template_filters.h"
#include "chat_template_methods.h"
#include "moe/core/check.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <unordered_map>

namespace moe::chat {
namespace {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars{};
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { normal, loop_break, loop_continue };

// NOTE: deep recursion (a macro calling itself) is bounded so that a template cannot overflow the stack,
// and a render's loop iterations and output so that no template runs for ever or fills the memory (jinja2
// bounds neither; a real template stays far below both).
constexpr int kMaxDepth = 200;
constexpr int64_t kMaxSteps = 1'000'000;
constexpr size_t kMaxOutput = size_t{64} << 20;

int64_t int_of(const Json& j) { return j.is_boolean() ? int64_t{j.get<bool>()} : j.get<int64_t>(); }

void require_defined(const Value& v) { MOE_CHECK(!v.is_undefined(), "'{}' is undefined", v.name); }

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  auto unsupported = [&]() -> Value {
    MOE_FAIL("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
  };
  if (!a.is_data() || !b.is_data()) return unsupported();
  const Json &x = a.data, &y = b.data;
  if (op == "+") {
    if (x.is_string() && y.is_string()) return Value::of(x.get<std::string>() + y.get<std::string>());
    if (x.is_array() && y.is_array()) {
      Json out = x;
      for (const Json& item : y) out.push_back(item);
      return Value::of(out);
    }
  }
  if (op == "*") {
    const bool repeat_x = (x.is_string() || x.is_array()) && (y.is_number_integer() || y.is_boolean());
    const bool repeat_y = (y.is_string() || y.is_array()) && (x.is_number_integer() || x.is_boolean());
    if (repeat_x || repeat_y) {
      const Json& seq = repeat_x ? x : y;
      const int64_t n = int_of(repeat_x ? y : x);
      MOE_CHECK(n * static_cast<int64_t>(seq.size()) <= 10'000'000, "the result of '*' is too long");
      if (seq.is_string()) {
        const std::string& unit = seq.get_ref<const std::string&>();
        std::string out;
        out.reserve(unit.size() * static_cast<size_t>(std::max<int64_t>(n, 0)));
        for (int64_t i = 0; i < n; ++i) out += unit;
        return Value::of(std::move(out));
      }
      Json out = Json::array();
      for (int64_t i = 0; i < n; ++i)
        for (const Json& item : seq) out.push_back(item);
      return Value::of(std::move(out));
    }
  }
  if (!is_number(x) || !is_number(y)) return unsupported();
  const bool floating = x.is_number_float() || y.is_number_float();
  if (op == "/") {
    MOE_CHECK(as_double(y) != 0.0, "division by zero");
    return Value::of(as_double(x) / as_double(y));
  }
  if (floating) {
    const double p = as_double(x), q = as_double(y);
    if (op == "+") return Value::of(p + q);
    if (op == "-") return Value::of(p - q);
    if (op == "*") return Value::of(p * q);
    if (op == "**") return Value::of(std::pow(p, q));
    MOE_CHECK(q != 0.0, "float division by zero");
    if (op == "//") return Value::of(std::floor(p / q));
    double r = std::fmod(p, q);
    if (r != 0.0 && ((r < 0) != (q < 0))) r += q;
    return Value::of(r);
  }
  const int64_t p = int_of(x), q = int_of(y);
  if (op == "+") return Value::of(p + q);
  if (op == "-") return Value::of(p - q);
  if (op == "*") return Value::of(p * q);
  if (op == "**") {
    if (q < 0) return Value::of(std::pow(static_cast<double>(p), static_cast<double>(q)));
    MOE_CHECK(q <= 64, "the exponent {} is too large", q);
    int64_t r = 1;
    for (int64_t i = 0; i < q; ++i) r *= p;
    return Value::of(r);
  }
  MOE_CHECK(q != 0, "integer division or modulo by zero");
  int64_t quotient = p / q, rest = p % q;
  if (rest != 0 && ((rest < 0) != (q < 0))) {
    --quotient;
    rest += q;
  }
  return Value::of(op == "//" ? quotient : rest);
}

bool contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;
  if (container.is_string()) {
    MOE_CHECK(item.is_string(), "'in <string>' requires a string as left operand, not {}", type_name(item));
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.kind == Value::Kind::ns) return item.is_string() && container.attributes->contains(item.str());
  for (const Json& element : iterate(container))
    if (equal(item, Value::of(element))) return true;
  return false;
}

class Renderer {
 public:
  explicit Renderer(std::string& out) : out_(&out) {}

  Flow exec(const Body& body, const ScopePtr& scope) {
    for (const auto& stmt : body) {
      const Flow flow = exec_one(*stmt, scope);
      if (flow != Flow::normal) return flow;
    }
    return Flow::normal;
  }

 private:
  void step() { MOE_CHECK(++steps_ <= kMaxSteps, "the template ran more than {} loop iterations", kMaxSteps); }

  void emit(const std::string& text) {
    MOE_CHECK(out_->size() + text.size() <= kMaxOutput, "the template's output passed {} MiB", kMaxOutput >> 20);
    *out_ += text;
  }


  Flow exec_one(const Stmt& s, const ScopePtr& scope) {
    try {
      return exec_stmt(s, scope);
    } catch (const moe::Error& e) {
      throw LineError{s.line, e.what()};
    }
  }

  Flow exec_stmt(const Stmt& s, const ScopePtr& scope) {
    switch (s.kind) {
      case Stmt::Kind::text: emit(s.text); return Flow::normal;
      case Stmt::Kind::print: emit(to_text(eval(*s.expr, scope))); return Flow::normal;
      case Stmt::Kind::if_chain:
        for (size_t i = 0; i < s.conditions.size(); ++i)
          if (truthy(eval(*s.conditions[i], scope))) return exec(s.bodies[i], scope);
        return exec(s.else_body, scope);
      case Stmt::Kind::for_loop: return exec_for(s, scope);
      case Stmt::Kind::set: assign(s.target, eval(*s.expr, scope), scope); return Flow::normal;
      case Stmt::Kind::set_block: {
        Value v = Value::of(capture(s.bodies[0], scope));
        if (s.expr) v = eval_filters(*s.expr, v, scope);
        assign(s.target, v, scope);
        return Flow::normal;
      }
      case Stmt::Kind::macro: scope->vars[s.macro->name] = macro_value(*s.macro, scope); return Flow::normal;
      case Stmt::Kind::call_block: {
        CallArgs extra;
        extra.keyword.emplace_back("caller", macro_value(*s.macro, scope));
        emit(to_text(eval_call(*s.expr, scope, &extra)));
        return Flow::normal;
      }
      case Stmt::Kind::filter_block:
        emit(to_text(eval_filters(*s.expr, Value::of(capture(s.bodies[0], scope)), scope)));
        return Flow::normal;
      case Stmt::Kind::with_block: {
        auto inner = std::make_shared<Scope>(Scope{.parent = scope});
        for (size_t i = 0; i < s.targets.size(); ++i) assign(s.targets[i], eval(*s.exprs[i], scope), inner);
        return exec(s.bodies[0], inner);
      }
      case Stmt::Kind::scoped: return exec(s.bodies[0], scope);
      case Stmt::Kind::loop_break: return Flow::loop_break;
      case Stmt::Kind::loop_continue: return Flow::loop_continue;
    }
    return Flow::normal;
  }

  std::string capture(const Body& body, const ScopePtr& scope) {
    std::string buffer;
    std::string* saved = out_;
    out_ = &buffer;
    try {
      exec(body, scope);
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return buffer;
  }

  void assign(const Target& target, Value v, const ScopePtr& scope) {
    if (!target.attribute.empty()) {
      const Value ns = lookup(target.names[0], scope);
      MOE_CHECK(ns.kind == Value::Kind::ns, "cannot assign attribute '{}' on '{}': it is a {}, not a namespace()",
                target.attribute, target.names[0], type_name(ns));
      MOE_CHECK(v.is_data(), "a namespace attribute holds data, not a {}", type_name(v));
      (*ns.attributes)[target.attribute] = v.data;
      return;
    }
    if (target.names.size() == 1) {
      scope->vars[target.names[0]] = std::move(v);
      return;
    }
    MOE_CHECK(v.is_data() && v.data.is_array() && v.data.size() == target.names.size(),
              "cannot unpack a {} into {} names", type_name(v), target.names.size());
    for (size_t i = 0; i < target.names.size(); ++i) scope->vars[target.names[i]] = Value::of(v.data[i]);
  }

  Flow exec_for(const Stmt& s, const ScopePtr& scope) {
    std::vector<Json> all = iterate(eval(*s.expr, scope));
    auto items = std::make_shared<std::vector<Json>>();
    if (s.condition) {
      for (Json& item : all) {
        step();
        auto probe = std::make_shared<Scope>(Scope{.parent = scope});
        assign(s.target, Value::of(item), probe);
        if (truthy(eval(*s.condition, probe))) items->push_back(std::move(item));
      }
    } else {
      *items = std::move(all);
    }
    if (items->empty()) return exec(s.else_body, scope);
    for (size_t i = 0; i < items->size(); ++i) {
      step();
      auto inner = std::make_shared<Scope>(Scope{.parent = scope});
      assign(s.target, Value::of((*items)[i]), inner);
      inner->vars["loop"] = Value{.kind = Value::Kind::loop,
                                  .loop = std::make_shared<const LoopState>(
                                      LoopState{.items = items, .index0 = static_cast<int64_t>(i)})};
      if (exec(s.bodies[0], inner) == Flow::loop_break) break;
    }
    return Flow::normal;
  }

  Value lookup(const std::string& name, const ScopePtr& scope) const {
    for (const Scope* s = scope.get(); s; s = s->parent.get()) {
      const auto it = s->vars.find(name);
      if (it != s->vars.end()) return it->second;
    }
    return Value::undefined(name);
  }

  // NOTE: the macro holds its scope weakly (a scope holding the macro strongly would be a cycle); the
  // renderer keeps every defining scope alive until the render ends.
  Value macro_value(const MacroDef& m, const ScopePtr& defined_in) {
    macro_scopes_.push_back(defined_in);
    std::weak_ptr<Scope> weak = defined_in;
    return Value::callable(m.name, [this, &m, weak](CallArgs& args) {
      auto scope = std::make_shared<Scope>(Scope{.parent = weak.lock()});
      for (auto it = args.keyword.begin(); it != args.keyword.end(); ++it) {
        if (it->first == "caller") {
          scope->vars["caller"] = it->second;
          args.keyword.erase(it);
          break;
        }
      }
      const size_t first_default = m.params.size() - m.defaults.size();
      for (size_t i = 0; i < m.params.size(); ++i) {
        Value v = take_arg(args, i, m.params[i].c_str());
        if (v.is_undefined() && i >= first_default) v = eval(*m.defaults[i - first_default], scope);
        scope->vars[m.params[i]] = std::move(v);
      }
      no_more_args(args, "macro '" + m.name + "'");
      step();
      MOE_CHECK(++depth_ <= kMaxDepth, "macro '{}' recursed deeper than {} calls", m.name, kMaxDepth);
      struct Leave {
        int& depth;
        ~Leave() { --depth; }
      } leave{depth_};
      return Value::of(capture(m.body, scope));
    });
  }

  CallArgs eval_args(const Expr& e, size_t first, const ScopePtr& scope) {
    CallArgs args;
    for (size_t i = first; i < e.items.size(); ++i) args.positional.push_back(eval(*e.items[i], scope));
    for (const auto& [k, v] : e.keyword) args.keyword.emplace_back(k, eval(*v, scope));
    return args;
  }

  Value eval_call(const Expr& e, const ScopePtr& scope, CallArgs* extra = nullptr) {
    const Expr& callee = *e.items[0];
    CallArgs args = eval_args(e, 1, scope);
    if (extra)
      for (auto& kw : extra->keyword) args.keyword.push_back(kw);
    Value fn;
    if (callee.kind == Expr::Kind::attribute) {
      const Value obj = eval(*callee.items[0], scope);
      if (auto result = call_method(obj, callee.name, args)) return *result;
      fn = get_attribute(obj, callee.name);
    } else {
      fn = eval(callee, scope);
    }
    require_defined(fn);
    MOE_CHECK(fn.kind == Value::Kind::callable, "'{}' object is not callable", type_name(fn));
    return (*fn.function)(args);
  }

  // A filter chain parsed with a null innermost input, applied to `input`.
  Value eval_filters(const Expr& e, const Value& input, const ScopePtr& scope) {
    MOE_CHECK(e.known, "no filter named '{}'", e.name);
    const Value inner = e.items[0] ? eval_filters(*e.items[0], input, scope) : input;
    CallArgs args = eval_args(e, 1, scope);
    return apply_filter(e.name, inner, args);
  }

  Value eval(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::literal: return Value::of(e.value);
      case Expr::Kind::name: return lookup(e.name, scope);
      case Expr::Kind::list:
      case Expr::Kind::tuple: {
        Json out = Json::array();
        for (const auto& item : e.items) {
          const Value v = eval(*item, scope);
          require_defined(v);
          MOE_CHECK(v.is_data(), "a list holds data, not a {}", type_name(v));
          out.push_back(v.data);
        }
        return Value::of(out);
      }
      case Expr::Kind::dict: {
        Json out = Json::object();
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value k = eval(*e.items[i], scope);
          const Value v = eval(*e.items[i + 1], scope);
          MOE_CHECK(k.is_string(), "dict keys must be strings here, not {}", type_name(k));
          require_defined(v);
          MOE_CHECK(v.is_data(), "a dict holds data, not a {}", type_name(v));
          out[k.str()] = v.data;
        }
        return Value::of(out);
      }
      case Expr::Kind::attribute: return get_attribute(eval(*e.items[0], scope), e.name);
      case Expr::Kind::item: return get_item(eval(*e.items[0], scope), eval(*e.items[1], scope));
      case Expr::Kind::slice: {
        auto part = [&](size_t i) { return e.items[i] ? eval(*e.items[i], scope) : Value::undefined(""); };
        return get_slice(eval(*e.items[0], scope), part(1), part(2), part(3));
      }
      case Expr::Kind::call: return eval_call(e, scope);
      case Expr::Kind::filter: {
        MOE_CHECK(e.known, "no filter named '{}'", e.name);
        const Value input = eval(*e.items[0], scope);
        CallArgs args = eval_args(e, 1, scope);
        return apply_filter(e.name, input, args);
      }
      case Expr::Kind::test: {
        MOE_CHECK(e.known, "no test named '{}'", e.name);
        const Value v = eval(*e.items[0], scope);
        CallArgs args = eval_args(e, 1, scope);
        return Value::of(apply_test(e.name, v, args) != e.negated);
      }
      case Expr::Kind::negate:
      case Expr::Kind::plus: {
        const Value v = eval(*e.items[0], scope);
        require_defined(v);
        MOE_CHECK(v.is_data() && is_number(v.data), "bad operand type for unary {}: '{}'",
                  e.kind == Expr::Kind::negate ? "-" : "+", type_name(v));
        if (e.kind == Expr::Kind::plus) return v.data.is_boolean() ? Value::of(int_of(v.data)) : v;
        return v.data.is_number_float() ? Value::of(-v.data.get<double>()) : Value::of(-int_of(v.data));
      }
      case Expr::Kind::logical_not: return Value::of(!truthy(eval(*e.items[0], scope)));
      case Expr::Kind::binary: {
        const Value a = eval(*e.items[0], scope);
        const Value b = eval(*e.items[1], scope);
        if (e.name == "~") return Value::of(to_text(a) + to_text(b));
        return arithmetic(e.name, a, b);
      }
      case Expr::Kind::logical_and: {
        Value a = eval(*e.items[0], scope);
        return truthy(a) ? eval(*e.items[1], scope) : a;
      }
      case Expr::Kind::logical_or: {
        Value a = eval(*e.items[0], scope);
        return truthy(a) ? a : eval(*e.items[1], scope);
      }
      case Expr::Kind::compare: {
        Value left = eval(*e.items[0], scope);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.items[i + 1], scope);
          const std::string& op = e.ops[i];
          bool ok;
          if (op == "==") {
            ok = equal(left, right);
          } else if (op == "!=") {
            ok = !equal(left, right);
          } else if (op == "in" || op == "notin") {
            ok = contains(right, left) == (op == "in");
          } else {
            require_defined(left);
            require_defined(right);
            const int c = compare(left, right);
            ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          }
          if (!ok) return Value::of(false);
          left = std::move(right);
        }
        return Value::of(true);
      }
      case Expr::Kind::conditional:
        if (truthy(eval(*e.items[0], scope))) return eval(*e.items[1], scope);
        return e.items[2] ? eval(*e.items[2], scope) : Value::undefined("conditional without else");
    }
    MOE_FAIL("unknown expression");
  }

  std::string* out_;
  int depth_ = 0;
  int64_t steps_ = 0;
  std::vector<ScopePtr> macro_scopes_;
};

}  // namespace

std::string render(const Body& body, std::vector<std::pair<std::string, Value>> variables) {
  auto root = std::make_shared<Scope>();
  std::vector<std::pair<std::string, Value>> globals;
  add_globals(globals);
  for (auto& [k, v] : globals) root->vars[k] = std::move(v);
  for (auto& [k, v] : variables) root->vars[k] = std::move(v);
  std::string out;
  Renderer(out).exec(body, root);
  return out;
}

}  // namespace moe::chat
