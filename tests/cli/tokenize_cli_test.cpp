// End-to-end tests of `moe tokenize`: the binary's ids and text equal the `tokenizers` library's on the
// fixtures, and bad input exits with code 2 and a one-line "error: ...".
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "run_command.h"
#include "temp_dir.h"

namespace moe::test {
namespace {

namespace fs = std::filesystem;
const fs::path kData = fs::path(MOE_TEST_DATA) / "tokenizers";

struct Output {
  CommandResult result;
  std::string out;
};

// Runs `moe tokenize ARGS` and keeps its stdout.
Output tokenize(const TempDir& dir, const std::string& args) {
  const fs::path out_file = dir / "stdout.txt";
  Output o;
  o.result = run_command(dir.path(), "(" MOE_BINARY " tokenize " + args + " >" + out_file.string() + ")");
  std::ifstream in(out_file);
  std::stringstream text;
  text << in.rdbuf();
  o.out = text.str();
  return o;
}

TEST(TokenizeCli, IdsAndTextMatchTheLibrary) {
  TempDir dir;
  for (const std::string name : {"qwen2", "llama"}) {
    std::ifstream in(kData / name / "cases.json");
    const auto cases = nlohmann::json::parse(in).at("cases");
    for (const auto& c : cases) {
      const auto text = c.at("text").get<std::string>();
      if (text.empty()) continue;
      SCOPED_TRACE(name + ": \"" + text + "\"");
      const auto ids = c.at("ids").get<std::vector<int32_t>>();
      const auto encoded = tokenize(dir, "--model " + (kData / name).string() + " --json --text " + shell_quote(text));
      ASSERT_EQ(encoded.result.exit_code, 0) << encoded.result.err;
      EXPECT_EQ(nlohmann::json::parse(encoded.out).get<std::vector<int32_t>>(), ids);

      std::string list;
      for (int32_t id : ids) {
        if (!list.empty()) list += ',';
        list += std::to_string(id);
      }
      const auto decoded =
          tokenize(dir, "--tokenizer " + (kData / name / "tokenizer.json").string() + " --json --decode " + list);
      ASSERT_EQ(decoded.result.exit_code, 0) << decoded.result.err;
      EXPECT_EQ(nlohmann::json::parse(decoded.out).get<std::string>(), c.at("decoded").get<std::string>());
    }
  }
}

TEST(TokenizeCli, PrintsIdsSpaceSeparated) {
  TempDir dir;
  const auto o = tokenize(dir, "--model " + (kData / "qwen2").string() + " --text '<|im_start|><|im_end|>'");
  ASSERT_EQ(o.result.exit_code, 0) << o.result.err;
  EXPECT_EQ(o.out, "1 2\n");
}

TEST(TokenizeCli, BadInputExitsWithTwo) {
  TempDir dir;
  const std::string model = " --model " + (kData / "qwen2").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--model " + (dir / "missing").string() + " --text hi", "tokenizer.json' does not exist"},
      {model + " --decode 1,x", "comma-separated token ids"},
      {model + " --decode 99999", "not in the vocabulary"},
      {model, "needs --text TEXT or --decode"},
      {"--text hi", "needs --model DIR or --tokenizer FILE"},
  };
  for (const auto& [args, message] : cases) {
    const auto o = tokenize(dir, args);
    EXPECT_EQ(o.result.exit_code, 2) << args;
    EXPECT_NE(o.result.err.find(message), std::string::npos) << args << " -> " << o.result.err;
    EXPECT_TRUE(o.result.err.starts_with("error: ")) << o.result.err;
  }
}

}  // namespace
}  // namespace moe::test
