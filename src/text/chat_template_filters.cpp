// Jinja's filters and tests (see chat_template_filters.h), as jinja2 3.1 defines them; string filters read
// an undefined value as "" as jinja2's soft_str does.
#include "chat_template_filters.h"

#include "chat_template_methods.h"
#include "moe/core/check.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

namespace moe::chat {
namespace {

const std::set<std::string>& filter_names() {
  static const std::set<std::string> names = {
      "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float", "indent",
      "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
      "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson",
      "trim", "unique", "upper"};
  return names;
}

const std::set<std::string>& test_names() {
  static const std::set<std::string> names = {
      "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "escaped", "even", "false",
      "filter", "float", "ge", ">=", "gt", "greaterthan", ">", "in", "integer", "iterable", "le", "<=", "lower",
      "lt", "lessthan", "<", "mapping", "ne", "!=", "none", "number", "odd", "sameas", "sequence", "string",
      "test", "true", "undefined", "upper"};
  return names;
}

std::string soft_str(const Value& v) { return to_text(v); }

int64_t int_of_json(const Json& j) { return j.is_boolean() ? int64_t{j.get<bool>()} : j.get<int64_t>(); }

bool flag(const Value& v, bool fallback) { return v.is_undefined() ? fallback : truthy(v); }

int64_t integer_arg(const Value& v, int64_t fallback, const char* what) {
  if (v.is_undefined()) return fallback;
  MOE_CHECK(v.is_data() && (v.data.is_number_integer() || v.data.is_boolean()), "{} must be an integer, not {}",
            what, type_name(v));
  return v.data.is_boolean() ? v.data.get<bool>() : v.data.get<int64_t>();
}

std::string lower_ascii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// An item's attribute for sort / map / selectattr; a dotted name walks nested dicts, a number indexes.
Value item_attribute(const Json& item, const std::string& attribute) {
  Value v = Value::of(item);
  size_t start = 0;
  for (;;) {
    const size_t dot = attribute.find('.', start);
    const std::string part = attribute.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    int64_t index = 0;
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit) &&
                         std::from_chars(part.data(), part.data() + part.size(), index).ec == std::errc();
    v = numeric ? get_item(v, Value::of(index)) : get_item(v, Value::of(part));
    if (dot == std::string::npos || v.is_undefined()) return v;
    start = dot + 1;
  }
}

// The key jinja2 sorts and compares by: the attribute if given, strings lower-cased unless case_sensitive.
Value sort_key(const Json& item, const Value& attribute, bool case_sensitive) {
  Value v = attribute.is_undefined() || attribute.is_none() ? Value::of(item) : item_attribute(item, soft_str(attribute));
  if (!case_sensitive && v.is_string()) v = Value::of(lower_ascii(v.str()));
  return v;
}

std::vector<Json> sorted(std::vector<Json> items, const Value& attribute, bool case_sensitive, bool reverse) {
  std::stable_sort(items.begin(), items.end(), [&](const Json& a, const Json& b) {
    const int c = compare(sort_key(a, attribute, case_sensitive), sort_key(b, attribute, case_sensitive));
    return reverse ? c > 0 : c < 0;
  });
  return items;
}

Json to_array(std::vector<Json> items) {
  Json out = Json::array();
  for (Json& j : items) out.push_back(std::move(j));
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t c : decode_utf8(s)) {
    switch (c) {
      case U'"': out += "\\\""; break;
      case U'\\': out += "\\\\"; break;
      case U'\n': out += "\\n"; break;
      case U'\r': out += "\\r"; break;
      case U'\t': out += "\\t"; break;
      case U'\b': out += "\\b"; break;
      case U'\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7e)) {
          if (c > 0xffff) {
            const char32_t v = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
          }
        } else {
          append_utf8(out, c);
        }
    }
  }
  out += '"';
}

