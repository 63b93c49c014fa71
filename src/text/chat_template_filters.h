#pragma once
// Jinja's filters and tests that chat templates use, with transformers' tojson (json.dumps with
// ensure_ascii=False; indent, separators and sort_keys as keyword arguments).

#include "chat_template_value.h"

#include <string>

namespace moe::chat {

bool has_filter(const std::string& name);
bool has_test(const std::string& name);

// `input | name(args)`; throws moe::Error for a bad argument.
Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
// `value is name(args)`.
bool apply_test(const std::string& name, const Value& value, CallArgs& args);

}  // namespace moe::chat
