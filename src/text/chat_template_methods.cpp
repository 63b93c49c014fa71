// Attribute and item access, slices, Python's str and dict methods, and the template globals (see
// chat_template_methods.h). The sandbox's limits are kept: range() makes at most 100000 items, and the
// methods that would change a value (list.append, dict.update ...) are not there.
#include "chat_template_methods.h"

#include "moe/core/check.h"

#include <algorithm>
#include <ctime>

namespace moe::chat {

Value take_arg(CallArgs& args, size_t index, const char* name) {
  for (auto it = args.keyword.begin(); it != args.keyword.end(); ++it) {
    if (it->first == name) {
      Value v = std::move(it->second);
      args.keyword.erase(it);
      return v;
    }
  }
  if (index < args.positional.size()) {
    args.positional_used = std::max(args.positional_used, index + 1);
    return args.positional[index];
  }
  return Value::undefined(name);
}

void no_more_args(const CallArgs& args, const std::string& what) {
  MOE_CHECK(args.positional.size() <= args.positional_used, "{} got too many positional arguments", what);
  MOE_CHECK(args.keyword.empty(), "{} got an unexpected keyword argument '{}'", what,
            args.keyword.empty() ? "" : args.keyword.front().first);
}

namespace {

void require_defined(const Value& obj, const std::string& what) {
  MOE_CHECK(!obj.is_undefined(), "'{}' is undefined (while reading {})", obj.name, what);
}

int64_t as_index(const Value& v, const char* what) {
  MOE_CHECK(v.is_data() && (v.data.is_number_integer() || v.data.is_boolean()), "{} must be an integer, not {}",
            what, type_name(v));
  return v.data.is_boolean() ? v.data.get<bool>() : v.data.get<int64_t>();
}

bool is_py_space(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

const std::string& string_arg(const Value& v, const char* what) {
  MOE_CHECK(v.is_string(), "{} must be a str, not {}", what, type_name(v));
  return v.str();
}

Json split(const std::string& s, const Value& sep, int64_t max_split) {
  Json out = Json::array();
  if (sep.is_undefined() || sep.is_none()) {
    const std::u32string u = decode_utf8(s);
    size_t i = 0;
    while (i < u.size()) {
      while (i < u.size() && is_py_space(u[i])) ++i;
      if (i == u.size()) break;
      if (max_split >= 0 && static_cast<int64_t>(out.size()) == max_split) {
        size_t end = u.size();
        while (end > i && is_py_space(u[end - 1])) --end;
        out.push_back(encode_utf8(u.substr(i, end - i)));
        break;
      }
      size_t j = i;
      while (j < u.size() && !is_py_space(u[j])) ++j;
      out.push_back(encode_utf8(u.substr(i, j - i)));
      i = j;
    }
    return out;
  }
  const std::string& d = string_arg(sep, "the separator of split()");
  MOE_CHECK(!d.empty(), "split() got an empty separator");
  size_t start = 0;
  for (;;) {
    const size_t at = s.find(d, start);
    if (at == std::string::npos || (max_split >= 0 && static_cast<int64_t>(out.size()) == max_split)) break;
    out.push_back(s.substr(start, at - start));
    start = at + d.size();
  }
  out.push_back(s.substr(start));
  return out;
}

bool affix_matches(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Json& a) {
    MOE_CHECK(a.is_string(), "{}() argument must be a str or a tuple of str", prefix ? "startswith" : "endswith");
    const std::string& x = a.get_ref<const std::string&>();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  MOE_CHECK(affix.is_data(), "{}() argument must be a str, not {}", prefix ? "startswith" : "endswith",
            type_name(affix));
  if (affix.data.is_array()) {
    for (const Json& a : affix.data)
      if (one(a)) return true;
    return false;
  }
  return one(affix.data);
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {
    const std::u32string u = decode_utf8(s);
    int64_t done = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < u.size()) append_utf8(out, u[i]);
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  for (;;) {
    const size_t at = s.find(from, start);
    if (at == std::string::npos || (count >= 0 && done == count)) break;
    out.append(s, start, at - start);
    out += to;
    start = at + from.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

std::optional<Value> string_method(const std::string& s, const std::string& name, CallArgs& args) {
  const std::string what = "str." + name + "()";
  Value result;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value chars = take_arg(args, 0, "chars");
    result = Value::of(strip(s, chars, name != "rstrip", name != "lstrip"));
  } else if (name == "split") {
    const Value sep = take_arg(args, 0, "sep");
    const Value max = take_arg(args, 1, "maxsplit");
    result = Value::of(split(s, sep, max.is_undefined() ? -1 : as_index(max, "maxsplit")));
  } else if (name == "startswith" || name == "endswith") {
    const Value affix = take_arg(args, 0, "prefix");
    result = Value::of(affix_matches(s, affix, name == "startswith"));
  } else if (name == "upper" || name == "lower") {
    std::u32string u = decode_utf8(s);
    for (char32_t& c : u) {
      if (c < 0x80) c = static_cast<char32_t>(name == "upper" ? std::toupper(static_cast<int>(c))
                                                              : std::tolower(static_cast<int>(c)));
    }
    result = Value::of(encode_utf8(u));
  } else if (name == "replace") {
    const Value from = take_arg(args, 0, "old");
    const Value to = take_arg(args, 1, "new");
    const Value count = take_arg(args, 2, "count");
    result = Value::of(replace_all(s, string_arg(from, "old"), string_arg(to, "new"),
                                   count.is_undefined() ? -1 : as_index(count, "count")));
  } else if (name == "find" || name == "count") {
    const Value sub_arg = take_arg(args, 0, "sub");
    const std::string& sub = string_arg(sub_arg, "sub");
    if (name == "find") {
      const size_t at = s.find(sub);
      result = Value::of(at == std::string::npos ? int64_t{-1}
                                                 : static_cast<int64_t>(decode_utf8(s.substr(0, at)).size()));
    } else {
      int64_t n = 0;
      if (sub.empty()) {
        n = static_cast<int64_t>(decode_utf8(s).size()) + 1;
      } else {
        for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      }
      result = Value::of(n);
    }
  } else if (name == "join") {
    const Value items = take_arg(args, 0, "iterable");
    std::string out;
    bool first = true;
    for (const Json& item : iterate(items)) {
      MOE_CHECK(item.is_string(), "str.join() expected str items, found {}", type_name(Value::of(item)));
      if (!first) out += s;
      out += item.get_ref<const std::string&>();
      first = false;
    }
    result = Value::of(out);
  } else if (name == "splitlines") {
    Json out = Json::array();
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        out.push_back(s.substr(start, i - start));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) out.push_back(s.substr(start));
    result = Value::of(out);
  } else {
    return std::nullopt;
  }
  no_more_args(args, what);
  return result;
}

std::optional<Value> dict_method(const Json& d, const std::string& name, CallArgs& args) {
  Value result;
  if (name == "items" || name == "keys" || name == "values") {
    Json out = Json::array();
    for (const auto& [k, v] : d.items()) {
      if (name == "items") {
        out.push_back(Json::array({k, v}));
      } else {
        out.push_back(name == "keys" ? Json(k) : v);
      }
    }
    result = Value::of(out);
  } else if (name == "get") {
    const Value key = take_arg(args, 0, "key");
    Value fallback = take_arg(args, 1, "default");
    const auto it = key.is_string() ? d.find(key.str()) : d.end();
    result = it != d.end() ? Value::of(*it) : (fallback.is_undefined() ? Value::of(nullptr) : fallback);
  } else {
    return std::nullopt;
  }
  no_more_args(args, "dict." + name + "()");
  return result;
}

Value range(CallArgs& args) {
  std::vector<int64_t> bounds;
  for (const Value& v : args.positional) bounds.push_back(as_index(v, "an argument of range()"));
  MOE_CHECK(args.keyword.empty() && !bounds.empty() && bounds.size() <= 3, "range() takes 1 to 3 integers");
  const int64_t start = bounds.size() == 1 ? 0 : bounds[0];
  const int64_t stop = bounds.size() == 1 ? bounds[0] : bounds[1];
  const int64_t step = bounds.size() == 3 ? bounds[2] : 1;
  MOE_CHECK(step != 0, "range() arg 3 must not be zero");
  constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE
  Json out = Json::array();
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    MOE_CHECK(static_cast<int64_t>(out.size()) < kMaxRange, "range() is too big: more than {} items", kMaxRange);
    out.push_back(i);
  }
  return Value::of(out);
}

Value make_dict(CallArgs& args, bool as_namespace) {
  Json d = Json::object();
  MOE_CHECK(args.positional.size() <= 1, "{}() takes at most one positional argument",
            as_namespace ? "namespace" : "dict");
  if (!args.positional.empty()) {
    const Value& init = args.positional[0];
    MOE_CHECK(init.is_data() && init.data.is_object(), "{}() takes a dict as its positional argument",
              as_namespace ? "namespace" : "dict");
    d = init.data;
  }
  for (auto& [k, v] : args.keyword) {
    MOE_CHECK(v.is_data(), "{}() values must be data, not {}", as_namespace ? "namespace" : "dict", type_name(v));
    d[k] = v.data;
  }
  if (!as_namespace) return Value::of(d);
  return Value{.kind = Value::Kind::ns, .attributes = std::make_shared<Json>(std::move(d))};
}

}  // namespace

std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::u32string u = decode_utf8(s);
  std::u32string set;
  const bool whitespace = chars.is_undefined() || chars.is_none();
  if (!whitespace) set = decode_utf8(string_arg(chars, "the chars of strip()"));
  auto strippable = [&](char32_t c) { return whitespace ? is_py_space(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strippable(u[b])) ++b;
  if (right)
    while (e > b && strippable(u[e - 1])) --e;
  return encode_utf8(std::u32string_view(u).substr(b, e - b));
}

std::vector<Json> iterate(const Value& v) {
  if (v.is_undefined()) return {};
  MOE_CHECK(v.is_data() && (v.data.is_array() || v.data.is_object() || v.data.is_string()),
            "'{}' object is not iterable", type_name(v));
  std::vector<Json> out;
  if (v.data.is_array()) {
    out.assign(v.data.begin(), v.data.end());
  } else if (v.data.is_object()) {
    for (const auto& [k, _] : v.data.items()) out.emplace_back(k);
  } else {
    for (char32_t c : decode_utf8(v.str())) out.emplace_back(encode_utf8(std::u32string(1, c)));
  }
  return out;
}

namespace {

Value loop_attribute(const LoopState& loop, const std::string& name) {
  const int64_t i = loop.index0, n = static_cast<int64_t>(loop.items->size());
  if (name == "index") return Value::of(i + 1);
  if (name == "index0") return Value::of(i);
  if (name == "revindex") return Value::of(n - i);
  if (name == "revindex0") return Value::of(n - i - 1);
  if (name == "first") return Value::of(i == 0);
  if (name == "last") return Value::of(i == n - 1);
  if (name == "length") return Value::of(n);
  if (name == "depth") return Value::of(int64_t{1});
  if (name == "depth0") return Value::of(int64_t{0});
  if (name == "previtem" && i > 0) return Value::of((*loop.items)[static_cast<size_t>(i - 1)]);
  if (name == "nextitem" && i + 1 < n) return Value::of((*loop.items)[static_cast<size_t>(i + 1)]);
  return Value::undefined(name);
}

}  // namespace

Value get_attribute(const Value& obj, const std::string& name) {
  require_defined(obj, "attribute '" + name + "'");
  if (obj.kind == Value::Kind::loop) return loop_attribute(*obj.loop, name);
  if (obj.kind == Value::Kind::ns) {
    const auto it = obj.attributes->find(name);
    return it != obj.attributes->end() ? Value::of(*it) : Value::undefined(name);
  }
  if (obj.is_data() && obj.data.is_object()) {
    const auto it = obj.data.find(name);
    if (it != obj.data.end()) return Value::of(*it);
  }
  return Value::undefined(name);
}

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj, "an item");
  if (obj.kind == Value::Kind::loop) return key.is_string() ? get_attribute(obj, key.str()) : Value::undefined("item");
  if (obj.kind == Value::Kind::ns) return key.is_string() ? get_attribute(obj, key.str()) : Value::undefined("item");
  if (!obj.is_data()) return Value::undefined("item");
  const Json& j = obj.data;
  if (j.is_object()) {
    if (!key.is_string()) return Value::undefined("item");
    const auto it = j.find(key.str());
    return it != j.end() ? Value::of(*it) : Value::undefined(key.str());
  }
  if ((j.is_array() || j.is_string()) && key.is_data() && (key.data.is_number_integer() || key.data.is_boolean())) {
    int64_t i = as_index(key, "an index");
    if (j.is_array()) {
      const auto n = static_cast<int64_t>(j.size());
      if (i < 0) i += n;
      return i >= 0 && i < n ? Value::of(j[static_cast<size_t>(i)]) : Value::undefined("item");
    }
    const std::u32string u = decode_utf8(j.get_ref<const std::string&>());
    const auto n = static_cast<int64_t>(u.size());
    if (i < 0) i += n;
    return i >= 0 && i < n ? Value::of(encode_utf8(u.substr(static_cast<size_t>(i), 1))) : Value::undefined("item");
  }
  return key.is_string() ? get_attribute(obj, key.str()) : Value::undefined("item");
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  require_defined(obj, "a slice");
  // As jinja2's getitem: what cannot be sliced gives undefined.
  if (!obj.is_data() || !(obj.data.is_array() || obj.data.is_string())) return Value::undefined("slice");
  auto bound = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    return as_index(v, "a slice index");
  };
  const int64_t st = bound(step).value_or(1);
  MOE_CHECK(st != 0, "slice step cannot be zero");
  std::u32string text;
  const bool is_str = obj.data.is_string();
  if (is_str) text = decode_utf8(obj.str());
  const int64_t n = is_str ? static_cast<int64_t>(text.size()) : static_cast<int64_t>(obj.data.size());
  auto clamp = [&](std::optional<int64_t> b, bool is_start) {
    if (!b) return st > 0 ? (is_start ? int64_t{0} : n) : (is_start ? n - 1 : int64_t{-1});
    int64_t i = *b < 0 ? *b + n : *b;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = clamp(bound(start), true), e = clamp(bound(stop), false);
  Json out = is_str ? Json("") : Json::array();
  std::u32string sliced;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (is_str) {
      sliced += text[static_cast<size_t>(i)];
    } else {
      out.push_back(obj.data[static_cast<size_t>(i)]);
    }
  }
  return is_str ? Value::of(encode_utf8(sliced)) : Value::of(out);
}

