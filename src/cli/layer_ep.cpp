#include "layer_ep.h"

#include <nlohmann/json.hpp>

#include <fstream>

#include "moe/core/safetensors.h"
#include "moe/dist/ep_layer.h"

namespace moe::cli {

void run_layer_ep(const MoeConfig& config, MoeWeights weights, const Tensor& x, const EpLayerArgs& args) {
  const dist::Transfer transfer = dist::parse_transfer(args.transfer);
  const std::unique_ptr<dist::Communicator> comm = dist::make_mpi_communicator();
  dist::Placement placement = dist::resolve_placement(args.placement, config.router.n_experts, comm->size());
  const dist::Placement kept = placement;  // for the stats: the layer takes its own copy
  dist::EpMoeLayer layer(*comm, config, std::move(weights), std::move(placement), transfer);
  const dist::EpOutput out = layer.forward(x);
  if (comm->rank() != 0) return;

  write_safetensors(args.output, {{"hidden_states", out.layer.hidden_states},
                                  {"topk_ids", out.layer.topk.ids},
                                  {"topk_weights", out.layer.topk.weights}});
  if (args.stats.empty()) return;
  nlohmann::json j = routing::to_json(out.layer.stats);
  nlohmann::json per_rank = nlohmann::json::array();
  for (int r = 0; r < comm->size(); ++r) {
    const dist::ExchangeStats& s = out.ranks[r];
    per_rank.push_back({{"rank", r},
                        {"experts", kept.rank_experts[r]},
                        {"tokens", s.tokens},
                        {"copies_sent", s.copies_sent},
                        {"copies_received", s.copies_received},
                        {"pairs_served", s.pairs_served},
                        {"bytes_sent", s.bytes_sent}});
  }
  j["ep"] = {{"ranks", comm->size()}, {"transfer", dist::transfer_name(transfer)}, {"per_rank", per_rank}};
  std::ofstream file(args.stats);
  file << j.dump(2) << "\n";
  MOE_CHECK(file.good(), "cannot write the stats file '{}'", args.stats);
}

}  // namespace moe::cli