struct JsonStyle {
  bool ensure_ascii;
  int indent;  // < 0: none
  std::string indent_text;
  std::string item_separator;
  std::string key_separator;
  bool sort_keys;
};

void dump(std::string& out, const Json& j, const JsonStyle& style, int level) {
  if (j.is_string()) {
    json_string(out, j.get_ref<const std::string&>(), style.ensure_ascii);
    return;
  }
  if (j.is_null()) {
    out += "null";
    return;
  }
  if (j.is_boolean()) {
    out += j.get<bool>() ? "true" : "false";
    return;
  }
  if (j.is_number_float()) {
    const double x = j.get<double>();
    out += std::isnan(x) ? "NaN" : std::isinf(x) ? (x < 0 ? "-Infinity" : "Infinity") : repr(j);
    return;
  }
  if (j.is_number()) {
    out += repr(j);
    return;
  }
  const bool array = j.is_array();
  if (j.empty()) {
    out += array ? "[]" : "{}";
    return;
  }
  auto newline = [&](int depth) {
    if (style.indent < 0) return;
    out += '\n';
    for (int i = 0; i < depth; ++i) out += style.indent_text;
  };
  out += array ? '[' : '{';
  bool first = true;
  auto separator = [&] {
    if (!first) out += style.item_separator;
    first = false;
    newline(level + 1);
  };
  if (array) {
    for (const Json& item : j) {
      separator();
      dump(out, item, style, level + 1);
    }
  } else {
    std::vector<std::pair<std::string, const Json*>> members;
    for (const auto& [k, v] : j.items()) members.emplace_back(k, &v);
    if (style.sort_keys)
      std::stable_sort(members.begin(), members.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [k, v] : members) {
      separator();
      json_string(out, k, style.ensure_ascii);
      out += style.key_separator;
      dump(out, *v, style, level + 1);
    }
  }
  newline(level);
  out += array ? ']' : '}';
}

Value tojson(const Value& input, CallArgs& args) {
  const Value ensure_ascii = take_arg(args, 0, "ensure_ascii");
  const Value indent = take_arg(args, 1, "indent");
  const Value separators = take_arg(args, 2, "separators");
  const Value sort_keys = take_arg(args, 3, "sort_keys");
  no_more_args(args, "tojson");
  MOE_CHECK(input.is_data(), "Object of type {} is not JSON serializable", type_name(input));
  int level_indent = -1;
  std::string indent_text;
  if (!indent.is_undefined() && !indent.is_none()) {
    if (indent.is_string()) {
      level_indent = 0;
      indent_text = indent.str();
    } else {
      level_indent = static_cast<int>(std::max<int64_t>(0, integer_arg(indent, 0, "the indent of tojson")));
      indent_text.assign(static_cast<size_t>(level_indent), ' ');
    }
  }
  std::string item_sep = level_indent >= 0 ? "," : ", ", key_sep = ": ";
  if (!separators.is_undefined() && !separators.is_none()) {
    MOE_CHECK(separators.is_data() && separators.data.is_array() && separators.data.size() == 2 &&
                  separators.data[0].is_string() && separators.data[1].is_string(),
              "the separators of tojson must be a pair of strings");
    item_sep = separators.data[0].get<std::string>();
    key_sep = separators.data[1].get<std::string>();
  }
  std::string out;
  dump(out, input.data,
       JsonStyle{.ensure_ascii = flag(ensure_ascii, false), .indent = level_indent, .indent_text = indent_text,
                 .item_separator = item_sep, .key_separator = key_sep, .sort_keys = flag(sort_keys, false)},
       0);
  return Value::of(out);
}

// The arguments after the test name in select / selectattr, as a test call's arguments.
CallArgs rest_args(CallArgs& args, size_t from) {
  CallArgs rest;
  for (size_t i = from; i < args.positional.size(); ++i) rest.positional.push_back(args.positional[i]);
  args.positional_used = args.positional.size();
  rest.keyword = std::move(args.keyword);
  args.keyword.clear();
  return rest;
}

