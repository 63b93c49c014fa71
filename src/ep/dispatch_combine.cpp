#include "ep/dispatch_combine.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/thread_pool.h"
#include "cpu/ops.h"

namespace moe::ep {

namespace {

// Displacements of packed segments: exclusive scan of counts × unit bytes.
std::vector<int64_t> displacements(const std::vector<int64_t>& counts, int64_t unit) {
  std::vector<int64_t> displs(counts.size(), 0);
  for (size_t p = 1; p < counts.size(); ++p) displs[p] = displs[p - 1] + counts[p - 1] * unit;
  return displs;
}

std::vector<int64_t> scaled(const std::vector<int64_t>& counts, int64_t unit) {
  std::vector<int64_t> bytes(counts.size());
  for (size_t p = 0; p < counts.size(); ++p) bytes[p] = counts[p] * unit;
  return bytes;
}

// One pair on the wire: the expert's slot on the destination rank (-1: unused) and its routing weight.
struct WirePair {
  int32_t slot;
  float weight;
};

class EpPrepare final : public Prepare {
 public:
  explicit EpPrepare(std::shared_ptr<EpExchange> exchange) : exchange_(std::move(exchange)) {}
  ExpertBatch prepare(const Tensor& x, const TopK& topk, Stream) override { return exchange_->dispatch(x, topk); }

 private:
  std::shared_ptr<EpExchange> exchange_;
};

class EpFinalize final : public Finalize {
 public:
  explicit EpFinalize(std::shared_ptr<EpExchange> exchange) : exchange_(std::move(exchange)) {}
  void finalize(const Tensor&, const RouterOutput&, const Tensor& expert_out, const ExpertBatch& batch, Tensor& out,
                Stream) override {
    if (exchange_->mode() == CombineMode::per_pair) return exchange_->combine_pairs(expert_out, batch, out);
    exchange_->combine(cpu::unpermute(expert_out, batch), out);  // [copies_received, H] -> [T_local, H]
  }

 private:
  std::shared_ptr<EpExchange> exchange_;
};

}  // namespace

EpExchange::EpExchange(Communicator& comm, Placement placement, Transfer transfer, int top_k,
                       CombineMode mode)
    : comm_(comm), placement_(std::move(placement)), transfer_(transfer), top_k_(top_k), mode_(mode) {
  check_placement(placement_, placement_.n_experts, comm_.size());
  MOE_CHECK(top_k_ >= 1, "top_k {} must be at least 1", top_k_);
}

ExpertBatch EpExchange::dispatch(const Tensor& x, const TopK& topk, bool copy_rows) {
  const int R = comm_.size(), k = top_k_;
  const int64_t T = x.size(0), H = x.size(1);
  MOE_CHECK(x.dtype() == DType::F32 && x.is_contiguous(), "dispatch: x must be contiguous F32, got {} {}",
            dtype_name(x.dtype()), x.shape_string());
  MOE_CHECK(topk.ids.size(0) == T && topk.ids.size(1) == k, "dispatch: topk {} for {} tokens of top-{}",
            topk.ids.shape_string(), T, k);
  hidden_ = H;
  const int32_t* ids = topk.ids.data_as<int32_t>();
  const float* weights = topk.weights.data_as<float>();

  // Destination of every pair, and the copies per destination (a token once per rank it needs).
  std::vector<int32_t> pair_rank(T * k), pair_slot(T * k);  // [T, k]
  send_copies_.assign(R, 0);
  std::vector<uint8_t> needs(R);
  for (int64_t t = 0; t < T; ++t) {
    std::fill(needs.begin(), needs.end(), 0);
    for (int j = 0; j < k; ++j) {
      const int e = ids[t * k + j];
      MOE_CHECK(e >= 0 && e < placement_.n_experts, "dispatch: token {} routed to expert {} of {}", t, e,
                placement_.n_experts);
      const int i = placement_.replica_for(t, e);
      pair_rank[t * k + j] = placement_.replica_rank[e][i];
      pair_slot[t * k + j] = placement_.replica_slot[e][i];
      needs[pair_rank[t * k + j]] = 1;
    }
    for (int r = 0; r < R; ++r) send_copies_[r] += needs[r];
  }
  send_pair_rows_.assign(R, 0);
  for (int32_t r : pair_rank) ++send_pair_rows_[r];
  std::vector<int64_t> pair_cursor = displacements(send_pair_rows_, 1);
  pair_back_.assign(T * k, -1);
  pair_weight_.assign(weights, weights + T * k);

  // Send buffers, grouped by destination rank, tokens in order inside each group.
  const int64_t row_bytes = transfer_row_bytes(transfer_, H), meta_bytes = int64_t{k} * sizeof(WirePair);
  const int64_t n_send = std::accumulate(send_copies_.begin(), send_copies_.end(), int64_t{0});
  std::vector<uint8_t> send_rows(n_send * row_bytes);  // [copies_sent, row_bytes]
  std::vector<WirePair> send_pairs(n_send * k);        // [copies_sent, k]
  sent_token_.assign(n_send, -1);
  std::vector<int64_t> cursor = displacements(send_copies_, 1);
  for (int64_t t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) {
      int64_t copy = -1;
      int used = 0;
      for (int j = 0; j < k; ++j) {
        if (pair_rank[t * k + j] != r) continue;
        if (copy < 0) copy = cursor[r]++;
        send_pairs[copy * k + used++] = {pair_slot[t * k + j], weights[t * k + j]};
        pair_back_[t * k + j] = static_cast<int32_t>(pair_cursor[r]++);  // rows come back in this order
      }
      if (copy < 0) continue;
      for (int j = used; j < k; ++j) send_pairs[copy * k + j] = {-1, 0.0f};
      sent_token_[copy] = static_cast<int32_t>(t);
      encode_row(transfer_, {x.data_as<float>() + t * H, static_cast<size_t>(H)}, send_rows.data() + copy * row_bytes);
    }
  }

