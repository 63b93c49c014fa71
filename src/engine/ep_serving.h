#pragma once
// moe serve across ranks (--enable-expert-parallel): one engine replica a rank, stepped in lockstep. Rank 0
// (the leader) serves HTTP and schedules; before every step it broadcasts what changed since the last one
// (a StepPlan: new requests with their parameters and resolved seeds, cancellations, an admin action,
// shutdown), and every rank applies the same plan to its own replica in the same order: submits, cancels,
// the admin action, the step, then the elastic placement's work between steps. An engine's schedule
// depends only on the calls it gets, so every rank runs the same step (its MoE blocks exchange rows with
// the others' through the EP layer) and picks the same tokens; only the leader answers clients.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/expert_parallel.h"
#include "moe/engine/engine.h"

namespace moe::engine {

// What the leader broadcasts before a step.
struct StepPlan {
  struct Submission {
    uint64_t ticket = 0;  // the leader's handle for the request (its cancellations name it)
    Request request;
  };
  enum class Admin : uint8_t { none, rebalance, placement, scale };
  std::vector<Submission> submit{};  // in order; one the engine refuses is refused on every rank alike
  std::vector<uint64_t> cancel{};    // tickets of submitted requests, after the submits
  Admin admin = Admin::none;
  int scale_to = 0;   // Admin::scale: the new number of active ranks
  bool stop = false;  // the server stops: every rank leaves its loop before the step
};

// The answer to an admin action, on the leader: 200 with `body`, or an error status with `error`.
struct AdminAnswer {
  int status = 200;
  nlohmann::ordered_json body{};
  std::string error{};
};

class EpServing {
 public:
  // `ep` is the composition of the model's MoE blocks (EplbOptions::between_steps set); it must outlive this.
  explicit EpServing(ExpertParallel& ep);

  bool leader() const { return ep_.rank() == 0; }
  int world_size() const { return ep_.size(); }

  // The leader's plan to every rank: the leader passes its plan, the others get it. Collective.
  void share(StepPlan& plan);
  // Runs the plan's admin action. Collective. The answer when it is ready now (the placement; a rebalance
  // that moves nothing; a refusal, 409 with the reason); nullopt when a migration started, answered by
  // between_steps at its switch. A migration already under way (a due one) finishes first.
  std::optional<AdminAnswer> start_admin(const StepPlan& plan);
  // After each step (or each idle round): a migration copies its next layer or switches, else a due
  // rebalance starts. Collective. The demanded action's answer at its switch.
  std::optional<AdminAnswer> between_steps();
  // Whether between_steps has work without a step: a migration under way.
  bool busy() const { return ep_.migrating(); }

  // The ranks other than the leader: apply every plan to `engine` until the leader's stop. Collective with
  // the leader's loop (server/scheduler.cpp, which applies the same plan in the same order).
  void follow(Engine& engine);

 private:
  AdminAnswer placement_answer();
  AdminAnswer epoch_answer(const StepPlan& plan, const EpochPlan& decided);

  ExpertParallel& ep_;
  std::optional<StepPlan> demanded_;  // the admin action whose migration is under way
  EpochPlan decided_{};
};

// The least host memory available over the ranks (before the model loads): EngineOptions::kv_memory_bytes,
// so that every replica's KV pool has the same blocks. Collective.
int64_t agreed_kv_memory(ExpertParallel& ep);

}  // namespace moe::engine
