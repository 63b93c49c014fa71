// The CUDA grouped GEMMs (gate+up with SwiGLU, then down) against cpu::grouped_swiglu on the same
// bf16 data, for every tile height, with junk-filled outputs and experts that get no rows.
#include <cmath>

#include "cuda_test_util.h"
#include "core/float_convert.h"
#include "cpu/ops.h"
#include "cuda/ops.h"
#include "test_random.h"

namespace moe::cuda {
namespace {

using test::bf16_bits;

TEST(CudaGroupedGemm, MatchesTheCpuExpertsForEveryTileHeight) {
  MOE_SKIP_WITHOUT_GPU();
  test::TestRng rng;
  const int64_t H = 192, I = 128;
  for (int E : {1, 5, 16})
    for (int64_t T : {1, 13, 300})
      for (int tile_rows : {16, 32, 48, 64, 128}) {
        SCOPED_TRACE("E " + std::to_string(E) + " T " + std::to_string(T) + " tile " + std::to_string(tile_rows));
        const int k = std::min(E, 2);
        const auto [experts, w13, w2] = test::random_experts(E, H, I, rng);
        const Tensor x = rng.normal_tensor({T, H}, 1.0f, DType::BF16).to_f32();  // bf16-exact values
        TopK topk{Tensor::empty(DType::I32, {T, k}), Tensor::from_f32({T, k}, std::vector<float>(T * k, 0.5f))};
        for (int64_t t = 0; t < T; ++t)  // expert E-1 gets nothing when E > 2
          for (int j = 0; j < k; ++j) topk.ids.data_as<int32_t>()[t * k + j] = static_cast<int32_t>((t + j) % std::max(1, E - (E > 2)));
        const ExpertBatch batch = cpu::permute_contiguous(x, topk, E);
        const Tensor want = cpu::grouped_swiglu(batch, experts, 0);  // [T*k, H]

        const int64_t rows = T * k;
        std::vector<int32_t> offsets(E), counts(E);
        for (int e = 0; e < E; ++e) {
          offsets[e] = static_cast<int32_t>(batch.expert_offsets.data_as<int64_t>()[e]);
          counts[e] = static_cast<int32_t>(batch.expert_counts.data_as<int64_t>()[e]);
        }
        const std::vector<int32_t> row_token(batch.row_token.data_as<int32_t>(),
                                             batch.row_token.data_as<int32_t>() + rows);
        test::Device<uint16_t> d_x(bf16_bits(x)), d_w13(w13), d_w2(w2), d_act(rows * I), d_out(rows * H);
        test::Device<int32_t> d_offsets(offsets), d_counts(counts), d_token(row_token);
        const int64_t max_tiles = rows + E;
        test::Device<int32_t> tile_expert(max_tiles), tile_row(max_tiles), n_tiles(1);
        build_tiles(d_offsets.get(), d_counts.get(), E, tile_rows, tile_expert.get(), tile_row.get(), n_tiles.get(),
                    max_tiles, nullptr);
        GroupedGemmArgs up{.a = reinterpret_cast<const bf16*>(d_x.get()), .gather = d_token.get(),
                           .b = reinterpret_cast<const bf16*>(d_w13.get()), .c = reinterpret_cast<bf16*>(d_act.get()),
                           .segment_offsets = d_offsets.get(), .segment_counts = d_counts.get(),
                           .tile_expert = tile_expert.get(), .tile_row = tile_row.get(), .n_tiles = n_tiles.get(),
                           .max_tiles = max_tiles, .k = H, .n = I};
        up.early_dependent_launch = true;  // the down GEMM below streams its first weight stages meanwhile
        grouped_gemm_swiglu(up, tile_rows, nullptr);
        GroupedGemmArgs down = up;
        down.early_dependent_launch = false;
        down.a = reinterpret_cast<const bf16*>(d_act.get());
        down.gather = nullptr;
        down.b = reinterpret_cast<const bf16*>(d_w2.get());
        down.c = reinterpret_cast<bf16*>(d_out.get());
        down.k = I;
        down.n = H;
        down.tile_map_settled = true;  // build_tiles ran two launches back, as in the layer
        grouped_gemm(down, tile_rows, nullptr);
        const auto got = d_out.host();
        double worst = 0, scale = 1e-30;
        for (int64_t i = 0; i < rows * H; ++i) {
          const double g = ::moe::bf16_to_f32(got[i]), w = want.data_as<float>()[i];
          ASSERT_FALSE(std::isnan(g)) << "row " << i / H;
          worst = std::max(worst, std::fabs(g - w));
          scale = std::max(scale, std::fabs(w));
        }
        EXPECT_LE(worst / scale, 1e-2);
      }
}

}  // namespace
}  // namespace moe::cuda
