#pragma once
// The transformers fixtures under tests/data/models/<family>/ (scripts/device/make_fixtures.py): per
// prompt its ids, the greedy continuation, the prefill routing of every MoE layer and the last
// `logit_positions` prompt logits (reference.safetensors, F32). Helpers to run a CausalLM on them.

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "moe/model/causal_lm.h"

namespace moe::test {

struct FixtureRouting {
  std::vector<std::vector<int32_t>> experts;  // [T][k]
  std::vector<std::vector<float>> weights;    // [T][k]
};

struct FixtureCase {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<int32_t> generated;
  std::map<int64_t, FixtureRouting> routing;  // decoder layer -> prefill routing
  Tensor logits;                              // [logit_positions, V] F32: the last prompt positions
};

struct Fixture {
  std::string family;
  std::filesystem::path dir;
  int64_t max_new_tokens = 0;
  std::vector<int32_t> eos;
  std::vector<FixtureCase> cases;
};

const std::vector<std::string>& fixture_families();
std::filesystem::path fixture_dir(const std::string& family);
Fixture load_fixture(const std::string& family);

// ||a - b||₂ / ||b||₂ over n values: the normwise relative error of one logits row.
double row_rel_error(const float* a, const float* b, int64_t n);

// The first index of the largest value (torch.argmax's choice on ties).
int32_t argmax(const float* row, int64_t n);

// One prompt's prefill: the logits of every position and the routing events of every MoE layer.
struct Prefill {
  Tensor logits;                                                // [n, V]
  std::map<int64_t, std::vector<model::RoutingEvent>> routing;  // layer -> events in token order
};
Prefill prefill(model::CausalLM& lm, const std::vector<int32_t>& ids);

// Greedy decoding as transformers' generate(do_sample=False): prefill, then one token per step through the
// KV cache until max_new tokens or an eos (kept in the output).
std::vector<int32_t> greedy(model::CausalLM& lm, const std::vector<int32_t>& prompt, int64_t max_new,
                            const std::vector<int32_t>& eos);

}  // namespace moe::test
