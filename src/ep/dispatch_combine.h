#pragma once
// Dispatch and combine of expert parallelism over a host Communicator (MPI), as the Prepare / Finalize
// stages of the one MoeLayer (moe/layer/stages.h; make_ep_layer in ep_layer.h builds the bundle).
// Dispatch: each pair (t, e) of this rank's tokens goes to replica t mod n_replicas(e); a token travels once
// to each destination rank however many of its experts live there, with its (slot, weight) pairs. Counts
// are exchanged, then rows and pairs by all-to-all-v. The ExpertBatch that prepare returns is over this
// rank's slots (expert id = slot index, weights in placement.rank_experts[rank] order) and its "tokens" are
// the received token copies. Combine: each copy's weighted partial sum goes back to its source, which adds
// the partials of a token in ascending rank order (deterministic). Or, with CombineMode::per_pair, each
// pair's expert row goes back and the source adds w · row over the token's pairs in top-k order in fp64,
// rounding once, as the single-rank unpermute does: the output is then bit-identical to the single-rank
// layer whatever the placement or replica (pairs / copies times the combine bytes).

#include <memory>

#include "ep/communicator.h"
#include "ep/placement.h"
#include "ep/transfer.h"
#include "moe/layer/stages.h"

namespace moe::ep {

// What this rank moved in the last forward.
struct ExchangeStats {
  int64_t tokens = 0;          // tokens routed here (this rank's slice)
  int64_t copies_sent = 0;     // token copies dispatched (one per token and destination rank)
  int64_t copies_received = 0; // token copies this rank's experts ran on
  int64_t pairs_served = 0;    // (token, expert) pairs run by this rank's experts
  int64_t bytes_sent = 0;      // dispatch (rows + pairs) and combine bytes sent to other ranks
  int64_t bytes_received = 0;  // dispatch and combine bytes received from other ranks

  // Totals over several forwards (moe generate --ep --stats).
  ExchangeStats& operator+=(const ExchangeStats& o) {
    tokens += o.tokens;
    copies_sent += o.copies_sent;
    copies_received += o.copies_received;
    pairs_served += o.pairs_served;
    bytes_sent += o.bytes_sent;
    bytes_received += o.bytes_received;
    return *this;
  }
};

// What the combine sends back: one partial sum per token copy, or every pair's expert row (bit-identical).
enum class CombineMode : uint8_t { partial_sums, per_pair };

class EpExchange {
 public:
  EpExchange(Communicator& comm, Placement placement, Transfer transfer, int top_k,
             CombineMode mode = CombineMode::partial_sums);

  // x [T_local, H] F32, topk [T_local, k] with logical expert ids -> batch over this rank's slots.
  // copy_rows = false gives an index-only batch (rows [n_rows, 0]) for a FusedExperts stage on received_x().
  ExpertBatch dispatch(const Tensor& x, const TopK& topk, bool copy_rows = true);
  // The received token copies, decoded to F32: [copies_received, H].
  const Tensor& received_x() const { return received_x_; }
  // partial [copies_received, H] F32 (each copy's weighted sum over this rank's experts) -> out [T_local, H]
  // F32 (preallocated, contiguous; every element written).
  void combine(const Tensor& partial, Tensor& out);
  // CombineMode::per_pair: expert_out [n_pairs, H] F32 (the rows of the batch that dispatch returned) ->
  // out [T_local, H] F32 (preallocated, contiguous; every element written), summed in top-k order.
  void combine_pairs(const Tensor& expert_out, const ExpertBatch& batch, Tensor& out);
  CombineMode mode() const { return mode_; }

  const ExchangeStats& stats() const { return stats_; }
  const Placement& placement() const { return placement_; }
  int local_slots() const { return static_cast<int>(placement_.rank_experts[comm_.rank()].size()); }

 private:
  Communicator& comm_;
  Placement placement_;
  Transfer transfer_;
  int top_k_;
  CombineMode mode_;
  int64_t hidden_ = 0;
  std::vector<int32_t> pair_back_;       // per_pair: [T_local, k] each pair's row in the returned rows
  std::vector<float> pair_weight_;       // per_pair: [T_local, k] the routing weights
  std::vector<int64_t> send_pair_rows_;  // per_pair: [R] pairs sent to each peer
  std::vector<int64_t> recv_pair_rows_;  // per_pair: [R] pairs received from each peer
  std::vector<int32_t> sent_token_;   // [copies_sent] local token of each copy, grouped by destination rank
  std::vector<int64_t> send_copies_;  // [R]
  std::vector<int64_t> recv_copies_;  // [R]
  Tensor received_x_;                 // [copies_received, H]
  ExchangeStats stats_;
};

// The stages over one shared exchange: prepare = dispatch (the batch is over this rank's slots, its "tokens"
// the received copies; no dropped_per_expert: nothing is dropped), finalize = local unpermute of the
// expert rows into each copy's partial sum + combine. Host tensors; the Stream is not used.
std::unique_ptr<Prepare> make_ep_prepare(std::shared_ptr<EpExchange> exchange);
std::unique_ptr<Finalize> make_ep_finalize(std::shared_ptr<EpExchange> exchange);

}  // namespace moe::ep