Value select_filter(const std::string& name, const Value& input, CallArgs& args) {
  const bool by_attribute = name == "selectattr" || name == "rejectattr";
  const bool keep_matching = name == "select" || name == "selectattr";
  const size_t test_at = by_attribute ? 1 : 0;
  std::string attribute;
  if (by_attribute) {
    MOE_CHECK(!args.positional.empty() && args.positional[0].is_string(), "{} needs an attribute name", name);
    attribute = args.positional[0].str();
  }
  std::string test;
  if (args.positional.size() > test_at) {
    MOE_CHECK(args.positional[test_at].is_string(), "{}: the test must be named by a string", name);
    test = args.positional[test_at].str();
    MOE_CHECK(has_test(test), "no test named '{}'", test);
  }
  CallArgs test_args = rest_args(args, test_at + 1);
  Json out = Json::array();
  if (!truthy(input)) return Value::of(out);  // as jinja2's select_or_reject: a falsy input selects nothing
  for (const Json& item : iterate(input)) {
    const Value v = by_attribute ? item_attribute(item, attribute) : Value::of(item);
    CallArgs a = test_args;
    const bool match = test.empty() ? truthy(v) : apply_test(test, v, a);
    if (match == keep_matching) out.push_back(item);
  }
  return Value::of(out);
}

Value map_filter(const Value& input, CallArgs& args) {
  Json out = Json::array();
  if (!truthy(input)) return Value::of(out);  // as jinja2's do_map: a falsy input maps to nothing
  const Value attribute = take_arg(args, 99, "attribute");
  if (!attribute.is_undefined()) {
    const Value fallback = take_arg(args, 99, "default");
    no_more_args(args, "map");
    for (const Json& item : iterate(input)) {
      const Value v = item_attribute(item, soft_str(attribute));
      const Value& chosen = v.is_undefined() && !fallback.is_undefined() ? fallback : v;
      MOE_CHECK(chosen.is_data(), "map: the attribute '{}' is undefined on an item", soft_str(attribute));
      out.push_back(chosen.data);
    }
    return Value::of(out);
  }
  MOE_CHECK(!args.positional.empty() && args.positional[0].is_string(), "map needs a filter name or attribute=");
  const std::string filter = args.positional[0].str();
  MOE_CHECK(has_filter(filter), "no filter named '{}'", filter);
  CallArgs filter_args = rest_args(args, 1);
  for (const Json& item : iterate(input)) {
    CallArgs a = filter_args;
    const Value v = apply_filter(filter, Value::of(item), a);
    MOE_CHECK(v.is_data(), "map: the filter '{}' gave no value", filter);
    out.push_back(v.data);
  }
  return Value::of(out);
}

Value number_filter(const std::string& name, const Value& input, CallArgs& args) {
  MOE_CHECK(!input.is_undefined(), "'{}' is undefined", input.name);
  const Value fallback = take_arg(args, 0, "default");
  if (name == "int") {
    const int64_t base = integer_arg(take_arg(args, 1, "base"), 10, "the base of int");
    no_more_args(args, "int");
    const Json fb = fallback.is_data() ? fallback.data : Json(0);
    if (input.is_data() && input.data.is_boolean()) return Value::of(int64_t{input.data.get<bool>()});
    if (input.is_data() && input.data.is_number_float()) return Value::of(static_cast<int64_t>(input.data.get<double>()));
    if (input.is_data() && input.data.is_number()) return input;
    if (input.is_string()) {
      const std::string s = strip(input.str(), Value::undefined(""), true, true);
      try {
        size_t used = 0;
        const long long v = std::stoll(s, &used, static_cast<int>(base));
        if (used == s.size()) return Value::of(int64_t{v});
        const double d = std::stod(s, &used);
        if (used == s.size()) return Value::of(static_cast<int64_t>(d));
      } catch (const std::exception&) {
      }
    }
    return Value::of(fb);
  }
  no_more_args(args, "float");
  const Json fb = fallback.is_data() ? fallback.data : Json(0.0);
  if (input.is_data() && is_number(input.data)) return Value::of(as_double(input.data));
  if (input.is_string()) {
    const std::string s = strip(input.str(), Value::undefined(""), true, true);
    try {
      size_t used = 0;
      const double d = std::stod(s, &used);
      if (used == s.size()) return Value::of(d);
    } catch (const std::exception&) {
    }
  }
  return Value::of(fb);
}

