#include "layer_ep.h"

#include <nlohmann/json.hpp>

#include "core/output_file.h"
#include "moe/core/safetensors.h"
#include "ep/data_parallel.h"
#include "ep/ep_layer.h"

namespace moe::cli {

namespace detail {

ep::Placement run_placement(const EpLayerArgs& args, int n_experts, int n_ranks) {
  try {
    return ep::resolve_placement(args.placement, n_experts, n_ranks);
  } catch (const Error& e) {
    if (!args.placement.empty()) throw;
    MOE_FAIL("{} (--placement FILE.json)", e.what());
  }
}

void write_ep_outputs(const ep::EpOutput& out, const ep::Placement& placement, int n_ranks,
                      const EpLayerArgs& args) {
  check_output_finite(out.layer.hidden_states, out.layer.topk, "the block");
  OutputFile y(args.output, "--output");
  write_safetensors(y.temp_path(), {{"hidden_states", out.layer.hidden_states},
                                    {"topk_ids", out.layer.topk.ids},
                                    {"topk_weights", out.layer.topk.weights}});
  if (args.stats.empty()) return y.commit();
  nlohmann::json j = routing::to_json(out.layer.stats);
  nlohmann::json per_rank = nlohmann::json::array();
  for (int r = 0; r < n_ranks; ++r) {
    const ep::ExchangeStats& s = out.ranks[r];
    per_rank.push_back({{"rank", r},
                        {"experts", placement.rank_experts[r]},
                        {"tokens", s.tokens},
                        {"copies_sent", s.copies_sent},
                        {"copies_received", s.copies_received},
                        {"pairs_served", s.pairs_served},
                        {"bytes_sent", s.bytes_sent},
                        {"bytes_received", s.bytes_received}});
  }
  j["ep"] = {{"ranks", n_ranks},
             {"transfer", ep::transfer_name(args.wires.dispatch)},
             {"combine", ep::transfer_name(args.wires.combine)},
             {"backend", args.backend},
             {"per_rank", per_rank}};
  OutputFile stats(args.stats, "--stats");
  stats.stream() << j.dump(2) << "\n";
  stats.commit();
  y.commit();
}

}  // namespace detail

void run_layer_ep(const MoeConfig& config, MoeWeights weights, const Tensor& x, const EpLayerArgs& args) {
  if (args.backend == "cuda") {
#if MOE_WITH_CUDA
    detail::run_layer_ep_cuda(config, weights, x, args);
    return;
#else
    MOE_FAIL("--ep --backend cuda: this build has no CUDA backend (no nvcc at configure time); use --backend cpu");
#endif
  }
  const std::unique_ptr<ep::Communicator> comm = ep::make_mpi_communicator();
  const ep::Placement placement = detail::run_placement(args, config.router.n_experts, comm->size());
  ep::EpLayer layer = ep::make_ep_layer(*comm, config, std::move(weights), placement, args.wires.dispatch);
  const ep::EpOutput out = ep::forward_data_parallel(layer, x);
  if (comm->rank() != 0) return;
  detail::write_ep_outputs(out, placement, comm->size(), args);
}

}  // namespace moe::cli
