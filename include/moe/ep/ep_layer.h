#pragma once
// One MoE block under expert parallelism. Every rank holds the same input [T, H]; rank r routes only its
// slice of the tokens (data-parallel attention: tokens [T·r/R, T·(r+1)/R)), dispatches them to the ranks
// holding their experts, runs only its own experts (CPU reference experts, by slot), combines, adds the
// (replicated) shared experts on its slice, and rank 0 gathers the whole output. The result equals the
// single-rank MoeLayer with reference experts to fp32 rounding (exactly, with Transfer::f32, up to the
// order in which a token's per-rank partial sums are added).

#include <vector>

#include "moe/ep/dispatch_combine.h"
#include "moe/layer/moe_layer.h"

namespace moe::ep {

// Tokens [begin, end) of rank r out of R: an even split, the first ranks one longer.
struct TokenRange {
  int64_t begin = 0, end = 0;
};
TokenRange token_range(int64_t n_tokens, int rank, int n_ranks);

// Rank 0 receives every rank's rows of `local` ([T_r, W] of 4-byte values, T_r the rows of token_range) in
// rank order -> [T, W] there, an empty tensor elsewhere. Collective.
Tensor gather_rows(Communicator& comm, const Tensor& local, int64_t n_tokens, DType dtype);
// Every rank's statistics, on every rank. Collective.
std::vector<ExchangeStats> gather_stats(Communicator& comm, const ExchangeStats& mine);

struct EpOutput {
  LayerOutput layer;                 // rank 0: the whole batch ([T, H], topk [T, k], stats); others: empty
  std::vector<ExchangeStats> ranks;  // [R] every rank's exchange statistics (on every rank)
};

class EpMoeLayer {
 public:
  // weights: the whole block (views; only this rank's experts and the shared expert are read).
  EpMoeLayer(Communicator& comm, MoeConfig config, MoeWeights weights, Placement placement,
             Transfer transfer = Transfer::f32);
  // x [T, H] F32, BF16 or F16, the same on every rank. Collective: every rank calls it.
  EpOutput forward(const Tensor& x);

 private:
  Communicator& comm_;
  MoeConfig config_;
  MoeWeights weights_;
  std::vector<SwigluWeights> local_experts_;  // [local slots] in placement order
  std::shared_ptr<EpExchange> exchange_;
  std::unique_ptr<Prepare> prepare_;
  std::unique_ptr<Experts> experts_;
  std::unique_ptr<Finalize> finalize_;
};

}  // namespace moe::ep