Value aggregate_filter(const std::string& name, const Value& input, CallArgs& args) {
  std::vector<Json> items = iterate(input);
  if (name == "sum") {
    const Value attribute = take_arg(args, 0, "attribute");
    const Value start = take_arg(args, 1, "start");
    no_more_args(args, "sum");
    Json total = start.is_data() ? start.data : Json(0);
    for (const Json& item : items) {
      const Value v = attribute.is_undefined() ? Value::of(item) : item_attribute(item, soft_str(attribute));
      MOE_CHECK(v.is_data() && is_number(v.data) && is_number(total), "sum: cannot add {} to a number",
                type_name(v));
      if (total.is_number_float() || v.data.is_number_float()) {
        total = as_double(total) + as_double(v.data);
      } else {
        total = static_cast<int64_t>(as_double(total)) + static_cast<int64_t>(as_double(v.data));
      }
    }
    return Value::of(total);
  }
  // min / max
  const bool case_sensitive = flag(take_arg(args, 0, "case_sensitive"), false);
  const Value attribute = take_arg(args, 1, "attribute");
  no_more_args(args, name);
  if (items.empty()) return Value::undefined("no items");
  const Json* best = &items[0];
  for (const Json& item : items) {
    const int c = compare(sort_key(item, attribute, case_sensitive), sort_key(*best, attribute, case_sensitive));
    if (name == "min" ? c < 0 : c > 0) best = &item;
  }
  return Value::of(*best);
}

Value string_filter(const std::string& name, const Value& input, CallArgs& args) {
  if (name == "replace") {
    const Value from = take_arg(args, 0, "old");
    const Value to = take_arg(args, 1, "new");
    const Value count = take_arg(args, 2, "count");
    no_more_args(args, "replace");
    CallArgs call{.positional = {from, to}};
    if (!count.is_undefined()) call.positional.push_back(count);
    return *call_method(Value::of(soft_str(input)), "replace", call);
  }
  if (name == "trim") {
    const Value chars = take_arg(args, 0, "chars");
    no_more_args(args, "trim");
    return Value::of(strip(soft_str(input), chars, true, true));
  }
  if (name == "indent") {
    MOE_CHECK(!input.is_undefined(), "'{}' is undefined", input.name);
    const Value width = take_arg(args, 0, "width");
    const bool first = flag(take_arg(args, 1, "first"), false);
    const bool blank = flag(take_arg(args, 2, "blank"), false);
    no_more_args(args, "indent");
    const std::string pad = width.is_string() ? width.str() : std::string(static_cast<size_t>(
                                                                  integer_arg(width, 4, "the width of indent")), ' ');
    std::string s = soft_str(input), out;
    std::vector<std::string> lines;
    size_t start = 0;
    for (size_t at = s.find('\n'); at != std::string::npos; at = s.find('\n', start)) {
      lines.push_back(s.substr(start, at - start));
      start = at + 1;
    }
    lines.push_back(s.substr(start));
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += '\n';
      const bool indent_line = i == 0 ? first : (blank || !strip(lines[i], Value::undefined(""), true, true).empty());
      if (indent_line) out += pad;
      out += lines[i];
    }
    return Value::of(out);
  }
  no_more_args(args, name);
  std::string s = soft_str(input);
  if (name == "string") return input.is_string() ? input : Value::of(s);
  if (name == "safe") return Value::of(s);  // Markup(value): the value's text
  if (name == "e" || name == "escape") return Value::of(html_escape(s));
  CallArgs none;
  if (name == "upper" || name == "lower") return *call_method(Value::of(s), name, none);
  std::u32string u = decode_utf8(s);
  if (name == "capitalize") {
    for (size_t i = 0; i < u.size(); ++i)
      if (u[i] < 0x80) u[i] = static_cast<char32_t>(i == 0 ? std::toupper(static_cast<int>(u[i])) : std::tolower(static_cast<int>(u[i])));
    return Value::of(encode_utf8(u));
  }
  // title: each word's first letter up and the rest down; words begin after -, whitespace, ( { [ <.
  bool word_start = true;
  for (char32_t& c : u) {
    const bool boundary = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || c == ' ' || (c >= 0x09 && c <= 0x0d);
    if (boundary) {
      word_start = true;
      continue;
    }
    if (c < 0x80) c = static_cast<char32_t>(word_start ? std::toupper(static_cast<int>(c)) : std::tolower(static_cast<int>(c)));
    word_start = false;
  }
  return Value::of(encode_utf8(u));
}

