// Python's semantics for the values of a chat template (see chat_template_value.h).
#include "chat_template_value.h"

#include "moe/core/check.h"

#include <charconv>
#include <cmath>

namespace moe::chat {

bool is_number(const Json& j) { return j.is_number() || j.is_boolean(); }

double as_double(const Json& j) {
  if (j.is_boolean()) return j.get<bool>() ? 1.0 : 0.0;
  return j.get<double>();
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined: return false;
    case Value::Kind::ns:
    case Value::Kind::callable:
    case Value::Kind::loop: return true;
    case Value::Kind::data: break;
  }
  const Json& j = v.data;
  if (j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_float()) return j.get<double>() != 0.0;
  if (j.is_number()) return j.get<int64_t>() != 0;
  if (j.is_string()) return !j.get_ref<const std::string&>().empty();
  return !j.empty();  // list, dict
}

namespace {

// Python's repr(float): the shortest digits that round-trip, fixed notation for exponents in [-4, 16).
std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::stoi(sci.substr(e + 1));
  std::string sign;
  if (mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  if (exponent >= -4 && exponent < 16) {
    std::string out;
    if (exponent < 0) {
      out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exponent) + 1) + "." + digits.substr(static_cast<size_t>(exponent) + 1);
    }
    return sign + out;
  }
  std::string out = digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  const int mag = std::abs(exponent);
  out += exponent < 0 ? "e-" : "e+";
  if (mag < 10) out += '0';
  out += std::to_string(mag);
  return sign + out;
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode_utf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == U'\\') {
      out += '\\';
      append_utf8(out, c);
    } else if (c == U'\n') {
      out += "\\n";
    } else if (c == U'\r') {
      out += "\\r";
    } else if (c == U'\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else {
      append_utf8(out, c);
    }
  }
  out += quote;
  return out;
}

std::string number_text(const Json& j) {
  if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
  if (j.is_number_float()) return float_repr(j.get<double>());
  if (j.is_number_unsigned()) return std::to_string(j.get<uint64_t>());
  return std::to_string(j.get<int64_t>());
}

}  // namespace

std::string repr(const Json& j) {
  if (j.is_null()) return "None";
  if (j.is_string()) return string_repr(j.get_ref<const std::string&>());
  if (is_number(j)) return number_text(j);
  std::string out;
  if (j.is_array()) {
    out = "[";
    for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + repr(j[i]);
    return out + "]";
  }
  out = "{";
  bool first = true;
  for (const auto& [k, v] : j.items()) {
    out += (first ? "" : ", ") + string_repr(k) + ": " + repr(v);
    first = false;
  }
  return out + "}";
}

std::string to_text(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined: return "";
    case Value::Kind::ns: return "<Namespace " + repr(*v.attributes) + ">";
    case Value::Kind::callable: return "<function " + v.name + ">";
    case Value::Kind::loop:
      return fmt::format("<LoopContext {}/{}>", v.loop->index0 + 1, v.loop->items->size());
    case Value::Kind::data: break;
  }
  if (v.data.is_string()) return v.str();
  return repr(v.data);
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined: return "undefined";
    case Value::Kind::ns: return "Namespace";
    case Value::Kind::callable: return "function";
    case Value::Kind::loop: return "LoopContext";
    case Value::Kind::data: break;
  }
  const Json& j = v.data;
  if (j.is_null()) return "NoneType";
  if (j.is_boolean()) return "bool";
  if (j.is_number_float()) return "float";
  if (j.is_number()) return "int";
  if (j.is_string()) return "str";
  if (j.is_array()) return "list";
  return "dict";
}

namespace {

bool json_equal(const Json& a, const Json& b) {
  if (is_number(a) && is_number(b)) {
    if (a.is_number_float() || b.is_number_float()) return as_double(a) == as_double(b);
    const int64_t x = a.is_boolean() ? a.get<bool>() : a.get<int64_t>();
    const int64_t y = b.is_boolean() ? b.get<bool>() : b.get<int64_t>();
    return x == y;
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!json_equal(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a.items()) {
      auto it = b.find(k);
      if (it == b.end() || !json_equal(v, *it)) return false;
    }
    return true;
  }
  return a == b;
}

int json_compare(const Json& a, const Json& b, const Value& va, const Value& vb) {
  if (is_number(a) && is_number(b)) {
    if (!a.is_number_float() && !b.is_number_float()) {
      const int64_t x = a.is_boolean() ? a.get<bool>() : a.get<int64_t>();
      const int64_t y = b.is_boolean() ? b.get<bool>() : b.get<int64_t>();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const double x = as_double(a), y = as_double(b);
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order, which is Python's.
    const int c = a.get_ref<const std::string&>().compare(b.get_ref<const std::string&>());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_array() && b.is_array()) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (json_equal(a[i], b[i])) continue;
      return json_compare(a[i], b[i], Value::of(a[i]), Value::of(b[i]));
    }
    return a.size() < b.size() ? -1 : (a.size() > b.size() ? 1 : 0);
  }
  MOE_FAIL("'<' not supported between instances of '{}' and '{}'", type_name(va), type_name(vb));
}

}  // namespace

bool equal(const Value& a, const Value& b) {
  if (a.is_data() && b.is_data()) return json_equal(a.data, b.data);
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.kind == Value::Kind::ns && b.kind == Value::Kind::ns) return a.attributes == b.attributes;
  if (a.kind == Value::Kind::callable && b.kind == Value::Kind::callable) return a.function == b.function;
  if (a.kind == Value::Kind::loop && b.kind == Value::Kind::loop) return a.loop == b.loop;
  return false;
}

int compare(const Value& a, const Value& b) {
  MOE_CHECK(a.is_data() && b.is_data(), "'<' not supported between instances of '{}' and '{}'", type_name(a),
            type_name(b));
  return json_compare(a.data, b.data, a, b);
}

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    int len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xe ? 3 : (b >> 3) == 0x1e ? 4 : 0;
    bool ok = len > 0 && i + static_cast<size_t>(len) <= s.size();
    char32_t c = len == 1 ? b : len == 2 ? (b & 0x1f) : len == 3 ? (b & 0x0f) : (b & 0x07);
    for (int k = 1; ok && k < len; ++k) {
      const auto cont = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      ok = (cont & 0xc0) == 0x80;
      c = (c << 6) | (cont & 0x3f);
    }
    if (!ok) {
      out += static_cast<char32_t>(b);
      ++i;
      continue;
    }
    out += c;
    i += static_cast<size_t>(len);
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

}  // namespace moe::chat
