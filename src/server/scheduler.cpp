#include "scheduler.h"

#include <fmt/core.h>

#include "api_error.h"
#include "moe/core/check.h"

namespace moe::server {

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

void Channel::push(Event event) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

std::vector<Event> Channel::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  std::vector<Event> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

Scheduler::Scheduler(engine::Engine& engine, Metrics& metrics, int64_t max_waiting, engine::EpServing* ep,
                     std::function<void()> on_fatal)
    : engine_(engine), metrics_(metrics), max_waiting_(max_waiting), ep_(ep), on_fatal_(std::move(on_fatal)) {
  publish_gauges();
  thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() {
  stop();
}

Scheduler::Ticket Scheduler::submit(engine::Request request, Clock::time_point arrival) {
  Ticket ticket{.channel = std::make_shared<Channel>()};
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw ApiError(503, "the server is shutting down");
    const int64_t waiting = waiting_ + static_cast<int64_t>(inbox_.size());
    if (waiting >= max_waiting_)
      throw ApiError(503,
                     fmt::format("the server is busy: {} requests are waiting for a sequence (at most {}); "
                                 "retry later",
                                 waiting, max_waiting_));
    ticket.key = next_key_++;
    inbox_.push_back(
        {.key = ticket.key, .request = std::move(request), .arrival = arrival, .channel = ticket.channel});
  }
  wake_.notify_all();
  return ticket;
}

void Scheduler::cancel(uint64_t key) {
  {
    std::lock_guard lock(mutex_);
    cancels_.push_back(key);
  }
  wake_.notify_all();
}

void Scheduler::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::future<engine::AdminAnswer> Scheduler::admin(engine::StepPlan::Admin action, int scale_to) {
  MOE_CHECK(ep_, "admin actions need the expert-parallel ranks (moe serve --enable-expert-parallel)");
  std::promise<engine::AdminAnswer> answer;
  std::future<engine::AdminAnswer> future = answer.get_future();
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw ApiError(503, "the server is shutting down");
    if (action != engine::StepPlan::Admin::placement) {
      if (epoch_busy_)
        throw ApiError(409, "a rebalance or scaling is already under way: retry once it has switched");
      epoch_busy_ = true;
    }
    admin_.push_back({.action = action, .scale_to = scale_to, .answer = std::move(answer)});
  }
  wake_.notify_all();
  return future;
}

void Scheduler::rethrow_fatal() const {
  if (fatal_) std::rethrow_exception(fatal_);
}

void Scheduler::take_inbox(std::vector<Submission>& submissions, std::vector<uint64_t>& cancels,
                           std::optional<AdminRequest>& admin) {
  std::unique_lock lock(mutex_);
  wake_.wait(lock, [&] {
    return stopping_ || !inbox_.empty() || !cancels_.empty() || !admin_.empty() || engine_.has_unfinished() ||
           (ep_ && ep_->busy());
  });
  submissions.swap(inbox_);
  cancels.swap(cancels_);
  if (!admin_.empty()) {
    admin.emplace(std::move(admin_.front()));
    admin_.pop_front();
  }
}

engine::StepPlan Scheduler::share(const std::vector<Submission>& submissions, const std::vector<uint64_t>& cancels,
                                  const std::optional<AdminRequest>& admin) {
  engine::StepPlan plan;
  for (const Submission& s : submissions) plan.submit.push_back({.ticket = s.key, .request = s.request});
  plan.cancel = cancels;
  if (admin) {
    plan.admin = admin->action;
    plan.scale_to = admin->scale_to;
  }
  {
    std::lock_guard lock(mutex_);
    plan.stop = stopping_;
  }
  ep_->share(plan);
  return plan;
}

void Scheduler::answer_admin(engine::AdminAnswer answer) {
  // NOTE: free before the answer: a client that sends the next one as soon as it has this must not get 409.
  {
    std::lock_guard lock(mutex_);
    epoch_busy_ = false;
  }
  migrating_->set_value(std::move(answer));
  migrating_.reset();
}

void Scheduler::run() {
  try {
    loop();
  } catch (const Error& e) {
    // The ranks cannot run together any more (a transport error): every request ends with the error, the
    // server stops, and the command reports it.
    fatal_ = std::current_exception();
    failed_ = true;
    fail_all(500, fmt::format("the expert-parallel ranks failed: {}", e.what()));
    if (migrating_) answer_admin({.status = 500, .error = e.what()});
    if (on_fatal_) on_fatal_();
  }
  fail_all(503, "the server is shutting down");
  std::lock_guard lock(mutex_);
  stopping_ = true;
  for (Submission& s : inbox_) s.channel->push({.error_status = 503, .error = "the server is shutting down"});
  inbox_.clear();
  for (AdminRequest& a : admin_) a.answer.set_value({.status = 503, .error = "the server is shutting down"});
  admin_.clear();
  if (migrating_) {
    migrating_->set_value({.status = 503, .error = "the server is shutting down"});
    migrating_.reset();
  }
}

