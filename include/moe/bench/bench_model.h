#pragma once
// `moe bench --model DIR` (whole-model prefill and decode on the CPU) and `moe bench --write-model DIR`
// (the random-weight checkpoint it is usually run on). bench_model.cpp.

#include <cstdint>
#include <filesystem>

#include "moe/cpu/fast_experts.h"
#include "moe/layer/moe_layer.h"

namespace moe::cli {

struct ModelBenchArgs {
  std::filesystem::path model;
  int64_t prompt_tokens = 512, decode_tokens = 32;
  int repeats = 3;
  CpuExperts cpu_experts = CpuExperts::fast;
  quant::WeightFormat cpu_weights = quant::WeightFormat::bf16;
};

void run_model_bench(const ModelBenchArgs& args);

// Qwen3-MoE-shaped random BF16 checkpoint with `layers` decoder layers (~1.3 GB each) into `dir`.
void write_random_model(const std::filesystem::path& dir, int64_t layers);

}  // namespace moe::cli
