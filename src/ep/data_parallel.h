#pragma once
// A batch over the ranks of an expert-parallel layer (ep_layer.h): every rank holds the same input [T, H];
// rank r runs only its slice of the tokens (data-parallel attention: token_range), through its EpLayer, and
// the slices' outputs are gathered, on rank 0 (forward_data_parallel: `moe layer --ep`) or on every rank
// (forward_replicated: a model whose other layers run replicated on every rank, `moe generate --ep`). Every
// token's output is computed by exactly one rank and copied byte for byte, so the gathered output is the
// same bytes on every rank that has it.

#include <vector>

#include "ep/communicator.h"
#include "ep/dispatch_combine.h"
#include "ep/ep_layer.h"
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
// As gather_rows, with the whole [T, W] on every rank. Collective.
Tensor all_gather_rows(Communicator& comm, const Tensor& local, int64_t n_tokens, DType dtype);
// Every rank's statistics, on every rank. Collective.
std::vector<ExchangeStats> gather_stats(Communicator& comm, const ExchangeStats& mine);

struct EpOutput {
  LayerOutput layer;                 // rank 0: the whole batch ([T, H], topk [T, k], stats); others: empty
  std::vector<ExchangeStats> ranks;  // [R] every rank's exchange statistics (on every rank)
};

// x [T, H] F32, BF16 or F16, the same on every rank (checked as MoeLayer::forward checks it). In chunks of
// ep.chunk_tokens tokens (all of x when 0), rank r runs tokens token_range(chunk, r, R) of each chunk;
// rank 0 gathers the hidden states and the router's top-k and computes the load statistics; every rank
// gets every rank's exchange statistics summed over the chunks. layer.timings: this rank's (its last
// chunk). Collective.
EpOutput forward_data_parallel(EpLayer& ep, const Tensor& x);

// As forward_data_parallel, the output on every rank: hidden_states [T, H] F32, topk ids [T, k] I32 and
// weights [T, k] F32, the same bytes everywhere, and the load statistics. This rank's exchange statistics
// are added to *totals when given. Collective.
LayerOutput forward_replicated(EpLayer& ep, const Tensor& x, ExchangeStats* totals = nullptr);

}  // namespace moe::ep
