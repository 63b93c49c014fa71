#pragma once
// The thread that owns the Engine: HTTP threads hand it requests and cancels, it steps the engine while
// anything is unfinished (new requests join at the next step) and hands every request's tokens, text and
// finish to that request's channel as they come. It records the request metrics (time to first token,
// inter-token latency, finished requests and their tokens) and the engine's gauges after each step.
// Across ranks (an EpServing), the thread is the leader's loop: before each step it shares what it takes
// from the inbox with the other ranks (engine/ep_serving.h), then applies it in the order they do, and
// between steps it runs the elastic placement's work and answers the admin actions.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/ep_serving.h"
#include "metrics.h"
#include "moe/engine/engine.h"

namespace moe::server {

using Clock = std::chrono::steady_clock;

// What the scheduler tells one request, in order: tokens (and the text they made final) as they come,
// then one event with the finish reason or an error.
struct Event {
  std::vector<int32_t> tokens{};
  std::string text{};
  std::vector<engine::TokenLogprob> logprobs{};
  engine::FinishReason finish = engine::FinishReason::none;
  int error_status = 0;  // set with error: the request failed
  std::string error{};
  int64_t prompt_tokens = 0;  // set with the finish
};

class Channel {
 public:
  void push(Event event);
  // The events that came, waiting up to `timeout` for the first.
  std::vector<Event> wait(std::chrono::milliseconds timeout);

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Event> events_;
};

class Scheduler {
 public:
  // At most `max_waiting` requests wait for a sequence (queued here or in the engine); more are refused.
  // Starts the thread.
  // `ep`, when given (rank 0 of moe serve --enable-expert-parallel), must outlive the scheduler. `on_fatal`
  // is called from the thread when the ranks can no longer run together (a transport error): the
  // requests have their error, and fatal() rethrows it.
  Scheduler(engine::Engine& engine, Metrics& metrics, int64_t max_waiting, engine::EpServing* ep = nullptr,
            std::function<void()> on_fatal = {});
  ~Scheduler();  // stop()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  struct Ticket {
    uint64_t key = 0;
    std::shared_ptr<Channel> channel;
  };
  // Queues `request`, which arrived at `arrival`. Throws ApiError 503 when the queue is full or the
  // server is stopping.
  Ticket submit(engine::Request request, Clock::time_point arrival);
  // The client of `key` has gone: its request is cancelled and its KV blocks freed (nothing once finished).
  void cancel(uint64_t key);
  // Every unfinished request gets an error event (503, the server is stopping); the thread ends.
  void stop();
  // Across ranks: queues an admin action (rebalance, placement, scale) for the next step's plan; the future
  // gets its answer (at the migration's switch for one that moves). A rebalance or scaling while another is
  // queued or under way is refused with 409 at once, not run twice.
  std::future<engine::AdminAnswer> admin(engine::StepPlan::Admin action, int scale_to = 0);
  // Whether a transport error stopped the ranks' loop (then stop() and rethrow_fatal() report it).
  bool failed() const { return failed_.load(); }
  // Rethrows that error, after stop().
  void rethrow_fatal() const;

 private:
  struct Submission {
    uint64_t key;
    engine::Request request;
    Clock::time_point arrival;
    std::shared_ptr<Channel> channel;
  };
  struct Live {
    uint64_t key;
    std::shared_ptr<Channel> channel;
    Clock::time_point arrival, last_token;
    int64_t prompt_tokens = 0, generated = 0;
  };
  struct AdminRequest {
    engine::StepPlan::Admin action;
    int scale_to;
    std::promise<engine::AdminAnswer> answer;
  };
  void run();
  void loop();
  void take_inbox(std::vector<Submission>& submissions, std::vector<uint64_t>& cancels,
                  std::optional<AdminRequest>& admin);
  // Across ranks: the plan of this round, shared with the other ranks.
  engine::StepPlan share(const std::vector<Submission>& submissions, const std::vector<uint64_t>& cancels,
                         const std::optional<AdminRequest>& admin);
  // The rebalance or scaling under way gets its answer (a new one may come).
  void answer_admin(engine::AdminAnswer answer);
  void deliver(const engine::StepResult& step);
  void finish(engine::RequestId id, engine::FinishReason reason);
  void fail_all(int status, const std::string& message);
  void publish_gauges();

  engine::Engine& engine_;
  Metrics& metrics_;
  int64_t max_waiting_;
  engine::EpServing* ep_;
  std::function<void()> on_fatal_;
  std::exception_ptr fatal_;
  std::atomic<bool> failed_{false};

  std::mutex mutex_;  // guards the inbox, stopping_ and waiting_
  std::condition_variable wake_;
  std::vector<Submission> inbox_;
  std::vector<uint64_t> cancels_;
  std::deque<AdminRequest> admin_;
  bool epoch_busy_ = false;  // a rebalance or scaling queued or under way
  bool stopping_ = false;
  int64_t waiting_ = 0;  // the engine's waiting requests after the last step
  uint64_t next_key_ = 1;

  // The scheduler thread's own.
  std::map<engine::RequestId, Live> live_;
  std::map<uint64_t, engine::RequestId> ids_;  // key -> engine id
  std::optional<std::promise<engine::AdminAnswer>> migrating_;  // the admin action answered at the switch
  std::thread thread_;
};

}  // namespace moe::server