void Scheduler::loop() {
  std::vector<Submission> submissions;
  std::vector<uint64_t> cancels;
  while (true) {
    submissions.clear();
    cancels.clear();
    std::optional<AdminRequest> admin;
    take_inbox(submissions, cancels, admin);
    // NOTE: across ranks the other ranks apply this plan in this order: submits, cancels, stop, the admin
    // action, the step, the work between steps (engine/ep_serving.cpp, EpServing::follow).
    engine::StepPlan plan;
    if (ep_) plan = share(submissions, cancels, admin);
    for (Submission& s : submissions) {
      const auto prompt_tokens = static_cast<int64_t>(s.request.prompt.size());
      try {
        const engine::RequestId id = engine_.submit(std::move(s.request));
        live_[id] = {.key = s.key,
                     .channel = s.channel,
                     .arrival = s.arrival,
                     .last_token = s.arrival,
                     .prompt_tokens = prompt_tokens};
        ids_[s.key] = id;
      } catch (const Error& e) {
        s.channel->push({.error_status = 400, .error = e.what()});
      }
    }
    for (uint64_t key : cancels) {
      const auto it = ids_.find(key);
      if (it == ids_.end()) continue;  // finished already
      engine_.cancel(it->second);
      finish(it->second, engine::FinishReason::cancelled);
    }
    if (ep_) {
      if (plan.stop) return;
    } else {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    if (admin) {
      std::optional<engine::AdminAnswer> answer = ep_->start_admin(plan);
      if (!answer) {
        migrating_ = std::move(admin->answer);  // answered at the switch
      } else {
        if (admin->action != engine::StepPlan::Admin::placement) {
          std::lock_guard lock(mutex_);
          epoch_busy_ = false;
        }
        admin->answer.set_value(std::move(*answer));
      }
    }
    if (engine_.has_unfinished()) {
      try {
        const engine::StepResult step = engine_.step();
        // NOTE: published before any client sees the step's tokens, so that a client reading /metrics after
        // its response finds the step's counters there (after as well: delivering finishes requests).
        publish_gauges();
        deliver(step);
      } catch (const Error& e) {
        // NOTE: a failed forward leaves the batch's KV state unknown: its requests end with the error.
        fail_all(500, fmt::format("the engine failed: {}", e.what()));
      }
    }
    publish_gauges();
    if (ep_)
      if (std::optional<engine::AdminAnswer> answer = ep_->between_steps()) answer_admin(std::move(*answer));
  }
}

void Scheduler::deliver(const engine::StepResult& step) {
  const Clock::time_point now = Clock::now();
  for (const engine::RequestOutput& out : step.outputs) {
    Live& live = live_.at(out.id);
    if (!out.new_tokens.empty()) {
      if (live.generated == 0)
        metrics_.observe_first_token(seconds_between(live.arrival, now));
      else
        metrics_.observe_inter_token(seconds_between(live.last_token, now));
      live.last_token = now;
      live.generated += static_cast<int64_t>(out.new_tokens.size());
    }
    live.channel->push({.tokens = out.new_tokens, .text = out.new_text, .logprobs = out.logprobs});
    if (out.finish != engine::FinishReason::none) finish(out.id, out.finish);
  }
}

void Scheduler::finish(engine::RequestId id, engine::FinishReason reason) {
  Live& live = live_.at(id);
  metrics_.count_finished(reason, live.prompt_tokens, live.generated);
  live.channel->push({.finish = reason, .prompt_tokens = live.prompt_tokens});
  ids_.erase(live.key);
  live_.erase(id);
  engine_.forget(id);
}

void Scheduler::fail_all(int status, const std::string& message) {
  for (auto& [id, live] : live_) {
    engine_.cancel(id);
    metrics_.count_finished(engine::FinishReason::cancelled, live.prompt_tokens, live.generated);
    live.channel->push({.error_status = status, .error = message});
    engine_.forget(id);
  }
  live_.clear();
  ids_.clear();
}

void Scheduler::publish_gauges() {
  const engine::EngineStats& stats = engine_.stats();
  metrics_.set_engine({.running = engine_.num_running(),
                       .waiting = engine_.num_waiting(),
                       .kv = engine_.kv_usage(),
                       .preemptions = stats.preemptions,
                       .layers = stats.layers});
  std::lock_guard lock(mutex_);
  waiting_ = engine_.num_waiting();
}

}  // namespace moe::server
