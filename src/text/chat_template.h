#pragma once
// HuggingFace chat templates: the Jinja text in a model's tokenizer_config.json (or chat_template.jinja),
// rendered exactly as transformers' apply_chat_template(messages, tokenize=False, ...) does. transformers
// renders with jinja2's ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
// extensions=[loopcontrols]) plus raise_exception, strftime_now and a tojson that keeps non-ASCII text; this
// is an evaluator of the Jinja subset that real templates use, over (ordered) JSON values, tested byte for
// byte against jinja2 on the templates of every supported family.
//
// NOTE: a C++ evaluator rather than embedding Python's jinja2: no C++ Jinja library is packaged in Debian or
// PyPI, the server must not need an interpreter at run time, and a template is rendered per request (a
// parsed template is rendered many times, from any thread).
//
// Supported: {{ }}, {% %}, {# #} with the -/+ whitespace controls; if/elif/else, for (tuple unpacking,
// `if` filter, else, loop.*, break/continue), set (also block set and namespace attributes), macro/call,
// filter blocks, raw; expressions with literals, lists, dicts, tuples, attribute and item access, slices,
// calls, the operators of Jinja (~ ** // % in, not in, is [not], a if b else c); the filters and tests those
// templates use, and the str / dict / list methods they call. An unknown tag, filter or test is a
// moe::Error naming the template and the line when it loads (a filter or test inside an if or a conditional
// expression when it runs, as jinja2 does); include / import / extends, recursive loops and loop.cycle are
// not supported. A render stops with an error past 1M loop iterations, 64 MiB of output or 200 nested macro
// calls. Known differences from jinja2: a tuple prints as a list; upper / lower / title / capitalize change
// ASCII letters only; map(attribute=) of an item without it is an error (jinja2 gives undefined items); no
// Markup (safe / escape give plain strings).

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>

namespace moe {

class ChatTemplate {
 public:
  // The chat template of a model directory: DIR/tokenizer_config.json's "chat_template" (a string, or a list of
  // {"name","template"} where "default" is used) or DIR/chat_template.jinja / chat_template.json when present
  // (as transformers looks them up); bos_token / eos_token from tokenizer_config.json (string or
  // {"content": ...}). Throws moe::Error naming the file when there is none or it does not parse.
  static ChatTemplate load(const std::filesystem::path& model_dir);
  // A template from a file (--chat-template FILE), with the model dir's special tokens.
  static ChatTemplate from_file(const std::filesystem::path& file, const std::filesystem::path& model_dir);
  static ChatTemplate from_string(std::string source, std::string bos_token = "", std::string eos_token = "");

  // Renders `messages` (a JSON array of {"role","content", ...}) as apply_chat_template(messages,
  // tokenize=False, add_generation_prompt=...) does. `extra` adds variables (e.g. tools, enable_thinking).
  // Throws moe::Error with the template's raise_exception message, or naming the line for an evaluation error.
  // Thread-safe: rendering does not change the template.
  std::string render(const nlohmann::json& messages, bool add_generation_prompt,
                     const nlohmann::json& extra = nlohmann::json::object()) const;
  // The same keeping the caller's key order, as Python dicts keep it (nlohmann::json sorts keys): what
  // `tojson` prints of a message, a tool or a tool call's arguments matches transformers byte for byte only
  // then, so a server that parses requests as ordered_json should call this one.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra) const;

  // The special tokens the template sees as bos_token / eos_token.
  const std::string& bos_token() const;
  const std::string& eos_token() const;

  struct Impl;

 private:
  explicit ChatTemplate(std::shared_ptr<const Impl> impl);
  // Shared: a parsed template is immutable, so copies share it.
  std::shared_ptr<const Impl> impl_;
};

}  // namespace moe
