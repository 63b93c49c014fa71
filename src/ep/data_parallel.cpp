#include "ep/data_parallel.h"

#include <algorithm>
#include <cstring>

#include "moe/core/check.h"

namespace moe::ep {

namespace {

// Send `local` [T_r, W] (4-byte values) to the ranks in `to` (every rank, or rank 0 only); those receive
// the whole [T, W] in token order. Collective.
Tensor gather_to(Communicator& comm, const Tensor& local, int64_t n_tokens, DType dtype, bool to_all) {
  const int R = comm.size();
  const int64_t W = local.size(1), row_bytes = W * 4;
  MOE_CHECK(dtype_size(dtype) == 4 && local.is_contiguous(), "gather_rows: {} rows of {}-byte values",
            local.shape_string(), dtype_size(dtype));
  const bool receives = to_all || comm.rank() == 0;
  std::vector<int64_t> send_counts(R, 0), send_displs(R, 0), recv_counts(R, 0), recv_displs(R, 0);
  for (int r = 0; r < (to_all ? R : 1); ++r) send_counts[r] = local.size(0) * row_bytes;
  Tensor all;
  if (receives) {
    all = Tensor::empty(dtype, {n_tokens, W});  // [T, W]
    for (int r = 0; r < R; ++r) {
      const TokenRange range = token_range(n_tokens, r, R);
      recv_counts[r] = (range.end - range.begin) * row_bytes;
      recv_displs[r] = range.begin * row_bytes;
    }
  }
  comm.alltoallv(local.data(), send_counts, send_displs, receives ? all.data() : nullptr, recv_counts, recv_displs);
  return all;
}

// Rows [t0, t0 + rows.size(0)) of `all` [T, W] = rows (the same dtype).
void put_rows(Tensor& all, int64_t t0, const Tensor& rows) {
  if (rows.numel() > 0)
    std::memcpy(static_cast<uint8_t*>(all.data()) + t0 * rows.size(1) * dtype_size(rows.dtype()), rows.data(),
                rows.nbytes());
}

// What the ranks' forwards of one chunk leave on a rank that receives them: [n, H], [n, k], [n, k].
struct Gathered {
  Tensor hidden, ids, weights;
};

// The chunks of x_all [T, H] F32 over the ranks: this rank's slice of each through its layer, the slices
// gathered (on rank 0, or everywhere); this rank's exchange statistics summed into *stats.
LayerOutput run_chunks(EpLayer& ep, const Tensor& x_all, bool to_all, ExchangeStats* stats) {
  Communicator& comm = *ep.host;
  const int64_t T = x_all.size(0), H = x_all.size(1), k = ep.layer->config().router.top_k;
  const int R = comm.size(), me = comm.rank();
  const int64_t chunk = ep.chunk_tokens > 0 ? ep.chunk_tokens : std::max<int64_t>(T, 1);
  const bool receives = to_all || me == 0;
  LayerOutput out;
  if (receives) {
    out.hidden_states = Tensor::empty(DType::F32, {T, H});
    out.topk.ids = Tensor::empty(DType::I32, {T, k});
    out.topk.weights = Tensor::empty(DType::F32, {T, k});
  }
  // NOTE: every rank sees the same T, so all of them run the same chunks and the same collectives; a batch
  // of no tokens still runs one (empty) forward, as a single-rank layer would.
  for (int64_t t0 = 0; t0 < std::max<int64_t>(T, 1); t0 += chunk) {
    const int64_t n = std::min(chunk, T - t0);
    const TokenRange range = token_range(n, me, R);
    const Tensor x = x_all.narrow(0, t0 + range.begin, range.end - range.begin);  // [T_r, H]
    const LayerOutput mine = ep.layer->forward(x);
    if (stats) *stats += ep.last_stats();
    out.timings = mine.timings;
    const Gathered g{.hidden = gather_to(comm, mine.hidden_states, n, DType::F32, to_all),
                     .ids = gather_to(comm, mine.topk.ids, n, DType::I32, to_all),
                     .weights = gather_to(comm, mine.topk.weights, n, DType::F32, to_all)};
    if (!receives) continue;
    put_rows(out.hidden_states, t0, g.hidden);
    put_rows(out.topk.ids, t0, g.ids);
    put_rows(out.topk.weights, t0, g.weights);
  }
  if (receives)
    out.stats = routing::compute_load_stats({out.topk.ids.data_as<int32_t>(), static_cast<size_t>(T * k)}, T,
                                            static_cast<int>(k), ep.layer->config().router.n_experts);
  return out;
}

}  // namespace

TokenRange token_range(int64_t n_tokens, int rank, int n_ranks) {
  const int64_t base = n_tokens / n_ranks, extra = n_tokens % n_ranks;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

Tensor gather_rows(Communicator& comm, const Tensor& local, int64_t n_tokens, DType dtype) {
  return gather_to(comm, local, n_tokens, dtype, /*to_all=*/false);
}

Tensor all_gather_rows(Communicator& comm, const Tensor& local, int64_t n_tokens, DType dtype) {
  return gather_to(comm, local, n_tokens, dtype, /*to_all=*/true);
}

std::vector<ExchangeStats> gather_stats(Communicator& comm, const ExchangeStats& mine) {
  // Each rank fills its own row of a sum.
  constexpr int kFields = 6;
  const int R = comm.size();
  std::vector<int64_t> table(R * kFields, 0);  // [R, kFields]
  const int64_t row[kFields] = {mine.tokens, mine.copies_sent, mine.copies_received, mine.pairs_served,
                                mine.bytes_sent, mine.bytes_received};
  std::memcpy(table.data() + comm.rank() * kFields, row, sizeof(row));
  comm.allreduce_sum(table);
  std::vector<ExchangeStats> all;
  for (int r = 0; r < R; ++r) {
    const int64_t* v = table.data() + r * kFields;
    all.push_back({.tokens = v[0], .copies_sent = v[1], .copies_received = v[2], .pairs_served = v[3],
                   .bytes_sent = v[4], .bytes_received = v[5]});
  }
  return all;
}

EpOutput forward_data_parallel(EpLayer& ep, const Tensor& x) {
  const Tensor x_all = layer_input_f32(x, ep.layer->config().hidden_size);  // [T, H] F32
  ExchangeStats mine;
  EpOutput result;
  result.layer = run_chunks(ep, x_all, /*to_all=*/false, &mine);
  result.ranks = gather_stats(*ep.host, mine);
  return result;
}

LayerOutput forward_replicated(EpLayer& ep, const Tensor& x, ExchangeStats* totals) {
  const Tensor x_all = layer_input_f32(x, ep.layer->config().hidden_size);  // [T, H] F32
  return run_chunks(ep, x_all, /*to_all=*/true, totals);
}

}  // namespace moe::ep