Value sequence_filter(const std::string& name, const Value& input, CallArgs& args) {
  if (name == "join") {
    const Value separator = take_arg(args, 0, "d");
    const Value attribute = take_arg(args, 1, "attribute");
    no_more_args(args, "join");
    std::string out;
    bool first = true;
    for (const Json& item : iterate(input)) {
      if (!first) out += soft_str(separator);
      out += to_text(attribute.is_undefined() ? Value::of(item) : item_attribute(item, soft_str(attribute)));
      first = false;
    }
    return Value::of(out);
  }
  if (name == "sort") {
    const bool reverse = flag(take_arg(args, 0, "reverse"), false);
    const bool case_sensitive = flag(take_arg(args, 1, "case_sensitive"), false);
    const Value attribute = take_arg(args, 2, "attribute");
    no_more_args(args, "sort");
    return Value::of(to_array(sorted(iterate(input), attribute, case_sensitive, reverse)));
  }
  if (name == "dictsort") {
    const bool case_sensitive = flag(take_arg(args, 0, "case_sensitive"), false);
    const Value by = take_arg(args, 1, "by");
    const bool reverse = flag(take_arg(args, 2, "reverse"), false);
    no_more_args(args, "dictsort");
    MOE_CHECK(input.is_data() && input.data.is_object(), "dictsort needs a dict, not {}", type_name(input));
    std::vector<Json> pairs;
    for (const auto& [k, v] : input.data.items()) pairs.push_back(Json::array({k, v}));
    const bool by_value = by.is_string() && by.str() == "value";
    return Value::of(to_array(sorted(std::move(pairs), Value::of(by_value ? "1" : "0"), case_sensitive, reverse)));
  }
  if (name == "unique") {
    const bool case_sensitive = flag(take_arg(args, 0, "case_sensitive"), false);
    const Value attribute = take_arg(args, 1, "attribute");
    no_more_args(args, "unique");
    Json out = Json::array();
    std::vector<Value> seen;
    for (const Json& item : iterate(input)) {
      const Value key = sort_key(item, attribute, case_sensitive);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) {
        seen.push_back(key);
        out.push_back(item);
      }
    }
    return Value::of(out);
  }
  no_more_args(args, name);
  if (name == "length" || name == "count") {
    if (input.is_undefined()) return Value::of(int64_t{0});
    if (input.is_string()) return Value::of(static_cast<int64_t>(decode_utf8(input.str()).size()));
    MOE_CHECK(input.is_data() && (input.data.is_array() || input.data.is_object()),
              "object of type '{}' has no len()", type_name(input));
    return Value::of(static_cast<int64_t>(input.data.size()));
  }
  if (name == "list") return Value::of(to_array(iterate(input)));
  if (name == "items") {
    if (input.is_undefined()) return Value::of(Json::array());
    MOE_CHECK(input.is_data() && input.data.is_object(), "items needs a dict, not {}", type_name(input));
    CallArgs none;
    return *call_method(input, "items", none);
  }
  if (name == "reverse") {
    if (input.is_string()) {
      std::u32string u = decode_utf8(input.str());
      std::reverse(u.begin(), u.end());
      return Value::of(encode_utf8(u));
    }
    std::vector<Json> items = iterate(input);
    std::reverse(items.begin(), items.end());
    return Value::of(to_array(std::move(items)));
  }
  // first / last
  std::vector<Json> items = iterate(input);
  if (items.empty()) return Value::undefined(name + " of an empty sequence");
  return Value::of(name == "first" ? items.front() : items.back());
}

}  // namespace

