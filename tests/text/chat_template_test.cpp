// Chat templates against Python's jinja2 configured as transformers configures it: the real templates of
// the supported families on a set of conversations, and one small template per Jinja feature; expected
// strings in tests/data/chat_templates/expected (make_expected.py there writes them). Then the loader
// (where a model directory keeps its template and tokens) and the errors a bad template or file gives.
#include "text/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "moe/core/check.h"
#include "error_of.h"
#include "temp_dir.h"

namespace moe {
namespace {

using test::error_of;

namespace fs = std::filesystem;

const fs::path kTemplates = fs::path(MOE_TEST_DATA) / "chat_templates";
const fs::path kModels = fs::path(MOE_TEST_DATA) / "models";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json read_json(const fs::path& path) { return nlohmann::json::parse(read_file(path)); }
// Conversations keep their key order, as the Python dicts that made the expected strings do.
nlohmann::ordered_json read_ordered(const fs::path& path) { return nlohmann::ordered_json::parse(read_file(path)); }

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

ChatTemplate family_template(const std::string& family) {
  const nlohmann::json tokens = read_json(kTemplates / "special_tokens.json").at(family);
  return ChatTemplate::from_string(read_file(kTemplates / (family + ".jinja")), tokens.at("bos_token"),
                                   tokens.at("eos_token"));
}

class RealTemplate : public ::testing::TestWithParam<std::string> {};

TEST_P(RealTemplate, RendersAsTransformers) {
  const std::string family = GetParam();
  const ChatTemplate chat = family_template(family);
  const nlohmann::ordered_json conversations = read_ordered(kTemplates / "conversations.json");
  ASSERT_GE(conversations.size(), 6u);
  for (const auto& c : conversations) {
    const std::string name = c.at("name");
    SCOPED_TRACE(family + "." + name);
    const nlohmann::ordered_json extra = c.value("extra", nlohmann::ordered_json::object());
    const fs::path expected = kTemplates / "expected" / (family + "." + name + ".txt");
    const fs::path expected_error = kTemplates / "expected" / (family + "." + name + ".error.txt");
    if (fs::exists(expected_error)) {
      const std::string message = error_of([&] { chat.render(c.at("messages"), c.at("add_generation_prompt"), extra); });
      EXPECT_EQ(message, read_file(expected_error));
      continue;
    }
    ASSERT_TRUE(fs::exists(expected)) << expected;
    EXPECT_EQ(chat.render(c.at("messages"), c.at("add_generation_prompt"), extra), read_file(expected));
  }
}

INSTANTIATE_TEST_SUITE_P(Families, RealTemplate,
                         ::testing::Values("qwen3_moe", "qwen2_moe", "mixtral", "deepseek_v2", "deepseek_v3", "olmoe"));

TEST(ChatTemplateFeatures, EachFeatureRendersAsJinja2) {
  const nlohmann::json features = read_json(kTemplates / "features.json");
  ASSERT_GE(features.size(), 15u);
  nlohmann::ordered_json messages;
  for (const auto& c : read_ordered(kTemplates / "conversations.json"))
    if (c.at("name") == "multi_turn") messages = c.at("messages");
  for (const auto& f : features) {
    const std::string name = f.at("name");
    SCOPED_TRACE(name);
    try {
      const ChatTemplate chat = ChatTemplate::from_string(f.at("template"));
      EXPECT_EQ(chat.render(messages, true, nlohmann::ordered_json::object()),
                read_file(kTemplates / "expected" / ("features." + name + ".txt")));
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

TEST(ChatTemplate, ExtraVariablesAndSpecialTokensReachTheTemplate) {
  const ChatTemplate chat = ChatTemplate::from_string(
      "{{ bos_token }}{{ greeting }}{{ tools is none }}{{ eos_token is defined }}{{ add_generation_prompt }}", "<s>");
  EXPECT_EQ(chat.render(nlohmann::json::array(), false, {{"greeting", "hi"}}), "<s>hiTrueFalseFalse");
  EXPECT_EQ(chat.bos_token(), "<s>");
  EXPECT_EQ(chat.eos_token(), "");
}

TEST(ChatTemplate, KeyOrderIsTheCallersWithOrderedJsonAndSortedWithJson) {
  const ChatTemplate chat = ChatTemplate::from_string("{{ messages[0] | tojson }}");
  const std::string text = R"([{"role": "user", "content": "x"}])";
  EXPECT_EQ(chat.render(nlohmann::ordered_json::parse(text), true, nlohmann::ordered_json::object()),
            R"({"role": "user", "content": "x"})");
  EXPECT_EQ(chat.render(nlohmann::json::parse(text), true), R"({"content": "x", "role": "user"})");
}

TEST(ChatTemplate, CopiesShareOneParsedTemplate) {
  const ChatTemplate a = ChatTemplate::from_string("{{ messages | length }}");
  const ChatTemplate b = a;  // NOLINT(performance-unnecessary-copy-initialization): copying is what is tested
  EXPECT_EQ(b.render(nlohmann::json::array({{{"role", "user"}, {"content", "x"}}}), true), "1");
}

TEST(ChatTemplateErrors, UnknownFilterNamesItAndTheLine) {
  const std::string message = error_of([] { ChatTemplate::from_string("line one\n{{ x | nope }}"); });
  EXPECT_NE(message.find("no filter named 'nope'"), std::string::npos) << message;
  EXPECT_NE(message.find("line 2"), std::string::npos) << message;
}

TEST(ChatTemplateErrors, UnknownFilterInAnIfFailsOnlyWhenItRuns) {
  // As jinja2: a template may name a filter it lacks on a path it never takes (`x is filter` guards).
  const ChatTemplate chat = ChatTemplate::from_string(
      "{% if messages | length > 5 %}{{ x | nope }}{% else %}short{% endif %}{{ 'y' if true else z | nope2 }}");
  EXPECT_EQ(chat.render(nlohmann::json::array(), true), "shorty");
  const nlohmann::json six = nlohmann::json::array({1, 2, 3, 4, 5, 6});
  EXPECT_NE(error_of([&] { chat.render(six, true); }).find("no filter named 'nope'"), std::string::npos);
  // A for loop's body opens a frame that is checked when the template loads again.
  EXPECT_NE(error_of([] { ChatTemplate::from_string("{% if true %}{% for m in messages %}{{ m | nope }}{% endfor %}{% endif %}"); })
                .find("no filter named 'nope'"),
            std::string::npos);
}

TEST(ChatTemplateErrors, UnknownTestAndTag) {
  EXPECT_NE(error_of([] { ChatTemplate::from_string("{{ x is nope }}"); }).find("no test named 'nope'"),
            std::string::npos);
  EXPECT_NE(error_of([] { ChatTemplate::from_string("{% include 'x' %}"); }).find("unsupported tag 'include'"),
            std::string::npos);
}

TEST(ChatTemplateErrors, UnclosedBlocksAndTags) {
  EXPECT_NE(error_of([] { ChatTemplate::from_string("{% if true %}never closed"); }).find("unclosed block"),
            std::string::npos);
  EXPECT_NE(error_of([] { ChatTemplate::from_string("{% for m in messages %}x{% endif %}"); }).find("endfor"),
            std::string::npos);
  EXPECT_NE(error_of([] { ChatTemplate::from_string("{{ messages "); }).find("unclosed {{ tag"), std::string::npos);
  EXPECT_NE(error_of([] { ChatTemplate::from_string("{# comment"); }).find("missing end of comment"),
            std::string::npos);
  EXPECT_NE(error_of([] { ChatTemplate::from_string("{{ 'open }}"); }).find("unterminated string"),
            std::string::npos);
  EXPECT_NE(error_of([] { ChatTemplate::from_string("{% break %}"); }).find("outside of a for loop"),
            std::string::npos);
}

TEST(ChatTemplateErrors, NestingIsBounded) {
  const std::string deep = std::string(5000, '(') + "1" + std::string(5000, ')');
  EXPECT_NE(error_of([&] { ChatTemplate::from_string("{{ " + deep + " }}"); }).find("nests deeper"),
            std::string::npos);
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  EXPECT_NE(error_of([&] { ChatTemplate::from_string(blocks); }).find("nests deeper"), std::string::npos);
  EXPECT_NE(error_of([] { ChatTemplate::from_string("{{ " + std::string(5000, '-') + "1 }}"); }).find("nests deeper"),
            std::string::npos);
  // A few levels are fine.
  EXPECT_EQ(ChatTemplate::from_string("{{ ((((1 + 2)))) * -(-3) }}").render(nlohmann::json::array(), true), "9");
}

TEST(ChatTemplateErrors, RaiseExceptionGivesTheTemplatesMessage) {
  const ChatTemplate chat = ChatTemplate::from_string(
      "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversation must start with a user') }}{% endif %}");
  const nlohmann::json messages = {{{"role", "assistant"}, {"content", "x"}}};
  EXPECT_EQ(error_of([&] { chat.render(messages, true); }), "Conversation must start with a user");
}

TEST(ChatTemplateErrors, EvaluationErrorsNameTheLine) {
  const ChatTemplate chat = ChatTemplate::from_string("ok\n{{ messages[0].content + 1 }}");
  const nlohmann::json messages = {{{"role", "user"}, {"content", "x"}}};
  const std::string message = error_of([&] { chat.render(messages, true); });
  EXPECT_NE(message.find("line 2"), std::string::npos) << message;
  EXPECT_NE(message.find("'str' and 'int'"), std::string::npos) << message;
  // An undefined value may be printed or tested, but not added to.
  const std::string undefined = error_of([&] { ChatTemplate::from_string("{{ nothing + 'x' }}").render(messages, true); });
  EXPECT_NE(undefined.find("'nothing' is undefined"), std::string::npos) << undefined;
}

TEST(ChatTemplateErrors, BadRenderArguments) {
  const ChatTemplate chat = ChatTemplate::from_string("x");
  EXPECT_NE(error_of([&] { chat.render(nlohmann::json::object(), true); }).find("JSON array"), std::string::npos);
  EXPECT_NE(error_of([&] { chat.render(nlohmann::json::array(), true, 5); }).find("JSON object"), std::string::npos);
}

TEST(ChatTemplateErrors, RangeIsBoundedAsTheSandboxBoundsIt) {
  EXPECT_NE(error_of([] { ChatTemplate::from_string("{{ range(200000) | length }}").render(nlohmann::json::array(), true); })
                .find("range() is too big"),
            std::string::npos);
}

TEST(ChatTemplateErrors, RunawayTemplatesStop) {
  const nlohmann::json none = nlohmann::json::array();
  EXPECT_NE(error_of([&] {
              ChatTemplate::from_string("{% for i in range(1001) %}{% for j in range(1000) %}{% endfor %}{% endfor %}")
                  .render(none, true);
            }).find("loop iterations"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ChatTemplate::from_string("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").render(none, true); })
                .find("recursed deeper"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ChatTemplate::from_string("{% for i in range(20) %}{{ 'x' * 5000000 }}{% endfor %}").render(none, true);
            }).find("output passed"),
            std::string::npos);
}

TEST(ChatTemplateLoader, MissingFilesAndTemplatesAreErrorsNamingThem) {
  test::TempDir dir;
  const std::string missing = error_of([&] { ChatTemplate::from_file(dir / "none.jinja", dir.path()); });
  EXPECT_NE(missing.find((dir / "none.jinja").string()), std::string::npos) << missing;
  EXPECT_NE(missing.find("does not exist"), std::string::npos) << missing;
  const std::string no_template = error_of([&] { ChatTemplate::load(dir.path()); });
  EXPECT_NE(no_template.find("has no chat template"), std::string::npos) << no_template;
  write_file(dir / "tokenizer_config.json", R"({"chat_template": "{% if %}"})");
  const std::string broken = error_of([&] { ChatTemplate::load(dir.path()); });
  EXPECT_NE(broken.find("tokenizer_config.json"), std::string::npos) << broken;
  write_file(dir / "tokenizer_config.json", "{not json");
  EXPECT_NE(error_of([&] { ChatTemplate::load(dir.path()); }).find("not valid JSON"), std::string::npos);
}

TEST(ChatTemplateLoader, ReadsTokensAndNamedTemplatesFromTheConfig) {
  test::TempDir dir;
  write_file(dir / "tokenizer_config.json", R"({
    "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
    "eos_token": "</s>",
    "chat_template": [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "{{ bos_token }}d{{ eos_token }}"}]
  })");
  const ChatTemplate chat = ChatTemplate::load(dir.path());
  EXPECT_EQ(chat.render(nlohmann::json::array(), true), "<s>d</s>");
  // A template file beside the config replaces the config's template, and keeps its tokens.
  write_file(dir / "chat_template.jinja", "file {{ eos_token }}\n");
  EXPECT_EQ(ChatTemplate::load(dir.path()).render(nlohmann::json::array(), true), "file </s>");
  write_file(dir / "other.jinja", "{{ bos_token }}other");
  EXPECT_EQ(ChatTemplate::from_file(dir / "other.jinja", dir.path()).render(nlohmann::json::array(), true), "<s>other");
  write_file(dir / "tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "t"}]})");
  fs::remove(dir / "chat_template.jinja");
  const std::string no_default = error_of([&] { ChatTemplate::load(dir.path()); });
  EXPECT_NE(no_default.find("no template named \"default\" (it has: tool_use)"), std::string::npos) << no_default;
}

TEST(ChatTemplateLoader, ProcessorChatTemplateJson) {
  test::TempDir dir;
  write_file(dir / "chat_template.json", R"({"chat_template": "json {{ messages | length }}"})");
  EXPECT_EQ(ChatTemplate::load(dir.path()).render(nlohmann::json::array(), true), "json 0");
}

// The fixture models carry their family's real template, so the server's tests see instruct-style models.
TEST(ChatTemplateLoader, FixtureModelsCarryTheirFamilysTemplate) {
  for (const std::string family : {"qwen3_moe", "qwen2_moe", "mixtral", "deepseek_v2", "deepseek_v3", "olmoe"}) {
    SCOPED_TRACE(family);
    const nlohmann::json config = read_json(kModels / family / "tokenizer_config.json");
    EXPECT_EQ(config.at("chat_template").get<std::string>(), read_file(kTemplates / (family + ".jinja")));
    const nlohmann::json messages = {{{"role", "user"}, {"content", "Hello"}}};
    const ChatTemplate from_model = ChatTemplate::load(kModels / family);
    const std::string rendered = from_model.render(messages, true);
    EXPECT_NE(rendered.find("Hello"), std::string::npos) << rendered;
  }
}

}  // namespace
}  // namespace moe
