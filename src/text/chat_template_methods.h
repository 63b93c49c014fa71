#pragma once
// What an expression reaches on a value: attributes and items as jinja2's sandboxed getattr/getitem find
// them, slices, the Python methods of str and dict that templates call (strip, split, startswith, items,
// get ...), and the global functions (range, dict, namespace, raise_exception, strftime_now).

#include "chat_template_value.h"

#include <optional>
#include <stdexcept>
#include <string>

namespace moe::chat {

// A template's own raise_exception(message): reported with that message alone.
class TemplateRaised : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// obj.name: a dict's key, a namespace's attribute, else undefined; undefined obj throws.
Value get_attribute(const Value& obj, const std::string& name);
// obj[key]: a dict's key, a list's or str's index (negative from the end), else undefined.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] of a list or str; undefined bounds are omitted ones.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// obj.name(args) for a Python method of str, dict or list (count, index); nullopt when `name` is not one.
std::optional<Value> call_method(const Value& obj, const std::string& name, CallArgs& args);
// The globals every template sees.
void add_globals(std::vector<std::pair<std::string, Value>>& globals);

// The items a for loop or a filter walks: a list's elements, a dict's keys, a str's characters; an
// undefined value has none; anything else throws.
std::vector<Json> iterate(const Value& v);
// Python's str.strip / lstrip / rstrip (chars null: whitespace).
std::string strip(const std::string& s, const Value& chars, bool left, bool right);

// The value of keyword `name` or positional `index`, removing it from `args`; undefined when absent.
Value take_arg(CallArgs& args, size_t index, const char* name);
// Throws unless every argument was taken.
void no_more_args(const CallArgs& args, const std::string& what);

}  // namespace moe::chat
