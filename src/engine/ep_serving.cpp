#include "engine/ep_serving.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>

#include "core/host_memory.h"
#include "ep/rebalance.h"
#include "moe/core/check.h"

namespace moe::engine {

namespace {

using nlohmann::json;

json request_json(const StepPlan::Submission& s) {
  const Request& r = s.request;
  return {{"ticket", s.ticket},
          {"prompt", r.prompt},
          {"temperature", r.sampling.temperature},
          {"top_k", r.sampling.top_k},
          {"top_p", r.sampling.top_p},
          {"seed", r.sampling.seed},
          {"max_new_tokens", r.max_new_tokens},
          {"sample_stream", r.sample_stream},
          {"stop_token_ids", r.stop_token_ids},
          {"stop", r.stop},
          {"logprobs", r.logprobs},
          {"ignore_eos", r.ignore_eos}};
}

StepPlan::Submission submission_from(const json& j) {
  StepPlan::Submission s;
  s.ticket = j.at("ticket").get<uint64_t>();
  Request& r = s.request;
  r.prompt = j.at("prompt").get<std::vector<int32_t>>();
  r.sampling = {.temperature = j.at("temperature").get<double>(),
                .top_k = j.at("top_k").get<int>(),
                .top_p = j.at("top_p").get<double>(),
                .seed = j.at("seed").get<uint64_t>()};
  r.max_new_tokens = j.at("max_new_tokens").get<int64_t>();
  r.sample_stream = j.at("sample_stream").get<uint64_t>();
  r.stop_token_ids = j.at("stop_token_ids").get<std::vector<int32_t>>();
  r.stop = j.at("stop").get<std::vector<std::string>>();
  r.logprobs = j.at("logprobs").get<int>();
  r.ignore_eos = j.at("ignore_eos").get<bool>();
  return s;
}

// NOTE: CBOR keeps doubles and 64-bit seeds exact, so every rank samples with the leader's parameters.
std::vector<uint8_t> encode(const StepPlan& plan) {
  json j = {{"cancel", plan.cancel},
            {"admin", static_cast<int>(plan.admin)},
            {"scale_to", plan.scale_to},
            {"stop", plan.stop},
            {"submit", json::array()}};
  for (const StepPlan::Submission& s : plan.submit) j["submit"].push_back(request_json(s));
  return json::to_cbor(j);
}

StepPlan decode(const std::vector<uint8_t>& bytes) {
  const json j = json::from_cbor(bytes);
  StepPlan plan;
  plan.cancel = j.at("cancel").get<std::vector<uint64_t>>();
  plan.admin = static_cast<StepPlan::Admin>(j.at("admin").get<int>());
  plan.scale_to = j.at("scale_to").get<int>();
  plan.stop = j.at("stop").get<bool>();
  for (const json& s : j.at("submit")) plan.submit.push_back(submission_from(s));
  return plan;
}

}  // namespace

EpServing::EpServing(ExpertParallel& ep) : ep_(ep) {}

void EpServing::share(StepPlan& plan) {
  std::vector<uint8_t> bytes;
  if (leader()) bytes = encode(plan);
  int64_t size = static_cast<int64_t>(bytes.size());
  ep_.host().broadcast(&size, sizeof(size), 0);
  bytes.resize(static_cast<size_t>(size));
  ep_.host().broadcast(bytes.data(), size, 0);
  if (!leader()) plan = decode(bytes);
}

AdminAnswer EpServing::placement_answer() {
  const std::vector<std::vector<int64_t>> load = ep_.window_load();
  nlohmann::ordered_json layers = nlohmann::ordered_json::object();
  nlohmann::ordered_json imbalance = nlohmann::ordered_json::object();
  const auto placements = ep_.layer_placements();
  for (size_t i = 0; i < placements.size(); ++i) {
    const auto& [layer, placement] = placements[i];
    layers[std::to_string(layer)] = {{"ranks", placement.rank_experts}};
    imbalance[std::to_string(layer)] = ep::max_over_mean(placement, load[i], ep_.active_ranks());
  }
  return {.body = {{"epoch", ep_.epoch()},
                   {"n_ranks", ep_.size()},
                   {"active_ranks", ep_.active_ranks()},
                   {"layers", layers},
                   {"rank_load_max_over_mean", imbalance}}};
}

AdminAnswer EpServing::epoch_answer(const StepPlan& plan, const EpochPlan& decided) {
  // After a switch, its record; a decision that moved nothing took no time worth reporting.
  const bool switched = decided.move && !ep_.epochs().empty();
  const EpochRecord* record = switched ? &ep_.epochs().back() : nullptr;
  nlohmann::ordered_json body = {{"epoch", ep_.epoch()},
                                 {"moved_experts", record ? record->moved_experts : 0},
                                 {"predicted_max_over_mean", decided.predicted_max_over_mean},
                                 {"seconds", record ? record->seconds : 0.0}};
  if (plan.admin == StepPlan::Admin::scale) {
    body["new_data_parallel_size"] = ep_.active_ranks();
    body["message"] = fmt::format("Scaled to {} data parallel engines", ep_.active_ranks());
  }
  return {.body = std::move(body)};
}

std::optional<AdminAnswer> EpServing::start_admin(const StepPlan& plan) {
  if (plan.admin == StepPlan::Admin::none) return std::nullopt;
  if (plan.admin == StepPlan::Admin::placement) return placement_answer();
  while (ep_.migrating()) ep_.advance_migration();
  const int active = plan.admin == StepPlan::Admin::scale ? plan.scale_to : ep_.active_ranks();
  try {
    decided_ = ep_.begin_epoch(active, ep_.eplb().min_gain);
  } catch (const Error& e) {
    return AdminAnswer{.status = 409, .error = e.what()};
  }
  if (!decided_.move) return epoch_answer(plan, decided_);
  demanded_ = plan;
  return std::nullopt;
}

std::optional<AdminAnswer> EpServing::between_steps() {
  if (!ep_.migrating()) {
    if (!ep_.rebalance_due()) return std::nullopt;
    ep_.begin_epoch(ep_.active_ranks(), ep_.eplb().min_gain);
    return std::nullopt;
  }
  if (!ep_.advance_migration() || !demanded_) return std::nullopt;
  AdminAnswer answer = epoch_answer(*demanded_, decided_);
  demanded_.reset();
  return answer;
}

void EpServing::follow(Engine& engine) {
  std::map<uint64_t, RequestId> live;  // ticket -> engine id, as the leader's scheduler keeps them
  const auto forget_finished = [&](const StepResult& step) {
    for (const RequestOutput& out : step.outputs) {
      if (out.finish == FinishReason::none) continue;
      engine.forget(out.id);
      std::erase_if(live, [&](const auto& entry) { return entry.second == out.id; });
    }
  };
  while (true) {
    StepPlan plan;
    share(plan);
    for (StepPlan::Submission& s : plan.submit) {
      try {
        live[s.ticket] = engine.submit(std::move(s.request));
      } catch (const Error&) {
        // The leader refused it too (400 to its client).
      }
    }
    for (uint64_t ticket : plan.cancel) {
      const auto it = live.find(ticket);
      if (it == live.end()) continue;
      engine.cancel(it->second);
      engine.forget(it->second);
      live.erase(it);
    }
    if (plan.stop) return;
    start_admin(plan);
    if (engine.has_unfinished()) {
      try {
        forget_finished(engine.step());
      } catch (const Error&) {
        // NOTE: the leader's step failed alike (the ranks compute the same bytes): its requests end.
        for (const auto& [ticket, id] : live) {
          engine.cancel(id);
          engine.forget(id);
        }
        live.clear();
      }
    }
    between_steps();
  }
}

int64_t agreed_kv_memory(ExpertParallel& ep) {
  std::vector<int64_t> available(static_cast<size_t>(ep.size()), 0);  // [R]
  available[static_cast<size_t>(ep.rank())] = host_available_memory();
  ep.host().allreduce_sum(available);
  return *std::min_element(available.begin(), available.end());
}

}  // namespace moe::engine
