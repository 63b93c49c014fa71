#include "moe/layer/moe_weights.h"

#include <string>

#include "quant/linear_weight.h"

namespace moe {

namespace {

class BlockReader {
 public:
  BlockReader(const Checkpoint& checkpoint, const std::string& prefix, const quant::QuantScheme& scheme)
      : checkpoint_(checkpoint), prefix_(prefix), scheme_(scheme) {}

  bool contains(const std::string& name) const { return quant::has_linear_weight(checkpoint_, prefix_ + name); }

  // The tensor `prefix + name`, checked against `shape`; `why` says where the shape comes from.
  Tensor get(const std::string& name, const std::vector<int64_t>& shape, const std::string& why) const {
    const std::string full = prefix_ + name;
    MOE_CHECK(quant::has_linear_weight(checkpoint_, full), "tensor '{}' not found in {}{}", full,
              checkpoint_.path().string(), prefix_hint(name));
    Tensor t = quant::load_linear_weight(checkpoint_, full, scheme_);  // fp8 / int4 weights dequantised to BF16
    MOE_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16,
              "tensor '{}' is {}: weights must be F32, BF16 or F16", full, dtype_name(t.dtype()));
    MOE_CHECK(t.shape() == shape, "tensor '{}' has shape {}, expected {} ({})", full, t.shape_string(),
              shape_to_string(shape), why);
    return t;
  }

 private:
  // Why `name` is missing when a likely mistake explains it: a prefix without its trailing dot, or a whole
  // model's checkpoint read without a block prefix.
  std::string prefix_hint(const std::string& name) const {
    if (!prefix_.empty() && !prefix_.ends_with('.') && checkpoint_.contains(prefix_ + "." + name))
      return fmt::format(" (the block prefix '{}' lacks its trailing dot: '{}.')", prefix_, prefix_);
    if (!prefix_.empty()) return fmt::format(" (is the block prefix '{}' right?)", prefix_);
    for (const std::string& other : checkpoint_.names())
      if (other.ends_with("." + name))
        return fmt::format(" (the checkpoint holds whole layers: give the block prefix, e.g. '{}')",
                           other.substr(0, other.size() - name.size()));
    return "";
  }

  const Checkpoint& checkpoint_;
  const std::string& prefix_;
  const quant::QuantScheme& scheme_;
};

SwigluWeights read_mlp(const BlockReader& r, const std::string& base, const char* gate, const char* up,
                       const char* down, int64_t H, int64_t I, const std::string& why) {
  const std::string sizes = fmt::format("{} {}, hidden_size {}", why, I, H);
  return SwigluWeights{.gate = r.get(base + gate + ".weight", {I, H}, sizes),
                       .up = r.get(base + up + ".weight", {I, H}, sizes),
                       .down = r.get(base + down + ".weight", {H, I}, sizes)};
}

}  // namespace

MoeWeights load_moe_weights(const Checkpoint& checkpoint, const std::string& prefix, const MoeConfig& config) {
  const BlockReader r(checkpoint, prefix, config.quant);
  const int64_t H = config.hidden_size, I = config.expert_intermediate_size, E = config.router.n_experts;
  MoeWeights w;
  w.router = r.get("gate.weight", {E, H}, fmt::format("{} experts, hidden_size {}", E, H));
  if (config.router_has_correction_bias) {
    w.correction_bias = r.get("gate.e_score_correction_bias", {E}, fmt::format("{} experts", E)).to_f32();
  }

  const std::string expert_why = config.intermediate_key;
  if (r.contains("experts.gate_up_proj")) {
    // transformers 5 fused layout: gate rows then up rows of each expert.
    const Tensor gate_up = r.get("experts.gate_up_proj", {E, 2 * I, H}, expert_why);
    const Tensor down = r.get("experts.down_proj", {E, H, I}, expert_why);
    for (int64_t e = 0; e < E; ++e) {
      const Tensor both = gate_up.select(e);
      w.experts.push_back({.gate = both.narrow(0, 0, I), .up = both.narrow(0, I, I), .down = down.select(e)});
    }
  } else {
    const bool mixtral = config.naming == ExpertNaming::w1_w3_w2;
    for (int64_t e = 0; e < E; ++e)
      w.experts.push_back(read_mlp(r, fmt::format("experts.{}.", e), mixtral ? "w1" : "gate_proj",
                                   mixtral ? "w3" : "up_proj", mixtral ? "w2" : "down_proj", H, I, expert_why));
  }

  const int64_t S = config.shared_intermediate_size;
  if (config.shared == SharedExpertKind::plain) {
    w.shared = read_mlp(r, "shared_experts.", "gate_proj", "up_proj", "down_proj", H, S,
                        "n_shared_experts x moe_intermediate_size =");
  } else if (config.shared == SharedExpertKind::sigmoid_gated) {
    w.shared = read_mlp(r, "shared_expert.", "gate_proj", "up_proj", "down_proj", H, S,
                        "shared_expert_intermediate_size");
    w.shared_gate = r.get("shared_expert_gate.weight", {1, H}, fmt::format("hidden_size {}", H));
  }
  return w;
}

}  // namespace moe