bool has_filter(const std::string& name) { return filter_names().count(name) > 0; }
bool has_test(const std::string& name) { return test_names().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  if (name == "default" || name == "d") {
    const Value fallback = take_arg(args, 0, "default_value");
    const bool boolean = flag(take_arg(args, 1, "boolean"), false);
    no_more_args(args, name);
    const bool use_fallback = input.is_undefined() || (boolean && !truthy(input));
    if (!use_fallback) return input;
    return fallback.is_undefined() ? Value::of(std::string()) : fallback;
  }
  if (name == "tojson") return tojson(input, args);
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr")
    return select_filter(name, input, args);
  if (name == "map") return map_filter(input, args);
  if (name == "int" || name == "float") return number_filter(name, input, args);
  if (name == "sum" || name == "min" || name == "max") return aggregate_filter(name, input, args);
  if (name == "attr") {
    const Value attribute = take_arg(args, 0, "name");
    no_more_args(args, "attr");
    return get_attribute(input, soft_str(attribute));
  }
  if (name == "abs" || name == "round") {
    MOE_CHECK(input.is_data() && is_number(input.data), "{} needs a number, not {}", name, type_name(input));
    if (name == "abs") {
      no_more_args(args, "abs");
      if (input.data.is_number_float()) return Value::of(std::fabs(input.data.get<double>()));
      const int64_t v = input.data.is_boolean() ? input.data.get<bool>() : input.data.get<int64_t>();
      return Value::of(v < 0 ? -v : v);
    }
    const int64_t precision = integer_arg(take_arg(args, 0, "precision"), 0, "the precision of round");
    const Value method = take_arg(args, 1, "method");
    no_more_args(args, "round");
    const std::string how = method.is_undefined() ? "common" : soft_str(method);
    // Python's round(int, n) keeps the int.
    if (how == "common" && !input.data.is_number_float()) return Value::of(int_of_json(input.data));
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = as_double(input.data) * scale;
    // Python's round(): halves go to the even neighbour, which nearbyint does in the default rounding mode.
    const double r = how == "ceil" ? std::ceil(x) : how == "floor" ? std::floor(x) : std::nearbyint(x);
    return Value::of(r / scale);
  }
  if (name == "join" || name == "sort" || name == "dictsort" || name == "unique" || name == "length" ||
      name == "count" || name == "list" || name == "items" || name == "reverse" || name == "first" || name == "last")
    return sequence_filter(name, input, args);
  return string_filter(name, input, args);
}

