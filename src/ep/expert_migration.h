#pragma once
// Moving expert weights to a new placement over the ranks' own transport (no disk): each rank keeps the
// experts it holds in both placements (the same tensors, no copy) and receives the others from a rank that
// holds them now. The received tensors are fresh staging buffers, so the old placement's layer keeps
// serving on the old weights until every rank agrees to switch (agree_switch); the old weights are freed
// when the caller drops the old layer.

#include <cstdint>
#include <span>
#include <vector>

#include "ep/communicator.h"
#include "ep/placement.h"
#include "moe/core/expert_batch.h"

namespace moe::ep {

// One expert's weights sent from one rank to another.
struct ExpertMove {
  int32_t expert = 0;
  int32_t from_rank = 0;  // a holder in the old placement: replica (to_rank mod n_replicas), spreading sends
  int32_t to_rank = 0;    // a rank that holds the expert in the new placement and not in the old
};

// Every move from `from` to `to` (same experts and ranks), by destination rank, then expert. Throws
// moe::Error for placements of other sizes or one that holds an expert on no rank.
std::vector<ExpertMove> plan_moves(const Placement& from, const Placement& to);

// The shape of every expert's weights (the same for all experts of a layer).
struct ExpertShape {
  int64_t hidden = 0;        // H
  int64_t intermediate = 0;  // I
  DType dtype = DType::F32;
};

struct Migration {
  std::vector<SwigluWeights> slots;  // this rank's new slots, to.rank_experts[rank] order
  int64_t bytes_sent = 0;            // expert weight bytes this rank sent to others
  int64_t bytes_received = 0;
};

// Collective. current: this rank's slots in from.rank_experts[rank] order (gate and up [I, H], down [H, I]
// of `shape`, contiguous). Throws moe::Error for weights of another shape or a count other than the slots.
Migration migrate_experts(Communicator& comm, const Placement& from, const Placement& to,
                          std::span<const SwigluWeights> current, const ExpertShape& shape);

// Collective: true on every rank when every rank passes ready = true (their staging copies are done), so
// that all ranks switch to the new placement at the same step or none does.
bool agree_switch(Communicator& comm, bool ready);

}  // namespace moe::ep
