#pragma once
// The values a chat template computes with: JSON data (ordered, as Python dicts keep insertion order), plus
// the few things that are not data (undefined, a namespace object, a callable). Python's rules for them live
// here too: truthiness, str() and repr(), ==, ordering, and code-point indexing of UTF-8 strings.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moe::chat {

using Json = nlohmann::ordered_json;

struct Value;
struct CallArgs;

using Function = std::function<Value(CallArgs&)>;

// A for loop's `loop` object: its items and the current position; the attributes are computed on access.
struct LoopState {
  std::shared_ptr<const std::vector<Json>> items;
  int64_t index0 = 0;
};

struct Value {
  enum class Kind { undefined, data, ns, callable, loop };
  Kind kind = Kind::undefined;
  Json data{};                          // Kind::data
  std::shared_ptr<Json> attributes{};   // Kind::ns: a namespace() object, shared by every copy
  std::shared_ptr<const Function> function{};  // Kind::callable
  std::shared_ptr<const LoopState> loop{};       // Kind::loop
  std::string name{};                   // Kind::undefined: what was looked up; Kind::callable: its name

  static Value undefined(std::string name) { return Value{.kind = Kind::undefined, .name = std::move(name)}; }
  static Value of(Json data) { return Value{.kind = Kind::data, .data = std::move(data)}; }
  static Value callable(std::string name, Function f) {
    return Value{.kind = Kind::callable, .function = std::make_shared<const Function>(std::move(f)),
                 .name = std::move(name)};
  }

  bool is_undefined() const { return kind == Kind::undefined; }
  bool is_data() const { return kind == Kind::data; }
  bool is_string() const { return is_data() && data.is_string(); }
  bool is_none() const { return is_data() && data.is_null(); }
  const std::string& str() const { return data.get_ref<const std::string&>(); }
};

// Arguments of a call: positional, then keyword in source order.
struct CallArgs {
  std::vector<Value> positional{};
  std::vector<std::pair<std::string, Value>> keyword{};
  size_t positional_used = 0;  // how many positional arguments the callee has read
};

// Python's bool(x).
bool truthy(const Value& v);
// Python's str(x) as Jinja prints it (undefined prints as "").
std::string to_text(const Value& v);
// Python's repr(x) of data.
std::string repr(const Json& j);
// Python's ==, where 1 == 1.0 == True.
bool equal(const Value& a, const Value& b);
// Python's ordering (<0, 0, >0); throws for types Python cannot order.
int compare(const Value& a, const Value& b);
// A short name of the value's type for messages ("str", "list", "undefined" ...).
std::string type_name(const Value& v);

bool is_number(const Json& j);  // int, float or bool, as Python treats bool as int
double as_double(const Json& j);

// UTF-8 <-> code points; an invalid byte becomes the code point of its value.
std::u32string decode_utf8(std::string_view s);
std::string encode_utf8(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);

}  // namespace moe::chat
