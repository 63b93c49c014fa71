#include "moe/ep/ep_layer.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "moe/cpu/ops.h"
#include "moe/layer/shared_experts.h"

namespace moe::ep {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

TokenRange token_range(int64_t n_tokens, int rank, int n_ranks) {
  const int64_t base = n_tokens / n_ranks, extra = n_tokens % n_ranks;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

Tensor gather_rows(Communicator& comm, const Tensor& local, int64_t n_tokens, DType dtype) {
  const int R = comm.size();
  const int64_t W = local.size(1), row_bytes = W * 4;
  std::vector<int64_t> send_counts(R, 0), send_displs(R, 0), recv_counts(R, 0), recv_displs(R, 0);
  send_counts[0] = local.size(0) * row_bytes;
  Tensor all;
  if (comm.rank() == 0) {
    all = Tensor::empty(dtype, {n_tokens, W});  // [T, W]
    for (int r = 0; r < R; ++r) {
      const TokenRange range = token_range(n_tokens, r, R);
      recv_counts[r] = (range.end - range.begin) * row_bytes;
      recv_displs[r] = range.begin * row_bytes;
    }
  }
  comm.alltoallv(local.data(), send_counts, send_displs, comm.rank() == 0 ? all.data() : nullptr, recv_counts,
                 recv_displs);
  return all;
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

EpMoeLayer::EpMoeLayer(Communicator& comm, MoeConfig config, MoeWeights weights, Placement placement,
                       Transfer transfer)
    : comm_(comm), config_(std::move(config)), weights_(std::move(weights)) {
  routing::validate(config_.router);
  check_placement(placement, config_.router.n_experts, comm_.size());
  for (int32_t e : placement.rank_experts[comm_.rank()]) local_experts_.push_back(weights_.experts[e]);
  // NOTE: only this rank's experts stay referenced; the other views are dropped (their pages never touched).
  weights_.experts.clear();
  exchange_ = std::make_shared<EpExchange>(comm_, std::move(placement), transfer, config_.router.top_k);
  prepare_ = make_ep_prepare(exchange_);
  experts_ = make_cpu_reference_experts(local_experts_);
  finalize_ = make_ep_finalize(exchange_);
}

EpOutput EpMoeLayer::forward(const Tensor& input) {
  const int64_t H = config_.hidden_size;
  const Tensor x_all = layer_input_f32(input, H);  // [T, H] F32
  const int64_t T = x_all.size(0);
  const int E = config_.router.n_experts, k = config_.router.top_k, R = comm_.size();
  const TokenRange range = token_range(T, comm_.rank(), R);
  const int64_t T_local = range.end - range.begin;
  const Tensor x = x_all.narrow(0, range.begin, T_local);  // [T_local, H], contiguous rows of x_all
  LayerTimings timings;

  auto start = Clock::now();
  const Tensor logits = cpu::router_logits(x, weights_.router);  // [T_local, E]
  TopK topk{.ids = Tensor::empty(DType::I32, {T_local, k}), .weights = Tensor::empty(DType::F32, {T_local, k})};
  const Tensor& bias = weights_.correction_bias;
  routing::route(config_.router, {logits.data_as<float>(), static_cast<size_t>(T_local * E)},
                 bias.defined() ? std::span<const float>(bias.data_as<float>(), E) : std::span<const float>(), T_local,
                 {topk.ids.data_as<int32_t>(), static_cast<size_t>(T_local * k)},
                 {topk.weights.data_as<float>(), static_cast<size_t>(T_local * k)});
  timings.router_ms = ms_since(start);

  start = Clock::now();
  const ExpertBatch batch = prepare_->prepare(x, topk);
  timings.prepare_ms = ms_since(start);
  start = Clock::now();
  const Tensor expert_out = experts_->run(batch);  // [pairs_served, H]
  timings.experts_ms = ms_since(start);
  start = Clock::now();
  Tensor y = Tensor::empty(DType::F32, {T_local, H});  // [T_local, H]
  finalize_->finalize(x, RouterOutput{topk, Tensor()}, expert_out, batch, y);
  timings.finalize_ms = ms_since(start);

  // Shared experts are replicated: each rank adds them to its own tokens, as the single-rank layer does.
  start = Clock::now();
  add_shared_experts_reference(config_, weights_, x, y);
  timings.shared_ms = ms_since(start);

  EpOutput result;
  result.ranks = gather_stats(comm_, exchange_->stats());

  LayerOutput& out = result.layer;
  out.hidden_states = gather_rows(comm_, y, T, DType::F32);
  out.topk.ids = gather_rows(comm_, topk.ids, T, DType::I32);
  out.topk.weights = gather_rows(comm_, topk.weights, T, DType::F32);
  out.timings = timings;
  if (comm_.rank() == 0)
    out.stats = routing::compute_load_stats({out.topk.ids.data_as<int32_t>(), static_cast<size_t>(T * k)}, T, k, E);
  return result;
}

}  // namespace moe::ep
