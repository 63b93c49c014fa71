#include "model_fixture.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "moe/core/safetensors.h"

namespace moe::test {

const std::vector<std::string>& fixture_families() {
  static const std::vector<std::string> families = {"mixtral", "qwen2_moe", "qwen3_moe",
                                                    "olmoe",   "deepseek_v2", "deepseek_v3"};
  return families;
}

std::filesystem::path fixture_dir(const std::string& family) {
  // MOE_TEST_DATA in the environment overrides the source tree's path (a build run on another machine).
  const char* data = std::getenv("MOE_TEST_DATA");
  return std::filesystem::path(data && *data ? data : MOE_TEST_DATA) / "models" / family;
}

Fixture load_fixture(const std::string& family) {
  Fixture f;
  f.family = family;
  f.dir = fixture_dir(family);
  std::ifstream in(f.dir / "reference.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  f.max_new_tokens = ref.at("max_new_tokens").get<int64_t>();
  if (ref.at("eos_token_id").is_number_integer()) f.eos = {ref.at("eos_token_id").get<int32_t>()};
  else if (ref.at("eos_token_id").is_array()) f.eos = ref.at("eos_token_id").get<std::vector<int32_t>>();
  const SafetensorsFile logits = SafetensorsFile::open(f.dir / "reference.safetensors");
  for (size_t p = 0; p < ref.at("cases").size(); ++p) {
    const auto& c = ref.at("cases")[p];
    FixtureCase fc{.text = c.at("text").get<std::string>(),
                   .ids = c.at("ids").get<std::vector<int32_t>>(),
                   .generated = c.at("generated_ids").get<std::vector<int32_t>>(),
                   .routing = {},
                   .logits = logits.get("logits." + std::to_string(p)).to_f32()};
    for (const auto& [layer, r] : c.at("routing").items())
      fc.routing[std::stoll(layer)] = {.experts = r.at("experts").get<std::vector<std::vector<int32_t>>>(),
                                       .weights = r.at("weights").get<std::vector<std::vector<float>>>()};
    f.cases.push_back(std::move(fc));
  }
  return f;
}

double row_rel_error(const float* a, const float* b, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    norm += double{b[i]} * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

std::vector<int32_t> greedy(model::CausalLM& lm, const std::vector<int32_t>& prompt, int64_t max_new,
                            const std::vector<int32_t>& eos) {
  const int64_t V = lm.info().vocab_size;
  auto cache = lm.new_cache(1, static_cast<int64_t>(prompt.size()) + max_new);
  std::vector<std::vector<int32_t>> step = {prompt};
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < max_new) {
    const Tensor logits = lm.forward(step, *cache, /*last_only=*/true);  // [1, V]
    const int32_t next = argmax(logits.data_as<float>(), V);
    out.push_back(next);
    if (std::find(eos.begin(), eos.end(), next) != eos.end()) break;
    step = {{next}};
  }
  return out;
}

Prefill prefill(model::CausalLM& lm, const std::vector<int32_t>& ids) {
  Prefill p;
  auto cache = lm.new_cache(1, static_cast<int64_t>(ids.size()));
  const std::vector<std::vector<int32_t>> batch = {ids};
  p.logits = lm.forward(batch, *cache, /*last_only=*/false,
                        [&](const model::RoutingEvent& e) { p.routing[e.layer].push_back(e); });
  return p;
}

}  // namespace moe::test
