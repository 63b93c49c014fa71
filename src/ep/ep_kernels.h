#pragma once
// Device kernels of expert parallelism on GPUs (one .cu per op), used by cuda_ep_exchange.cpp. Launchers
// take device pointers and a stream and never synchronise. Free of fmt (nvcc compiles the .cu files).
// Layouts: T tokens of this rank, k pairs each, R ranks, H hidden values per row.
//   copy_pos [R, T]  position of token t's copy inside rank r's group of the send buffer, -1: no copy
//   copy_of  [R, T]  index of token t's copy to rank r in the whole send buffer, -1: no copy
// The send buffer holds the copies grouped by destination rank, ascending, tokens in order in each group.

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/ops.h"

namespace moe::ep::kernels {

using cuda::bf16;

// One pair on the wire: the expert's slot on the destination rank (-1: unused) and its routing weight. The
// same 8 bytes as the MPI path's pairs.
struct WirePair {
  int32_t slot;
  float weight;
};

// Which replica serves pair (t, e): replica t mod n_replicas[e], on rank rank[e, i] in slot slot[e, i].
struct ReplicaTable {
  const int32_t* n_replicas;  // [E]
  const int32_t* rank;        // [E, max_replicas]
  const int32_t* slot;        // [E, max_replicas]
  int max_replicas;
};

inline constexpr int kMaxRanks = 64;

// ---- ep_route.cu -------------------------------------------------------------------------------------
// topk_ids [T, k] -> pair_rank, pair_slot [T, k], copy_pos [R, T], send_copies [R] (copies per destination).
void ep_route(const int32_t* topk_ids, int64_t n_tokens, int top_k, ReplicaTable table, int n_ranks,
              int32_t* pair_rank, int32_t* pair_slot, int32_t* copy_pos, int64_t* send_copies, cudaStream_t stream);

// ---- ep_pack.cu --------------------------------------------------------------------------------------
// Writes each token's copies: rows (bf16, or fp8 e4m3 with one fp32 scale per 128 values: [H] bytes, then
// the scales) of row_bytes each, k pairs each (this rank's pairs in pair order, then (-1, 0)), and copy_of.
void ep_pack(const bf16* x, const float* topk_weights, const int32_t* pair_rank, const int32_t* pair_slot,
             const int32_t* copy_pos, const int64_t* send_copies, int64_t n_tokens, int top_k, int n_ranks,
             int64_t hidden, bool fp8, int64_t row_bytes, uint8_t* send_rows, WirePair* send_pairs, int32_t* copy_of,
             cudaStream_t stream);

// ---- ep_unpack.cu ------------------------------------------------------------------------------------
// Received pairs [n, k] -> slot ids [n, k] (unused pairs get `unused_slot`, one past the local slots) and
// weights [n, k]; fp8 rows [n, row_bytes] are decoded to bf16 rows [n, H] (bf16 rows need no decoding).
void ep_unpack(const WirePair* pairs, int64_t n_copies, int top_k, int unused_slot, int32_t* slot_ids,
               float* weights, cudaStream_t stream);
void ep_decode_fp8(const uint8_t* rows, int64_t n_copies, int64_t hidden, int64_t row_bytes, bf16* out,
                   cudaStream_t stream);
// After the permute: pairs of the unused slot point at no row (their rows are never computed).
void ep_mask_unused(const int32_t* slot_ids, int64_t n_pairs, int unused_slot, int32_t* pair_rows,
                    cudaStream_t stream);

// ---- ep_combine.cu -----------------------------------------------------------------------------------
// out[t] = sum over r ascending of back[copy_of[r, t]] (+ shared_scale[t] * shared[t]), in fp32; back
// [copies, H] (bf16 or fp32, the combine wire) holds each copy's weighted partial sum as it came back;
// shared as in cuda::unpermute.
void ep_combine(const bf16* back, const int32_t* copy_of, int n_ranks, int64_t n_tokens, int64_t hidden,
                const bf16* shared, const float* shared_gate_logit, int64_t shared_gate_stride, float* out,
                cudaStream_t stream);
void ep_combine(const float* back, const int32_t* copy_of, int n_ranks, int64_t n_tokens, int64_t hidden,
                const bf16* shared, const float* shared_gate_logit, int64_t shared_gate_stride, float* out,
                cudaStream_t stream);

}  // namespace moe::ep::kernels