bool apply_test(const std::string& name, const Value& value, CallArgs& args) {
  const Json* j = value.is_data() ? &value.data : nullptr;
  if (name == "defined" || name == "undefined") {
    no_more_args(args, name);
    return value.is_undefined() == (name == "undefined");
  }
  if (name == "divisibleby" || name == "sameas" || name == "eq" || name == "equalto" || name == "==" ||
      name == "ne" || name == "!=" || name == "lt" || name == "lessthan" || name == "<" || name == "le" ||
      name == "<=" || name == "gt" || name == "greaterthan" || name == ">" || name == "ge" || name == ">=" ||
      name == "in") {
    const Value other = take_arg(args, 0, "other");
    no_more_args(args, name);
    if (name == "divisibleby") {
      MOE_CHECK(j && is_number(*j) && other.is_data() && is_number(other.data) && as_double(other.data) != 0.0,
                "divisibleby needs a number and a non-zero divisor");
      if (j->is_number_float() || other.data.is_number_float()) return std::fmod(as_double(*j), as_double(other.data)) == 0.0;
      return (j->is_boolean() ? int64_t{j->get<bool>()} : j->get<int64_t>()) %
                 (other.data.is_boolean() ? int64_t{other.data.get<bool>()} : other.data.get<int64_t>()) == 0;
    }
    if (name == "sameas") {
      // Python's `is`: None, True, False and small integers are singletons; other values are distinct objects.
      return j && other.is_data() && j->type() == other.data.type() && *j == other.data &&
             (j->is_null() || j->is_boolean() || j->is_number_integer());
    }
    if (name == "eq" || name == "equalto" || name == "==") return equal(value, other);
    if (name == "ne" || name == "!=") return !equal(value, other);
    if (name == "in") {
      if (other.is_undefined()) return false;
      if (other.is_string()) return value.is_string() && other.str().find(value.str()) != std::string::npos;
      for (const Json& item : iterate(other))
        if (equal(value, Value::of(item))) return true;
      return false;
    }
    const int c = compare(value, other);
    if (name == "lt" || name == "lessthan" || name == "<") return c < 0;
    if (name == "le" || name == "<=") return c <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">") return c > 0;
    return c >= 0;
  }
  no_more_args(args, name);
  if (name == "none") return j && j->is_null();
  if (name == "boolean") return j && j->is_boolean();
  if (name == "true") return j && j->is_boolean() && j->get<bool>();
  if (name == "false") return j && j->is_boolean() && !j->get<bool>();
  if (name == "integer") return j && j->is_number_integer();
  if (name == "float") return j && j->is_number_float();
  if (name == "number") return j && is_number(*j);
  if (name == "string") return j && j->is_string();
  if (name == "mapping") return (j && j->is_object()) || value.kind == Value::Kind::ns;
  if (name == "iterable") return value.is_undefined() || (j && (j->is_array() || j->is_object() || j->is_string()));
  // jinja2's Undefined has a length and an item method (which fail when used), so it passes as a sequence.
  if (name == "sequence") return value.is_undefined() || (j && (j->is_array() || j->is_object() || j->is_string()));
  if (name == "callable") return value.kind == Value::Kind::callable;
  if (name == "escaped") return false;
  if (name == "odd" || name == "even") {
    MOE_CHECK(j && is_number(*j), "{} needs a number, not {}", name, type_name(value));
    // Python's value % 2 == 1 (odd) or == 0 (even), floats included.
    if (!j->is_number_float()) return (int_of_json(*j) % 2 != 0) == (name == "odd");
    double r = std::fmod(as_double(*j), 2.0);
    if (r < 0) r += 2.0;
    return name == "odd" ? r == 1.0 : r == 0.0;
  }
  if (name == "lower" || name == "upper") {
    // Python's str.islower / isupper: some cased letter, and none of the other case.
    const std::string text = to_text(value);
    bool cased = false;
    for (const char c : text) {
      if (std::islower(static_cast<unsigned char>(c))) {
        if (name == "upper") return false;
        cased = true;
      } else if (std::isupper(static_cast<unsigned char>(c))) {
        if (name == "lower") return false;
        cased = true;
      }
    }
    return cased;
  }
  if (name == "filter") return value.is_string() && has_filter(value.str());
  if (name == "test") return value.is_string() && has_test(value.str());
  MOE_FAIL("no test named '{}'", name);
}

}  // namespace moe::chat
