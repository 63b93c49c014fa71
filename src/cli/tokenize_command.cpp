// moe tokenize: text -> ids or ids -> text with a model's tokenizer.json, as llama-tokenize does.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "id_list.h"
#include "moe/core/check.h"
#include "moe/text/tokenizer.h"

namespace moe::cli {

namespace {

struct TokenizeOptions {
  std::string model_dir;
  std::string tokenizer_file;
  std::string text;
  std::string decode_ids;
  bool json = false;
  bool no_special_tokens = false;
  bool skip_special_tokens = false;
};

void run_tokenize(const TokenizeOptions& o) {
  const std::filesystem::path path = o.tokenizer_file.empty() ? std::filesystem::path(o.model_dir) / "tokenizer.json"
                                                               : std::filesystem::path(o.tokenizer_file);
  const Tokenizer tokenizer = Tokenizer::load(path);
  if (!o.decode_ids.empty()) {
    const std::string text = tokenizer.decode(parse_id_list(o.decode_ids, "--decode"), o.skip_special_tokens);
    fmt::print("{}\n", o.json ? nlohmann::json(text).dump() : text);
    return;
  }
  const std::vector<int32_t> ids = tokenizer.encode(o.text, !o.no_special_tokens);
  if (o.json) fmt::print("[{}]\n", fmt::join(ids, ", "));
  else fmt::print("{}\n", fmt::join(ids, " "));
}

}  // namespace

Run add_tokenize_command(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* sub = app.add_subcommand("tokenize", "Turn text into token ids, or ids into text, with a tokenizer.json");
  auto* model = sub->add_option("--model", options->model_dir, "Model directory holding tokenizer.json");
  auto* file = sub->add_option("--tokenizer", options->tokenizer_file, "A tokenizer.json file");
  model->excludes(file);
  auto* text = sub->add_option("--text", options->text, "Text to encode (prints its ids)");
  auto* decode = sub->add_option("--decode", options->decode_ids, "Comma-separated ids to decode (prints the text)");
  text->excludes(decode);
  sub->add_flag("--json", options->json, "Print ids as a JSON list, or the text as a JSON string");
  // NOTE: the default is transformers' (and moe generate --prompt's), so that ids printed here and given to
  // generate --prompt-ids are the ids generate --prompt runs.
  auto* no_special = sub->add_flag("--no-special-tokens", options->no_special_tokens,
                                   "Encode without the post-processor's special tokens (e.g. Mixtral's leading <s>), "
                                   "which are added by default, as transformers and moe generate --prompt do");
  auto* skip_special =
      sub->add_flag("--skip-special-tokens", options->skip_special_tokens, "Leave special tokens out when decoding");
  // Each flag works in one direction only: given with the other it would do nothing.
  no_special->needs(text);
  skip_special->needs(decode);
  return [options, model, file, text, decode] {
    MOE_CHECK(*model || *file, "moe tokenize needs --model DIR or --tokenizer FILE");
    MOE_CHECK(*text || *decode, "moe tokenize needs --text TEXT or --decode 1,2,3");
    run_tokenize(*options);
  };
}

}  // namespace moe::cli
