#pragma once
// `moe quantize`'s work: a float HuggingFace checkpoint rewritten with its experts in fp8 (e4m3, block
// scales) or int4 (AWQ GEMM layout), and a report of what that costs.
//
// Quantised: every routed expert (`...experts.{e}.gate_proj|up_proj|down_proj|w1|w3|w2.weight`, and the
// fused `experts.gate_up_proj` / `experts.down_proj`, written back under the per-expert names) and the
// shared experts (`shared_expert(s).*.weight`); with quantize_gate also the router (`mlp.gate.weight`,
// `block_sparse_moe.gate.weight`). Everything else (embeddings, attention, norms, dense MLPs, lm_head, the
// router by default, the e_score_correction_bias, the Qwen2 shared-expert gate) is carried over as stored,
// and so are the directory's other files (tokenizer, generation config, chat template). config.json gains
// the quantization_config of quant/quant_scheme.h, with modules_to_not_convert listing the linear modules
// left in their dtype (as transformers matches them: numbers replaced by '*').
//
// The report: per layer and expert the relative error of the dequantised weights against the stored ones
// (Frobenius norm over gate, up and down together); then, on calibration prompts run through the original
// and the quantised model on the CPU (fast bf16 experts, teacher-forced: both see the same tokens), the
// top-k flip rate (share of (token, MoE layer) whose expert set changes) and the greedy next-token agreement
// (share of positions whose argmax token is the same). With quantize_gate the flip rate is also measured
// with the quantised experts but the gate in its own dtype, so the gate's share of the flips shows.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "moe/quant/quant_scheme.h"

namespace moe::engine {

struct QuantizeOptions {
  std::filesystem::path model;  // a float checkpoint directory (config.json + safetensors)
  std::filesystem::path out;    // created; must not exist (or be empty) and must not lie inside `model`
  quant::QuantScheme scheme;    // fp8_block or awq_int4, with their block / group size
  bool quantize_gate = false;
  std::vector<std::string> calibration;  // prompts; empty: kBuiltinCalibration
  int64_t max_prompt_tokens = 512;       // each prompt is cut to this many tokens
  uint64_t max_shard_bytes = uint64_t{4} << 30;
  std::function<void(const std::string&)> progress;  // short lines ("layer 3/48"); may be empty
};

// One quantised expert's weight error: ||dequant(q(W)) - W||_F / ||W||_F over its matrices.
struct ExpertError {
  int64_t layer = 0;
  int64_t expert = 0;  // -1: the shared expert(s), -2: the router (quantize_gate)
  double rel_error = 0;
};

struct LayerRouting {
  int64_t layer = 0;
  int64_t decisions = 0;  // tokens routed in this layer
  int64_t flips = 0;      // of them, those whose expert set changed
  int64_t flips_gate_kept = -1;  // the same with the gate in its own dtype; -1 unless quantize_gate
};

struct QuantizeReport {
  std::string method;  // "fp8" or "int4"
  std::vector<ExpertError> errors;   // per layer, then expert
  int64_t quantized_tensors = 0;     // source tensors quantised
  int64_t carried_tensors = 0;       // source tensors carried over as stored
  int64_t source_bytes = 0;          // all tensors of the source as stored
  int64_t written_bytes = 0;         // all tensors written
  int64_t routed_expert_bytes = 0;   // the routed experts as written (values + scales): what a GPU holds
  int64_t calibration_prompts = 0;
  int64_t calibration_tokens = 0;
  std::vector<LayerRouting> routing;  // per MoE layer
  int64_t greedy_positions = 0, greedy_agree = 0;

  double flip_rate() const;             // flips / decisions over every layer
  double flip_rate_gate_kept() const;   // the same with the gate kept; -1 unless quantize_gate
  double greedy_agreement() const;      // greedy_agree / greedy_positions
};

// Built-in calibration text: a few short prompts of plain English prose and code.
extern const std::vector<std::string> kBuiltinCalibration;

// Quantises, writes options.out (into a temporary sibling directory first, renamed on success, so a
// failure leaves no half-written checkpoint), then calibrates. Throws moe::Error naming the problem: an
// --out inside the model, a checkpoint already quantised, a size the format cannot pack.
QuantizeReport quantize_checkpoint(const QuantizeOptions& options);

// Bytes of a checkpoint's tensors as stored (headers only): the routed experts (their values and scales,
// by the names above) and everything. What `moe plan --model` sets beside its estimate.
struct StoredWeightBytes {
  int64_t routed_experts = 0;
  int64_t total = 0;
};
StoredWeightBytes stored_weight_bytes(const std::filesystem::path& model);

// The report as JSON (what --report writes).
nlohmann::json quantize_report_json(const QuantizeReport& report);

}  // namespace moe::engine
