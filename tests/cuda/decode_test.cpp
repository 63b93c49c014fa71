// The fused decode path (decode.cu) through the CUDA layer (a MoeLayer of the CUDA stages), against the CPU
// layer (the oracle): every routing method (softmax, grouped greedy, DeepSeek-V3's grouped sigmoid + bias,
// top-k-then-softmax), shared experts plain and sigmoid-gated, 1..8 tokens, sizes that split rows into
// several segments; the same choices and weights as the CPU router, every output written, the load counters,
// and graph replays on fresh inputs equal to eager runs (which also proves the grid barrier resets between
// launches).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "device_layer.h"
#include "graph_replay.h"
#include "cuda/captured_graph.h"
#include "cuda/ops.h"
#include "moe/layer/moe_layer.h"
#include "moe/layer/random_weights.h"
#include "scoped_env.h"
#include "test_random.h"

namespace moe::cuda {
namespace {

// MOE_DECODE_MAX_TOKENS for the scope of a test (the layer reads it when it is built).
test::ScopedEnv decode_limit(int64_t tokens) {
  return test::ScopedEnv("MOE_DECODE_MAX_TOKENS", std::to_string(tokens));
}

// Runs the CUDA layer (fused decode path) and the CPU layer on the same bf16 input and checks routing,
// outputs (normwise relative error) and the load counters.
void expect_decode_matches_cpu(const MoeConfig& config, const MoeWeights& weights, test::TestRng& rng, int64_t T,
                               const std::string& what) {
  SCOPED_TRACE(what + " T " + std::to_string(T));
  const int64_t H = config.hidden_size, k = config.router.top_k;
  const int64_t gate_rows = config.router.n_experts + (config.shared == SharedExpertKind::sigmoid_gated ? 1 : 0);
  ASSERT_GE(decode_token_limit(config.router, H, gate_rows), T) << "the fused decode path must take this batch";
  const Tensor xb = rng.normal_tensor({T, H}, 1.0f, DType::BF16);
  MoeLayer cpu_layer(config, weights);
  const LayerOutput want = cpu_layer.forward(xb.to_f32());

  MoeLayer gpu = test::cuda_layer(config, weights, {.max_tokens = T});
  test::Device<uint16_t> d_x(std::vector<uint16_t>(xb.data_as<uint16_t>(), xb.data_as<uint16_t>() + T * H));
  test::Device<float> d_out(T * H), d_weights(T * k);
  test::Device<int32_t> d_ids(T * k);
  MOE_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, T * H * sizeof(float)));  // NaN: unwritten outputs show
  test::forward_on_device(gpu, d_x.get(), T, d_out.get(), d_ids.get(), d_weights.get(), nullptr);
  const auto out = d_out.host();
  const auto ids = d_ids.host();
  const auto topk_weights = d_weights.host();
  const LoadCounts counts = gpu.read_counts(Stream::cuda(nullptr));

  for (int64_t i = 0; i < T * k; ++i) {
    ASSERT_EQ(ids[i], want.topk.ids.data_as<int32_t>()[i]) << "token " << i / k << " choice " << i % k;
    const float w = want.topk.weights.data_as<float>()[i];
    EXPECT_NEAR(topk_weights[i], w, 1e-5 * std::max(1.0f, std::fabs(w))) << "token " << i / k << " choice " << i % k;
  }
  EXPECT_LE(test::max_relative_error(out, want.hidden_states), 1e-2);  // infinite where an output is unwritten
  EXPECT_EQ(counts.tokens_per_expert, want.stats.tokens_per_expert);
  EXPECT_EQ(counts.dropped_per_expert, want.stats.dropped_per_expert);
}

TEST(CudaDecode, EveryRoutingMethodMatchesTheCpuLayer) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  const test::ScopedEnv limit = decode_limit(8);
  // mixtral: softmax top-k; qwen2_moe: + sigmoid-gated shared expert; qwen3_moe: normalised top-k; olmoe;
  // deepseek_v2: group-limited greedy + shared; deepseek_v3: grouped sigmoid + bias (noaux_tc) + shared.
  for (const char* type : {"mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3", "topk_softmax"})
    for (int64_t T : {1, 2, 3, 4, 6, 8}) {
      const bool gpt_oss = std::string(type) == "topk_softmax";
      MoeConfig config = parse_moe_config(test::cuda_case_config(gpt_oss ? "mixtral" : type, 256, 128, 64, 6));
      if (gpt_oss) config.router.method = routing::RoutingMethod::topk_softmax;
      MoeWeights weights = random_moe_weights(config, rng.engine()(), DType::BF16, 4.0f);
      expect_decode_matches_cpu(config, weights, rng, T, type);
    }
}