  // Counts, then rows and pairs.
  recv_copies_.assign(R, 0);
  const std::vector<int64_t> count_bytes(R, sizeof(int64_t)), count_displs = displacements(std::vector<int64_t>(R, 1), 8);
  comm_.alltoallv(send_copies_.data(), count_bytes, count_displs, recv_copies_.data(), count_bytes, count_displs);
  const int64_t n_recv = std::accumulate(recv_copies_.begin(), recv_copies_.end(), int64_t{0});
  std::vector<uint8_t> recv_rows(n_recv * row_bytes);  // [copies_received, row_bytes]
  std::vector<WirePair> recv_pairs(n_recv * k);        // [copies_received, k]
  comm_.alltoallv(send_rows.data(), scaled(send_copies_, row_bytes), displacements(send_copies_, row_bytes),
                  recv_rows.data(), scaled(recv_copies_, row_bytes), displacements(recv_copies_, row_bytes));
  comm_.alltoallv(send_pairs.data(), scaled(send_copies_, meta_bytes), displacements(send_copies_, meta_bytes),
                  recv_pairs.data(), scaled(recv_copies_, meta_bytes), displacements(recv_copies_, meta_bytes));

  recv_pair_rows_.assign(R, 0);
  for (int p = 0, c = 0; p < R; ++p)
    for (int64_t end = c + recv_copies_[p]; c < end; ++c)
      for (int j = 0; j < k; ++j) recv_pair_rows_[p] += recv_pairs[c * k + j].slot >= 0;

