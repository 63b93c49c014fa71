// The chat template parser and evaluator on arbitrary templates: the input is the template's source, and
// an optional second part a JSON array of messages (a fixed conversation otherwise). A template that
// parses is rendered with and without the generation prompt. Invariant: a render is a function of its
// inputs (the same twice), unless the template reads the clock.
#include <nlohmann/json.hpp>

#include "fuzz_target.h"
#include "text/chat_template.h"

namespace moe::fuzz {

int fuzz_chat_template(const uint8_t* data, size_t size) {
  const std::vector<std::string_view> parts = split_parts(std::string_view(reinterpret_cast<const char*>(data), size));
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi <think>x</think>\n"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
    {"role": "tool", "content": "{\"ok\": true}"},
    {"role": "user", "content": "Grüße 你好"}])");
  if (parts.size() > 1) {
    messages = nlohmann::ordered_json::parse(parts[1], nullptr, /*allow_exceptions=*/false);
    if (messages.is_discarded() || !messages.is_array()) return 0;
  }
  const std::string source(parts[0]);
  return expect_errors([&] {
    const ChatTemplate chat = ChatTemplate::from_string(source, "<s>", "</s>");
    const nlohmann::ordered_json extra = {{"enable_thinking", false}};
    for (const bool prompt : {true, false}) {
      const std::string first = chat.render(messages, prompt, extra);
      if (source.find("strftime_now") != std::string::npos) continue;
      MOE_FUZZ_ASSERT(chat.render(messages, prompt, extra) == first, "two renders of one template differ");
    }
  });
}

}  // namespace moe::fuzz

MOE_FUZZ_ENTRY(moe::fuzz::fuzz_chat_template)