// Rows longer than one task (H split into segments in gate+up, I and the shared S in down, lanes left idle
// at a segment's end), a shared expert wider than the routed ones, and DeepSeek-V3's 256 experts in 8 groups.
TEST(CudaDecode, SegmentedRowsAndLargeRouters) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  const test::ScopedEnv limit = decode_limit(8);
  struct Case {
    const char* type;
    int64_t H, I;
    int E, k;
  };
  for (Case c : {Case{"deepseek_v3", 2304, 1088, 32, 4}, Case{"qwen2_moe", 4608, 192, 16, 2},
                 Case{"deepseek_v3", 512, 64, 256, 8}, Case{"mixtral", 2048, 2112, 8, 2}}) {
    const MoeConfig config = parse_moe_config(test::cuda_case_config(c.type, c.H, c.I, c.E, c.k));
    const MoeWeights weights = random_moe_weights(config, rng.engine()(), DType::BF16, 4.0f);
    for (int64_t T : {1, 4, 7})
      expect_decode_matches_cpu(config, weights, rng, T, std::string(c.type) + " H " + std::to_string(c.H));
  }
}

TEST(CudaDecode, GraphReplayOnNewInputs) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  const test::ScopedEnv limit = decode_limit(4);
  const MoeConfig config = parse_moe_config(test::cuda_case_config("deepseek_v3", 1024, 256, 64, 6));
  const MoeWeights weights = random_moe_weights(config, rng.engine()(), DType::BF16, 4.0f);
  for (int64_t T : {1, 3}) {
    SCOPED_TRACE("T " + std::to_string(T));
    ASSERT_GE(decode_token_limit(config.router, config.hidden_size, config.router.n_experts), T);
    test::expect_graph_replays_match(config, weights, T, rng);
  }
}

// The trace stamps of one launch: per block in phase order, and no block past a grid barrier before every
// block has reached it.
TEST(CudaDecode, GridBarriersOrderThePhases) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  const test::ScopedEnv limit = decode_limit(2);
  const MoeConfig config = parse_moe_config(test::cuda_case_config("qwen3_moe", 512, 128, 32, 4));
  const MoeWeights weights = random_moe_weights(config, rng.engine()(), DType::BF16, 4.0f);
  decode_trace(true);
  expect_decode_matches_cpu(config, weights, rng, 2, "traced");
  const std::vector<uint64_t> stamps = decode_trace_read();
  decode_trace(false);
  const size_t blocks = stamps.size() / kDecodeTracePoints;
  ASSERT_GT(blocks, 0u);
  auto at = [&](size_t b, int point) { return stamps[b * kDecodeTracePoints + point]; };
  for (int barrier : {2, 7}) {  // stamps 2 and 7 are taken before the barriers, 3 and 8 after
    uint64_t last_arrival = 0, first_departure = ~uint64_t{0};
    for (size_t b = 0; b < blocks; ++b) {
      last_arrival = std::max(last_arrival, at(b, barrier));
      first_departure = std::min(first_departure, at(b, barrier + 1));
    }
    EXPECT_GE(first_departure, last_arrival) << "barrier after stamp " << barrier;
  }
  for (size_t b = 0; b < blocks; ++b)
    for (int point = 1; point < kDecodeTracePoints; ++point) EXPECT_GE(at(b, point), at(b, point - 1)) << b;
}

