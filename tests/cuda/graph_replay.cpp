#include "graph_replay.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "device_layer.h"
#include "cuda/captured_graph.h"
#include "moe/layer/moe_layer.h"

namespace moe::test {

void expect_graph_replays_match(const MoeConfig& config, const MoeWeights& weights, int64_t T, TestRng& rng) {
  const int64_t H = config.hidden_size, k = config.router.top_k;
  MoeLayer gpu = test::cuda_layer(config, weights, {.max_tokens = T});
  MoeLayer cpu_layer(config, weights);
  Device<uint16_t> d_x(T * H);
  Device<float> d_out(T * H), d_weights(T * k);
  Device<int32_t> d_ids(T * k);
  cudaStream_t stream;
  MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto forward = [&] {
    test::forward_on_device(gpu, d_x.get(), T, d_out.get(), d_ids.get(), d_weights.get(), stream);
  };
  const auto upload_random_x = [&] {
    const Tensor x = rng.normal_tensor({T, H}, 1.0f, DType::BF16);
    MOE_CUDA_CHECK(cudaMemcpy(d_x.get(), x.data(), x.nbytes(), cudaMemcpyHostToDevice));
    return x;
  };
  upload_random_x();
  forward();  // warm-up outside the capture (kernel attributes, cuBLAS heuristics)
  MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  {
    const cuda::CapturedGraph graph(stream, forward);
    for (int replay = 0; replay < 4; ++replay) {
      SCOPED_TRACE("replay " + std::to_string(replay));
      const Tensor x = upload_random_x();
      MOE_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, T * H * sizeof(float)));  // NaN junk
      for (int again = 0; again < 3; ++again) graph.launch(stream);
      MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
      const std::vector<float> graph_out = d_out.host();
      forward();  // eager, on the same input
      MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
      EXPECT_EQ(graph_out, d_out.host()) << "the graph and the eager forward must agree bit for bit";
      const LayerOutput want = cpu_layer.forward(x.to_f32());
      expect_agreement(compare_agreeing_tokens(graph_out, d_ids.host(), want), "graph replay");
    }
  }
  cudaStreamDestroy(stream);
}

}  // namespace moe::test