  received_x_ = Tensor::empty(DType::F32, {n_recv, H});  // [copies_received, H]
  float* rx = received_x_.data_as<float>();
  ThreadPool::global().parallel_for(n_recv, 16, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) decode_row(transfer_, recv_rows.data() + c * row_bytes, {rx + c * H, size_t(H)});
  });

  // The batch over local slots: a counting sort of the received pairs, stable in copy order.
  const int S = local_slots();
  ExpertBatch batch;
  batch.expert_counts = Tensor::zeros(DType::I64, {S});   // [S]
  batch.expert_offsets = Tensor::zeros(DType::I64, {S});  // [S]
  int64_t* count = batch.expert_counts.data_as<int64_t>();
  int64_t* offset = batch.expert_offsets.data_as<int64_t>();
  int64_t n_pairs = 0;
  for (const WirePair& p : recv_pairs) {
    if (p.slot < 0) continue;
    MOE_CHECK(p.slot < S, "dispatch: a peer sent slot {} but rank {} has {} slots", p.slot, comm_.rank(), S);
    ++count[p.slot];
    ++n_pairs;
  }
  for (int s = 1; s < S; ++s) offset[s] = offset[s - 1] + count[s - 1];
  batch.rows = Tensor::empty(DType::F32, {n_pairs, copy_rows ? H : 0});  // [n_pairs, H]
  batch.row_token = Tensor::empty(DType::I32, {n_pairs});                  // [n_pairs]
  batch.pair_rows = Tensor::empty(DType::I32, {n_recv, k});                // [copies_received, k]
  batch.pair_weights = Tensor::empty(DType::F32, {n_recv, k});             // [copies_received, k]
  std::vector<int64_t> fill(offset, offset + S);
  for (int64_t c = 0; c < n_recv; ++c) {
    for (int j = 0; j < k; ++j) {
      const WirePair& p = recv_pairs[c * k + j];
      batch.pair_weights.data_as<float>()[c * k + j] = p.weight;
      batch.pair_rows.data_as<int32_t>()[c * k + j] = p.slot < 0 ? -1 : static_cast<int32_t>(fill[p.slot]);
      if (p.slot < 0) continue;
      const int64_t row = fill[p.slot]++;
      batch.row_token.data_as<int32_t>()[row] = static_cast<int32_t>(c);
      if (copy_rows) std::memcpy(batch.rows.data_as<float>() + row * H, rx + c * H, H * sizeof(float));
    }
  }

  const int me = comm_.rank();
  stats_ = {.tokens = T,
            .copies_sent = n_send,
            .copies_received = n_recv,
            .pairs_served = n_pairs,
            .bytes_sent = (n_send - send_copies_[me]) * (row_bytes + meta_bytes),
            .bytes_received = (n_recv - recv_copies_[me]) * (row_bytes + meta_bytes)};
  return batch;
}

void EpExchange::combine(const Tensor& partial, Tensor& out) {
  const int64_t H = hidden_, n_recv = received_x_.size(0), n_send = static_cast<int64_t>(sent_token_.size());
  MOE_CHECK(partial.dtype() == DType::F32 && partial.is_contiguous() && partial.dim() == 2 &&
                partial.size(0) == n_recv && partial.size(1) == H,
            "combine: partial sums {} for {} received copies of width {}", partial.shape_string(), n_recv, H);
  // Partials go back in the order they came: to peer p, its copies; from peer p, ours sent to p.
  const int64_t row_bytes = H * int64_t{sizeof(float)};
  Tensor back = Tensor::empty(DType::F32, {n_send, H});  // [copies_sent, H]
  comm_.alltoallv(partial.data(), scaled(recv_copies_, row_bytes), displacements(recv_copies_, row_bytes), back.data(),
                  scaled(send_copies_, row_bytes), displacements(send_copies_, row_bytes));
  stats_.bytes_sent += (n_recv - recv_copies_[comm_.rank()]) * row_bytes;
  stats_.bytes_received += (n_send - send_copies_[comm_.rank()]) * row_bytes;

  // Copies are grouped by rank in ascending order, so adding them in copy order sums each token's partials
  // in rank order; fp64 sums, one rounding.
  const int64_t T = stats_.tokens;
  MOE_CHECK(out.dtype() == DType::F32 && out.is_contiguous() && out.dim() == 2 && out.size(0) == T &&
                out.size(1) == H,
            "combine: output {} for {} tokens of width {}", out.shape_string(), T, H);
  std::vector<double> sum(T * H, 0.0);  // [T_local, H]
  const float* b = back.data_as<float>();
  for (int64_t c = 0; c < n_send; ++c)
    for (int64_t h = 0; h < H; ++h) sum[sent_token_[c] * H + h] += b[c * H + h];
  float* o = out.data_as<float>();
  for (int64_t i = 0; i < T * H; ++i) o[i] = static_cast<float>(sum[i]);
}