namespace {

std::optional<Value> list_method(const Json& list, const std::string& name, CallArgs& args) {
  if (name != "count" && name != "index") return std::nullopt;
  const Value item = take_arg(args, 0, "value");
  no_more_args(args, "list." + name + "()");
  int64_t count = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!equal(item, Value::of(list[i]))) continue;
    if (name == "index") return Value::of(static_cast<int64_t>(i));
    ++count;
  }
  MOE_CHECK(name == "count", "{} is not in list", to_text(item));
  return Value::of(count);
}

}  // namespace

std::optional<Value> call_method(const Value& obj, const std::string& name, CallArgs& args) {
  if (!obj.is_data()) return std::nullopt;
  if (obj.data.is_string()) return string_method(obj.str(), name, args);
  if (obj.data.is_object()) return dict_method(obj.data, name, args);
  if (obj.data.is_array()) return list_method(obj.data, name, args);
  return std::nullopt;
}

void add_globals(std::vector<std::pair<std::string, Value>>& globals) {
  globals.emplace_back("range", Value::callable("range", range));
  globals.emplace_back("dict", Value::callable("dict", [](CallArgs& a) { return make_dict(a, false); }));
  globals.emplace_back("namespace", Value::callable("namespace", [](CallArgs& a) { return make_dict(a, true); }));
  globals.emplace_back("raise_exception", Value::callable("raise_exception", [](CallArgs& a) -> Value {
                         const Value message = take_arg(a, 0, "message");
                         throw TemplateRaised(to_text(message));
                       }));
  globals.emplace_back("strftime_now", Value::callable("strftime_now", [](CallArgs& a) {
                         const Value format = take_arg(a, 0, "format");
                         no_more_args(a, "strftime_now()");
                         const std::string& f = string_arg(format, "the format of strftime_now()");
                         const std::time_t now = std::time(nullptr);
                         std::tm local{};
                         localtime_r(&now, &local);
                         char buf[256];
                         const size_t n = f.empty() ? 0 : std::strftime(buf, sizeof buf, f.c_str(), &local);
                         MOE_CHECK(f.empty() || n > 0, "strftime_now(): the format '{}' gives no text", f);
                         return Value::of(std::string(buf, n));
                       }));
}

}  // namespace moe::chat
