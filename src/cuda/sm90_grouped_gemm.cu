// The host side of the Hopper grouped GEMM (sm90_grouped_gemm_kernel.cuh): the TMA tensor maps, the
// checks of the arguments, and one launch per kernel instance (SwiGLU or plain, pairs or column pairs,
// staged epilogue or not) as the schedule (grouped_gemm_plan.h) asks.
#include <cuda.h>  // CUtensorMap and its enums (types only: the encoder is fetched through the runtime)
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "launch.h"
#include "sm90_grouped_gemm_kernel.cuh"
#include "core/knobs.h"
#include "cuda/check.h"
#include "cuda/grouped_gemm_plan.h"
#include "cuda/ops.h"

namespace moe::cuda {

namespace {

// MOE_WGMMA_SECTOR_STORES=on|off: the unstaged epilogue's sector-wide stores (on by default where N and C allow).
bool sector_stores_enabled() { return knobs().wgmma_sector_stores.value_or(true); }

// cuTensorMapEncodeTiled from the driver through the runtime, so that nothing links libcuda.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    MOE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    MOE_CUDA_REQUIRE(found == cudaDriverEntryPointSuccess && fn != nullptr,
                     "the CUDA driver has no cuTensorMapEncodeTiled (needs a CUDA 12 driver)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// A row-major bf16 matrix [rows, cols] read in boxes of box_rows x 64 with the 128-byte swizzle; reads
// past either edge return zeros.
CUtensorMap tensor_map(const bf16* base, int64_t rows, int64_t cols, int box_rows, const char* what) {
  MOE_CUDA_REQUIRE(cols % 8 == 0 && reinterpret_cast<uintptr_t>(base) % 16 == 0,
                   std::string("wgmma grouped GEMM: ") + what + " needs 16-byte aligned rows (columns " +
                       std::to_string(cols) + " must be a multiple of 8)");
  MOE_CUDA_REQUIRE(rows >= 1 && rows < (int64_t{1} << 31),
                   std::string("wgmma grouped GEMM: ") + what + " rows " + std::to_string(rows) + " out of range");
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * sizeof(bf16)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBK), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(base), dims,
                                          strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  MOE_CUDA_REQUIRE(r == CUDA_SUCCESS, std::string("wgmma grouped GEMM: cuTensorMapEncodeTiled failed for ") + what +
                                          " (error " + std::to_string(static_cast<int>(r)) + ")");
  return map;
}

// One kernel instance: its shared-memory limit raised once per device, a grid of at most one block per SM
// (PAIRS: the clusters of 2 that fit at once, as the persistent blocks never make room for more).
template <bool SWIGLU, bool PAIRS, bool STAGED, bool COLUMN_PAIRS>
void launch_instance(const CUtensorMap& map_a, const CUtensorMap& map_b, const CUtensorMap& map_tall,
                     const CUtensorMap& map_a_half, const WgmmaParams& p, int64_t max_tiles,
                     cudaStream_t stream) {
  static_assert(PAIRS || !COLUMN_PAIRS, "column pairs are clusters of 2 (PAIRS)");
  constexpr auto kernel = wgmma_grouped_gemm_kernel<SWIGLU, PAIRS, STAGED, COLUMN_PAIRS>;
  constexpr size_t kSmemBytes = smem_bytes(SWIGLU, STAGED);
  static std::atomic<int> clusters_by_device[64]{};
  int device = 0;
  MOE_CUDA_CHECK(cudaGetDevice(&device));
  if (raise_shared_memory_once<kernel>(kSmemBytes) && PAIRS) {
    const int clusters =
        max_active_clusters(kernel, static_cast<unsigned>(sm_count() / 2 * 2), dim3(kThreads), kSmemBytes, 2);
    MOE_CUDA_REQUIRE(clusters >= 1, "wgmma grouped GEMM: no cluster of 2 blocks fits on this GPU");
    clusters_by_device[device % 64].store(clusters);
  }
  // Upper bounds on the units: the device knows the real counts.
  // NOTE: the claim counter is int32 and every block claims once past the end.
  MOE_CUDA_REQUIRE(max_tiles * p.n_col_tiles + kMaxBlocks < (int64_t{1} << 31), "wgmma grouped GEMM: too many work units");
  if constexpr (PAIRS) {
    const int64_t units =
        COLUMN_PAIRS ? max_tiles * ((p.n_col_tiles + 1) / 2) : (max_tiles + 1) / 2 * p.n_col_tiles;
    const int64_t clusters = std::min<int64_t>({int64_t{clusters_by_device[device % 64].load()}, units,
                                                int64_t{kMaxBlocks / 2}});
    launch_dependent_clusters(kernel, dim3(static_cast<unsigned>(2 * clusters)), dim3(kThreads), kSmemBytes,
                              stream, 2, map_a, map_b, map_tall, map_a_half, p);
  } else {
    const int64_t units = max_tiles * p.n_col_tiles;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>({int64_t{sm_count()}, units, int64_t{kMaxBlocks}}));
    launch_dependent(kernel, dim3(blocks), dim3(kThreads), kSmemBytes, stream, map_a, map_b, map_tall,
                     map_a_half, p);
  }
}