void EpExchange::combine_pairs(const Tensor& expert_out, const ExpertBatch& batch, Tensor& out) {
  const int k = top_k_;
  const int64_t H = hidden_, n_recv = received_x_.size(0), T = stats_.tokens;
  MOE_CHECK(mode_ == CombineMode::per_pair, "combine_pairs on an exchange that sends partial sums");
  MOE_CHECK(expert_out.dtype() == DType::F32 && expert_out.is_contiguous() && expert_out.dim() == 2 &&
                expert_out.size(0) == batch.row_token.size(0) && expert_out.size(1) == H,
            "combine: expert rows {} for a batch of {} rows of width {}", expert_out.shape_string(),
            batch.row_token.size(0), H);
  MOE_CHECK(out.dtype() == DType::F32 && out.is_contiguous() && out.dim() == 2 && out.size(0) == T &&
                out.size(1) == H,
            "combine: output {} for {} tokens of width {}", out.shape_string(), T, H);
  // Each received copy's pair rows in wire order, copies in the order they came (grouped by source rank).
  const int64_t n_rows = std::accumulate(recv_pair_rows_.begin(), recv_pair_rows_.end(), int64_t{0});
  Tensor rows = Tensor::empty(DType::F32, {n_rows, H});  // [pairs received, H]
  const int32_t* pair_rows = batch.pair_rows.data_as<int32_t>();
  const float* src = expert_out.data_as<float>();
  float* dst = rows.data_as<float>();
  int64_t next = 0;
  for (int64_t c = 0; c < n_recv; ++c)
    for (int j = 0; j < k; ++j) {
      const int32_t row = pair_rows[c * k + j];
      if (row < 0) continue;
      std::memcpy(dst + next++ * H, src + int64_t{row} * H, H * sizeof(float));
    }
  const int64_t row_bytes = H * int64_t{sizeof(float)};
  const int64_t n_back = std::accumulate(send_pair_rows_.begin(), send_pair_rows_.end(), int64_t{0});
  Tensor back = Tensor::empty(DType::F32, {n_back, H});  // [T_local * k, H] our pairs' rows
  comm_.alltoallv(rows.data(), scaled(recv_pair_rows_, row_bytes), displacements(recv_pair_rows_, row_bytes),
                  back.data(), scaled(send_pair_rows_, row_bytes), displacements(send_pair_rows_, row_bytes));
  stats_.bytes_sent += (n_rows - recv_pair_rows_[comm_.rank()]) * row_bytes;
  stats_.bytes_received += (n_back - send_pair_rows_[comm_.rank()]) * row_bytes;

  // NOTE: the same expression and order as cpu::unpermute (fp64 w · row over j, one rounding), so that
  // the sum is bit-identical to the single-rank layer's.
  const float* b = back.data_as<float>();
  float* o = out.data_as<float>();
  ThreadPool::global().parallel_for(T, 16, [&](int64_t t0, int64_t t1) {
    std::vector<double> sum(H);
    for (int64_t t = t0; t < t1; ++t) {
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int j = 0; j < k; ++j) {
        const double w = pair_weight_[t * k + j];
        const float* row = b + int64_t{pair_back_[t * k + j]} * H;
        for (int64_t h = 0; h < H; ++h) sum[h] += w * row[h];
      }
      for (int64_t h = 0; h < H; ++h) o[t * H + h] = static_cast<float>(sum[h]);
    }
  });
}

std::unique_ptr<Prepare> make_ep_prepare(std::shared_ptr<EpExchange> exchange) {
  return std::make_unique<EpPrepare>(std::move(exchange));
}

std::unique_ptr<Finalize> make_ep_finalize(std::shared_ptr<EpExchange> exchange) {
  return std::make_unique<EpFinalize>(std::move(exchange));
}

}  // namespace moe::ep
