// The expert-parallel layer on the CPU: the local CPU stages around the dispatch and combine of
// dispatch_combine.cpp, this rank's experts by slot.
#include "ep/ep_layer.h"

#include <vector>

#include "moe/core/check.h"
#include "moe/layer/cpu_stages.h"

namespace moe::ep {

namespace {

// The reference experts of this rank's slots, over weights the stage keeps (views into the checkpoint).
class SlotExperts final : public Experts {
 public:
  explicit SlotExperts(std::vector<SwigluWeights> slots)
      : slots_(std::move(slots)), experts_(make_cpu_reference_experts(slots_)) {}
  Tensor run(const ExpertBatch& batch, Stream stream) override { return experts_->run(batch, stream); }

 private:
  std::vector<SwigluWeights> slots_;  // [local slots] in placement order
  std::unique_ptr<Experts> experts_;
};

}  // namespace

EpLayer make_ep_layer(Communicator& comm, const MoeConfig& config, MoeWeights weights, Placement placement,
                      Transfer transfer, CombineMode combine) {
  routing::validate(config.router);
  check_placement(placement, config.router.n_experts, comm.size());
  std::vector<SwigluWeights> slots;
  for (int32_t e : placement.rank_experts[comm.rank()]) slots.push_back(weights.experts[e]);
  // NOTE: only this rank's experts stay referenced; the other views are dropped (their pages never touched).
  weights.experts.clear();
  auto exchange =
      std::make_shared<EpExchange>(comm, std::move(placement), transfer, config.router.top_k, combine);

  LayerStages stages;
  stages.device = Device::cpu;
  stages.router = make_cpu_router(config, weights, /*fast=*/false);
  stages.prepare = make_ep_prepare(exchange);
  stages.experts = std::make_unique<SlotExperts>(std::move(slots));
  stages.finalize = make_ep_finalize(exchange);
  stages.shared = make_cpu_reference_shared(config, weights);
  return {.host = &comm,
          .layer = std::make_unique<MoeLayer>(config, std::move(stages)),
          .last_stats = [exchange] { return exchange->stats(); }};
}

}  // namespace moe::ep
