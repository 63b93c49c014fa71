#pragma once
// `moe bench --model DIR` (whole-model prefill and decode on the CPU: bench_model.cpp; on the GPU:
// bench_model_cuda.cpp) and `moe bench --write-model DIR` (the random-weight checkpoint it is usually run on).

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cpu/fast_experts.h"
#include "moe/layer/moe_layer.h"
#include "moe/model/causal_lm.h"
#include "moe/model/model_config.h"

namespace moe::cli {

struct ModelBenchArgs {
  std::filesystem::path model;
  int64_t prompt_tokens = 512, decode_tokens = 32;
  int repeats = 3;
  CpuExperts cpu_experts = CpuExperts::fast;
  quant::WeightFormat cpu_weights = quant::WeightFormat::bf16;
  std::vector<int64_t> batches = {1};  // the GPU's: sequences per step, one row each
  bool enforce_eager = false;          // the GPU's: no CUDA graphs
};

void run_model_bench(const ModelBenchArgs& args);
// The whole decoder on the GPU (engine/cuda_model.h): per batch size, prefill and decode tokens/s after a
// warm-up run, and the decode roofline (the bytes a step must read / the device copy bandwidth measured in
// the same run). Throws moe::Error in a build without CUDA or without a GPU.
void run_model_bench_cuda(const ModelBenchArgs& args);
// The same on random weights of a model shape made in GPU memory (bench_random_model_cuda.cpp), no
// checkpoint on disk.
void run_random_model_bench_cuda(const ModelBenchArgs& args, const model::ModelConfig& config,
                                 const std::string& label);
// The model of such a run, for a caller that serves it (moe serve --random-model): the whole decoder on the
// GPU over seeded random weights of `config`'s shape. Throws moe::Error as load_cuda_causal_lm does.
std::unique_ptr<model::CausalLM> load_random_model_cuda(const model::ModelConfig& config, const std::string& label,
                                                        const model::ModelOptions& options);

// The pieces both GPU runs share (bench_model_cuda.cpp): the model options for the batches asked for, the
// bf16 bytes of every weight a decode step reads in full (all but the routed experts, the routers and an
// untied embedding) from the checkpoint's shapes, and the timed runs with their table, then a profiling
// pass per batch size with the time of each part.
// `parts` (which must outlive the model) takes the times of the parts in the profiling pass.
model::ModelOptions cuda_bench_options(const ModelBenchArgs& args, model::ForwardTimes* parts);
double dense_weight_bytes(const model::ModelConfig& config,
                          const std::map<std::string, std::vector<int64_t>>& shapes);
void time_model_cuda(model::CausalLM& lm, const model::ModelConfig& config, double dense_bytes,
                     const ModelBenchArgs& args, model::ForwardTimes& parts);

// Qwen3-MoE-shaped random BF16 checkpoint with `layers` decoder layers (~1.3 GB each) into the existing
// directory `dir`; returns what it wrote, in words.
std::string write_random_model(const std::filesystem::path& dir, int64_t layers);

}  // namespace moe::cli