template <bool SWIGLU>
void launch_wgmma(const GroupedGemmArgs& g, WgmmaSchedule schedule, cudaStream_t stream) {
  MOE_CUDA_REQUIRE(wgmma_grouped_gemm_available(),
                   "wgmma grouped GEMM: needs a build for sm_90a and a compute capability 9.0 GPU");
  MOE_CUDA_REQUIRE(g.gather == nullptr, "wgmma grouped GEMM: A must be contiguous rows (gather them first)");
  MOE_CUDA_REQUIRE(g.n_experts >= 1 && g.a_rows >= 1,
                   "wgmma grouped GEMM: set n_experts and a_rows (the tensor maps' extents)");
  MOE_CUDA_REQUIRE(g.n % 2 == 0, "wgmma grouped GEMM: output columns " + std::to_string(g.n) + " must be even");
  MOE_CUDA_REQUIRE(g.k >= 1 && g.n >= 1, "wgmma grouped GEMM: empty K or N");
  MOE_CUDA_REQUIRE(g.max_tiles < (int64_t{1} << 31), "wgmma grouped GEMM: too many tiles");
  MOE_CUDA_REQUIRE(schedule.raster_rows >= 1, "wgmma grouped GEMM: raster_rows must be at least 1");
  MOE_CUDA_REQUIRE(g.scheduler != nullptr,
                   "wgmma grouped GEMM: set scheduler (wgmma_scheduler_ints() zeroed ints of device memory)");
  if (g.max_tiles == 0) return;
  constexpr int OUT_COLS = SWIGLU ? kBN / 2 : kBN;
  const int64_t b_rows = SWIGLU ? 2 * g.n : g.n;
  MOE_CUDA_REQUIRE(g.tall_rows == 0 || g.tall_rows == kTallRows,
                   "wgmma grouped GEMM: tall_rows " + std::to_string(g.tall_rows) + " must be 0 or " +
                       std::to_string(kTallRows) + " (build the tile map with wgmma_tall_rows())");
  // The staged epilogue's store warps copy 16-byte vectors: elsewhere the consumers store (N even suffices).
  if (g.n % 8 != 0 || reinterpret_cast<uintptr_t>(g.c) % 16 != 0) schedule.staged_epilogue = false;
  const CUtensorMap map_a = tensor_map(g.a, g.a_rows, g.k, kBM, "A");
  const CUtensorMap map_tall = tensor_map(g.a, g.a_rows, g.k, kTallRows, "A (tall tiles' extra rows)");
  MOE_CUDA_REQUIRE(!(schedule.pairs && schedule.column_pairs),
                   "wgmma grouped GEMM: pairs of row tiles and column pairs exclude each other");
  // Column pairs: each block of a cluster loads 64 of the A tile's rows for both.
  const CUtensorMap map_a_half =
      schedule.column_pairs ? tensor_map(g.a, g.a_rows, g.k, kBM / 2, "A (column pairs' halves)") : map_a;
  const CUtensorMap map_b = tensor_map(g.b, g.n_experts * b_rows, g.k, kBBoxRows, "B");
  const WgmmaParams p{.segment_offsets = g.segment_offsets, .segment_counts = g.segment_counts,
                      .tile_expert = g.tile_expert, .tile_row = g.tile_row, .n_tiles = g.n_tiles, .c = g.c,
                      .n = g.n, .b_rows = b_rows, .k_blocks = static_cast<int32_t>((g.k + kBK - 1) / kBK),
                      .n_col_tiles = static_cast<int32_t>((g.n + OUT_COLS - 1) / OUT_COLS),
                      .max_tiles = static_cast<int32_t>(g.max_tiles), .tall_rows = g.tall_rows,
                      .raster_rows = schedule.raster_rows,
                      .half_tiles = schedule.half_tiles, .a_hint = schedule.a_hint, .b_hint = schedule.b_hint,
                      .claimed_units = schedule.claimed_units,
                      .sector_stores = g.n % 16 == 0 && reinterpret_cast<uintptr_t>(g.c) % 32 == 0 &&
                                       sector_stores_enabled(),
                      .scheduler = g.scheduler};
  const auto launch = [&]<bool PAIRS, bool COLUMN_PAIRS>() {
    if (schedule.staged_epilogue) {
      launch_instance<SWIGLU, PAIRS, true, COLUMN_PAIRS>(map_a, map_b, map_tall, map_a_half, p, g.max_tiles,
                                                         stream);
    } else {
      launch_instance<SWIGLU, PAIRS, false, COLUMN_PAIRS>(map_a, map_b, map_tall, map_a_half, p, g.max_tiles,
                                                          stream);
    }
  };
  if (schedule.column_pairs) {
    launch.template operator()<true, true>();
  } else if (schedule.pairs) {
    launch.template operator()<true, false>();
  } else {
    launch.template operator()<false, false>();
  }
}

}  // namespace

int64_t wgmma_scheduler_ints() { return kSchedulerInts; }

bool wgmma_grouped_gemm_available() {
#ifdef MOE_CUDA_SM90A
  static const bool available = [] {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    return major == 9 && minor == 0;
  }();
  return available;
#else
  return false;
#endif
}

void wgmma_grouped_gemm_swiglu(const GroupedGemmArgs& args, cudaStream_t stream, WgmmaSchedule schedule) {
  launch_wgmma<true>(args, schedule, stream);
}
void wgmma_grouped_gemm(const GroupedGemmArgs& args, cudaStream_t stream, WgmmaSchedule schedule) {
  launch_wgmma<false>(args, schedule, stream);
}
void wgmma_grouped_gemm_swiglu(const GroupedGemmArgs& args, cudaStream_t stream) {
  wgmma_grouped_gemm_swiglu(args, stream,
                            wgmma_schedule_for(args.a_rows, args.n_experts, true, args.k, args.staged_epilogue));
}
void wgmma_grouped_gemm(const GroupedGemmArgs& args, cudaStream_t stream) {
  wgmma_grouped_gemm(args, stream,
                     wgmma_schedule_for(args.a_rows, args.n_experts, false, args.k, args.staged_epilogue));
}

}  // namespace moe::cuda