// Not a test: a measurement harness for the device scripts (run with --gtest_also_run_disabled_tests). Times
// graph replays of the fused path on the bench shapes over 8 rotating inputs, then prints where one
// launch spends its time: per phase boundary, the median and the latest block, from the first entry.
TEST(CudaDecode, DISABLED_PhaseTimesOnBenchShapes) {
  MOE_SKIP_WITHOUT_GPU();
  const test::ScopedEnv limit = decode_limit(8);
  struct Shape {
    const char* name;
    const char* type;
    int64_t H, I;
    int E, k;
  };
  for (Shape sh : {Shape{"qwen3-30b-a3b", "qwen3_moe", 2048, 768, 128, 8},
                   Shape{"deepseek-v3", "deepseek_v3", 7168, 2048, 256, 8},
                   Shape{"mixtral-8x7b", "mixtral", 4096, 14336, 8, 2}}) {
    MoeConfig config = parse_moe_config(test::cuda_case_config(sh.type, sh.H, sh.I, sh.E, sh.k));
    config.shared = SharedExpertKind::none;  // as in moe bench
    config.shared_intermediate_size = 0;
    const MoeWeights weights = random_moe_weights(config, 1234, DType::BF16);
    const int64_t Tm = 8, H = sh.H;
    MoeLayer gpu = test::cuda_layer(config, weights, {.max_tokens = Tm});
    std::vector<std::unique_ptr<test::Device<uint16_t>>> inputs;
    for (int i = 0; i < 8; ++i) {
      const Tensor x = random_tensor({Tm, H}, 1.0f, 500 + i, DType::BF16);
      inputs.push_back(std::make_unique<test::Device<uint16_t>>(
          std::vector<uint16_t>(x.data_as<uint16_t>(), x.data_as<uint16_t>() + Tm * H)));
    }
    test::Device<float> d_out(Tm * H), d_weights(Tm * sh.k);
    test::Device<int32_t> d_ids(Tm * sh.k);
    cudaStream_t stream;
    MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int64_t T : {1, 2, 4, 8}) {
      std::vector<CapturedGraph> graphs;
      for (int i = 0; i < 8; ++i) {
        auto forward = [&] {
          test::forward_on_device(gpu, inputs[i]->get(), T, d_out.get(), d_ids.get(), d_weights.get(),
                      stream);
        };
        forward();
        graphs.emplace_back(stream, forward, cudaStreamCaptureModeThreadLocal);
      }
      std::vector<cudaEvent_t> events(61);
      for (auto& e : events) MOE_CUDA_CHECK(cudaEventCreate(&e));
      for (int r = 0; r < 16; ++r) graphs[r % 8].launch(stream);
      for (int r = 0; r < 60; ++r) {
        MOE_CUDA_CHECK(cudaEventRecord(events[r], stream));
        graphs[r % 8].launch(stream);
      }
      MOE_CUDA_CHECK(cudaEventRecord(events[60], stream));
      MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
      std::vector<float> us(60);
      for (int r = 0; r < 60; ++r) {
        MOE_CUDA_CHECK(cudaEventElapsedTime(&us[r], events[r], events[r + 1]));
        us[r] *= 1e3f;
      }
      std::sort(us.begin(), us.end());
      // The same forwards chained in one graph, as the layers of a model's decode step run: 8 forwards on
      // the 8 inputs per replay, so the launch of a graph is paid once per 8 layers.
      const CapturedGraph chain(
          stream,
          [&] {
            for (int i = 0; i < 8; ++i)
              test::forward_on_device(gpu, inputs[i]->get(), T, d_out.get(), d_ids.get(),
                          d_weights.get(), stream);
          },
          cudaStreamCaptureModeThreadLocal);
      for (int r = 0; r < 3; ++r) chain.launch(stream);
      for (int r = 0; r < 20; ++r) {
        MOE_CUDA_CHECK(cudaEventRecord(events[r], stream));
        chain.launch(stream);
      }
      MOE_CUDA_CHECK(cudaEventRecord(events[20], stream));
      MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
      std::vector<float> chained(20);
      for (int r = 0; r < 20; ++r) {
        MOE_CUDA_CHECK(cudaEventElapsedTime(&chained[r], events[r], events[r + 1]));
        chained[r] *= 1e3f / 8;
      }
      std::sort(chained.begin(), chained.end());
      for (auto& e : events) cudaEventDestroy(e);
      // One traced launch right after a launch on another input (its experts cold in L2, as in the replays).
      test::forward_on_device(gpu, inputs[2]->get(), T, d_out.get(), d_ids.get(), d_weights.get(), stream);
      decode_trace(true);
      test::forward_on_device(gpu, inputs[3]->get(), T, d_out.get(), d_ids.get(), d_weights.get(), stream);
      const std::vector<uint64_t> stamps = decode_trace_read();
      decode_trace(false);
      const size_t blocks = stamps.size() / kDecodeTracePoints;
      uint64_t origin = ~uint64_t{0};
      for (size_t b = 0; b < blocks; ++b) origin = std::min(origin, stamps[b * kDecodeTracePoints]);
      std::string line = std::string(sh.name) + " T " + std::to_string(T) + ": replay median " +
                         std::to_string(us[30]).substr(0, 6) + " us, chained " + std::to_string(chained[10]).substr(0, 6) +
                         " us a forward; stamps (median / last block, us from first entry):";
      for (int point = 0; point < kDecodeTracePoints; ++point) {
        std::vector<double> v(blocks);
        for (size_t b = 0; b < blocks; ++b) v[b] = (stamps[b * kDecodeTracePoints + point] - origin) * 1e-3;
        std::sort(v.begin(), v.end());
        line += " " + std::to_string(point) + ":" + std::to_string(v[blocks / 2]).substr(0, 5) + "/" +
                std::to_string(v.back()).substr(0, 5);
      }
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
    cudaStreamDestroy(stream);
  }
}

}  // namespace
}  // namespace moe::cuda
