#include "quantize_calibration.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "moe/model/causal_lm.h"
#include "moe/model/model_config.h"
#include "moe/text/tokenizer.h"

namespace moe::engine {

namespace {

// Each (MoE layer, sequence, position): the chosen experts, sorted (routers may return them unsorted).
using RoutingKey = std::tuple<int64_t, int64_t, int64_t>;
using Routing = std::map<RoutingKey, std::vector<int32_t>>;

struct Run {
  Routing routing;
  std::vector<int32_t> greedy;  // argmax of every position's logits, prompts in order
};

// The original routers of every MoE layer, kept to build a model with the gate in its own dtype.
using Routers = std::map<int64_t, Tensor>;

model::ModelOptions cpu_options() {
  model::ModelOptions options;
  options.cpu_experts = CpuExperts::fast;
  options.cpu_weights = quant::WeightFormat::bf16;
  return options;
}

// A MoE block over the weights as given, on the fast CPU experts (what the model would make itself).
model::ModelOptions::MoeBlockFn make_block(const MoeConfig& config, MoeWeights weights) {
  auto layer = std::make_shared<MoeLayer>(
      config, std::move(weights), LayerOptions{.cpu_experts = CpuExperts::fast, .cpu_weights = quant::WeightFormat::bf16});
  return [layer](const Tensor& x) { return layer->forward(x); };
}

Run run_model(const std::filesystem::path& dir, const model::ModelOptions& options,
              const std::vector<std::vector<int32_t>>& prompts) {
  const std::unique_ptr<model::CausalLM> lm = model::CausalLM::load(dir, options);
  int64_t longest = 1;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  const auto cache = lm->new_cache(static_cast<int64_t>(prompts.size()), longest);
  Run run;
  const Tensor logits = lm->forward(prompts, *cache, false, [&](const model::RoutingEvent& e) {
    std::vector<int32_t> experts = e.experts;
    std::sort(experts.begin(), experts.end());
    run.routing[{e.layer, e.seq, e.pos}] = std::move(experts);
  });  // [tokens, V]
  const int64_t V = logits.size(1);
  for (int64_t r = 0; r < logits.size(0); ++r) {
    const float* row = logits.data_as<float>() + r * V;
    run.greedy.push_back(static_cast<int32_t>(std::max_element(row, row + V) - row));  // ties: the lowest id
  }
  return run;
}

}  // namespace

void calibrate(const QuantizeOptions& o, const std::filesystem::path& quantized, QuantizeReport& report) {
  const Tokenizer tokenizer = Tokenizer::load(o.model / "tokenizer.json");
  const int64_t max_positions = model::load_model_config(o.model).max_position_embeddings;
  const int64_t limit = max_positions > 0 ? std::min(o.max_prompt_tokens, max_positions) : o.max_prompt_tokens;
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& text : o.calibration.empty() ? kBuiltinCalibration : o.calibration) {
    std::vector<int32_t> ids = tokenizer.encode(text, true);
    if (static_cast<int64_t>(ids.size()) > limit) ids.resize(static_cast<size_t>(limit));
    if (ids.empty()) continue;
    report.calibration_tokens += static_cast<int64_t>(ids.size());
    prompts.push_back(std::move(ids));
  }
  MOE_CHECK(!prompts.empty(), "the calibration prompts are all empty: give at least one line of text");
  report.calibration_prompts = static_cast<int64_t>(prompts.size());

  if (o.progress) o.progress("calibrating: the original model");
  Routers routers;
  model::ModelOptions original = cpu_options();
  original.moe_block = [&](int64_t layer, const MoeConfig& config, MoeWeights weights) {
    routers[layer] = weights.router;
    return make_block(config, std::move(weights));
  };
  const Run want = run_model(o.model, original, prompts);
  if (o.progress) o.progress("calibrating: the quantised model");
  const Run got = run_model(quantized, cpu_options(), prompts);
  std::optional<Run> gate_kept;
  if (o.quantize_gate) {
    if (o.progress) o.progress("calibrating: the quantised experts with the gate in its own dtype");
    model::ModelOptions kept = cpu_options();
    kept.moe_block = [&](int64_t layer, const MoeConfig& config, MoeWeights weights) {
      weights.router = routers.at(layer);
      return make_block(config, std::move(weights));
    };
    gate_kept = run_model(quantized, kept, prompts);
  }

  std::map<int64_t, LayerRouting> layers;
  for (const auto& [key, experts] : want.routing) {
    LayerRouting& l = layers[std::get<0>(key)];
    l.layer = std::get<0>(key);
    ++l.decisions;
    l.flips += got.routing.at(key) != experts ? 1 : 0;
    if (gate_kept) l.flips_gate_kept = std::max<int64_t>(l.flips_gate_kept, 0) + (gate_kept->routing.at(key) != experts ? 1 : 0);
  }
  for (const auto& [layer, l] : layers) report.routing.push_back(l);
  report.greedy_positions = static_cast<int64_t>(want.greedy.size());
  for (size_t i = 0; i < want.greedy.size(); ++i) report.greedy_agree += want.greedy[i] == got.greedy[i] ? 1 : 0;
}

const std::vector<std::string> kBuiltinCalibration = {
    "The history of the city begins with a small fishing village on the river, where traders from the north "
    "stopped to exchange furs and salt for grain. Over three centuries it grew into a market town, then a port.",
    "To make bread, mix flour, water, salt and yeast, knead the dough for ten minutes, let it rise until it "
    "has doubled in size, shape it, let it rise again and bake it in a hot oven until the crust is brown.",
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n"
    "print([fibonacci(i) for i in range(10)])",
    "Question: A train leaves at 9:40 and arrives at 13:15. How long is the journey? Answer: The journey takes "
    "three hours and thirty-five minutes.",
    "Mixture-of-experts models route each token to a few of many expert networks, so that only a small part "
    "of the parameters is used for any one token while the model as a whole stays large.",
};

}  // namespace moe::engine
