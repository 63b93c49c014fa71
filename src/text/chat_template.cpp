// ChatTemplate: where a model directory keeps its template and special tokens, and rendering through the
// lexer, parser and evaluator of chat_template_*.
#include "text/chat_template.h"

#include "chat_template_eval.h"
#include "chat_template_lexer.h"
#include "chat_template_methods.h"
#include "chat_template_parser.h"
#include "moe/core/check.h"

#include <fstream>
#include <sstream>

namespace moe {

struct ChatTemplate::Impl {
  std::string source_name;  // names the template in errors
  chat::Body body;
  std::string bos_token;
  std::string eos_token;
};

namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  MOE_CHECK(in.good(), "cannot read the {} {}", what, path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A special token of tokenizer_config.json: a string, an AddedToken {"content": ...}, or null.
std::string special_token(const nlohmann::json& config, const char* key, const fs::path& file) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  MOE_CHECK(it->is_object() && it->contains("content") && (*it)["content"].is_string(),
            "{}: \"{}\" must be a string or an object with a string \"content\"", file.string(), key);
  return (*it)["content"].get<std::string>();
}

struct ModelFiles {
  nlohmann::json config = nlohmann::json::object();  // tokenizer_config.json, empty when absent
  fs::path config_path;
};

ModelFiles read_model_files(const fs::path& dir) {
  ModelFiles files;
  files.config_path = dir / "tokenizer_config.json";
  if (fs::exists(files.config_path)) {
    try {
      files.config = nlohmann::json::parse(read_text(files.config_path, "tokenizer config"));
    } catch (const nlohmann::json::exception& e) {
      MOE_FAIL("{} is not valid JSON: {}", files.config_path.string(), e.what());
    }
    MOE_CHECK(files.config.is_object(), "{} must hold a JSON object", files.config_path.string());
  }
  return files;
}

// tokenizer_config.json's "chat_template": a string, or a list of {"name", "template"} whose "default" is used.
std::string config_template(const nlohmann::json& value, const fs::path& file) {
  if (value.is_string()) return value.get<std::string>();
  MOE_CHECK(value.is_array(), "{}: \"chat_template\" must be a string or a list of {{\"name\", \"template\"}}",
            file.string());
  std::string names;
  for (const auto& entry : value) {
    MOE_CHECK(entry.is_object() && entry.contains("name") && entry["name"].is_string() &&
                  entry.contains("template") && entry["template"].is_string(),
              "{}: each \"chat_template\" entry must have a string \"name\" and \"template\"", file.string());
    if (entry["name"] == "default") return entry["template"].get<std::string>();
    names += (names.empty() ? "" : ", ") + entry["name"].get<std::string>();
  }
  MOE_FAIL("{}: \"chat_template\" has no template named \"default\" (it has: {}); supply a template file instead",
           file.string(), names);
}

}  // namespace

namespace {

// Parses `source`; `name` names the template in errors.
std::shared_ptr<const ChatTemplate::Impl> parse_template(std::string source, std::string name, std::string bos,
                                                         std::string eos) {
  auto impl = std::make_shared<ChatTemplate::Impl>();
  try {
    impl->body = chat::parse(chat::lex(source));
  } catch (const Error& e) {
    MOE_FAIL("{} does not parse: {}", name, e.what());
  }
  impl->source_name = std::move(name);
  impl->bos_token = std::move(bos);
  impl->eos_token = std::move(eos);
  return impl;
}

}  // namespace

ChatTemplate::ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

ChatTemplate ChatTemplate::from_string(std::string source, std::string bos_token, std::string eos_token) {
  return ChatTemplate(parse_template(std::move(source), "chat template", std::move(bos_token), std::move(eos_token)));
}

ChatTemplate ChatTemplate::from_file(const fs::path& file, const fs::path& model_dir) {
  MOE_CHECK(fs::is_regular_file(file), "chat template file {} does not exist; give the path of a Jinja template",
            file.string());
  std::string source = read_text(file, "chat template file");
  const ModelFiles files = read_model_files(model_dir);
  return ChatTemplate(parse_template(std::move(source), file.string(),
                                     special_token(files.config, "bos_token", files.config_path),
                                     special_token(files.config, "eos_token", files.config_path)));
}

ChatTemplate ChatTemplate::load(const fs::path& model_dir) {
  const ModelFiles files = read_model_files(model_dir);
  std::string bos = special_token(files.config, "bos_token", files.config_path);
  std::string eos = special_token(files.config, "eos_token", files.config_path);
  // As transformers: a chat_template.jinja (or a processor's chat_template.json) beside the config replaces
  // the config's template.
  fs::path origin;
  std::string source;
  if (fs::is_regular_file(model_dir / "chat_template.jinja")) {
    origin = model_dir / "chat_template.jinja";
    source = read_text(origin, "chat template file");
  } else if (fs::is_regular_file(model_dir / "chat_template.json")) {
    origin = model_dir / "chat_template.json";
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_text(origin, "chat template file"));
    } catch (const nlohmann::json::exception& e) {
      MOE_FAIL("{} is not valid JSON: {}", origin.string(), e.what());
    }
    MOE_CHECK(j.is_object() && j.contains("chat_template"), "{} has no \"chat_template\"", origin.string());
    source = config_template(j["chat_template"], origin);
  } else {
    origin = files.config_path;
    const auto it = files.config.find("chat_template");
    MOE_CHECK(it != files.config.end() && !it->is_null(),
              "{} has no chat template (no \"chat_template\" in tokenizer_config.json, no chat_template.jinja or "
              "chat_template.json); supply a template file",
              model_dir.string());
    source = config_template(*it, origin);
  }
  return ChatTemplate(parse_template(std::move(source), origin.string(), std::move(bos), std::move(eos)));
}

std::string ChatTemplate::render(const nlohmann::json& messages, bool add_generation_prompt,
                                 const nlohmann::json& extra) const {
  // Through text: nlohmann offers no conversion between its json and ordered_json.
  return render(nlohmann::ordered_json::parse(messages.dump()), add_generation_prompt,
                nlohmann::ordered_json::parse(extra.dump()));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra) const {
  MOE_CHECK(messages.is_array(), "chat messages must be a JSON array of {{\"role\", \"content\"}} objects");
  MOE_CHECK(extra.is_object(), "extra chat template variables must be a JSON object");
  std::vector<std::pair<std::string, chat::Value>> vars;
  vars.emplace_back("messages", chat::Value::of(messages));
  // transformers passes tools and documents as None when the request has none, and only the tokens it has.
  vars.emplace_back("tools", chat::Value::of(nullptr));
  vars.emplace_back("documents", chat::Value::of(nullptr));
  vars.emplace_back("add_generation_prompt", chat::Value::of(add_generation_prompt));
  if (!impl_->bos_token.empty()) vars.emplace_back("bos_token", chat::Value::of(impl_->bos_token));
  if (!impl_->eos_token.empty()) vars.emplace_back("eos_token", chat::Value::of(impl_->eos_token));
  for (const auto& [k, v] : extra.items()) vars.emplace_back(k, chat::Value::of(v));
  try {
    return chat::render(impl_->body, std::move(vars));
  } catch (const chat::TemplateRaised& e) {
    MOE_FAIL("{}", e.what());
  } catch (const chat::LineError& e) {
    MOE_FAIL("{} line {}: {}", impl_->source_name, e.line, e.message);
  }
}

const std::string& ChatTemplate::bos_token() const { return impl_->bos_token; }
const std::string& ChatTemplate::eos_token() const { return impl_->eos_token; }

}  // namespace moe
