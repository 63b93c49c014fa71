// `moe bench --random-model NAME|SHAPE.json --backend cuda`: a full-depth model of a shape on random weights
// made in GPU memory, timed as `--model DIR` is (bench_model_cuda.cpp). No checkpoint is written (a 48-layer
// Qwen3-30B-A3B is 61 GB): the loader reads a generated checkpoint (Checkpoint::generated over
// checkpoint_layout's names) whose tensors a seeded fill kernel makes on the device, one at a time as the
// loader asks, so that besides the model only one layer's experts are ever made twice.
// Scales: every linear weight uniform with stddev 1/sqrt(fan_in) (its last dimension), so that each
// projection keeps its input's scale and the residual stream grows only as the sum of 2 · layers unit-scale
// deltas (finite through 48 layers in bf16); norm weights 1, biases 0, the routers (fp32, read on the host by
// the MoE layer's upload) 1/sqrt(hidden) too, which routes about uniformly.
#include <fmt/core.h>

#include <chrono>
#include <cmath>

#include "bench/bench_model.h"
#include "cuda/decoder_kernels.h"
#include "cuda/device_tensor.h"
#include "engine/cuda_model.h"
#include "model/checkpoint_layout.h"
#include "moe/layer/random_weights.h"

namespace moe::cli {

namespace {

// FNV-1a: a tensor's seed from its name, the same on every machine.
uint64_t name_hash(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

bool ends_with(const std::string& name, const char* suffix) {
  return name.ends_with(suffix);
}

Tensor make_random_tensor(const std::string& name, const std::vector<int64_t>& shape) {
  const uint64_t seed = name_hash(name);
  if (ends_with(name, "norm.weight")) {  // input/post/final norms, q/k norms, MLA's latent norms
    Tensor t = Tensor::empty(DType::F32, shape);
    std::fill_n(t.data_as<float>(), t.numel(), 1.0f);
    return t;
  }
  if (ends_with(name, ".bias")) return Tensor::zeros(DType::F32, shape);
  if (ends_with(name, ".gate.e_score_correction_bias")) return Tensor::zeros(DType::F32, shape);
  const float stddev = 1.0f / std::sqrt(float(shape.back()));
  if (ends_with(name, ".mlp.gate.weight") || ends_with(name, ".shared_expert_gate.weight"))
    return random_tensor(shape, stddev, seed, DType::F32);
  Tensor t = cuda::device_empty(DType::BF16, shape, nullptr);
  cuda::fill_uniform(static_cast<cuda::bf16*>(t.data()), t.numel(), stddev, seed, nullptr);
  return t;
}

}  // namespace

void run_random_model_bench_cuda(const ModelBenchArgs& a, const model::ModelConfig& config,
                                 const std::string& label) {
  auto shapes = model::checkpoint_layout(config, model::ExpertTensors::fused);
  const double dense_bytes = dense_weight_bytes(config, shapes);
  double total = 0;
  for (const auto& [name, shape] : shapes) {
    double n = 1;
    for (const int64_t d : shape) n *= double(d);
    total += n;
  }
  const auto load_start = std::chrono::steady_clock::now();
  model::ForwardTimes parts;
  const auto lm = engine::load_cuda_causal_lm(
      config, Checkpoint::generated("random " + label, std::move(shapes), make_random_tensor),
      cuda_bench_options(a, &parts));
  fmt::print("built {} ({}, {} layers, {:.2f} B parameters, random bf16) on the GPU in {:.1f} s\n", label,
             config.model_type, config.num_layers, total / 1e9,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count());
  time_model_cuda(*lm, config, dense_bytes, a, parts);
}

}  // namespace moe::cli
