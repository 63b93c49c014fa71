#pragma once
// The thread that owns the Engine: HTTP threads hand it requests and cancels, it steps the engine while
// anything is unfinished (new requests join at the next step) and hands every request's tokens, text and
// finish to that request's channel as they come. It records the request metrics (time to first token,
// inter-token latency, finished requests and their tokens) and the engine's gauges after each step.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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
  Scheduler(engine::Engine& engine, Metrics& metrics, int64_t max_waiting);
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
  void run();
  void take_inbox(std::vector<Submission>& submissions, std::vector<uint64_t>& cancels);
  void deliver(const engine::StepResult& step);
  void finish(engine::RequestId id, engine::FinishReason reason);
  void fail_all(int status, const std::string& message);
  void publish_gauges();

  engine::Engine& engine_;
  Metrics& metrics_;
  int64_t max_waiting_;

  std::mutex mutex_;  // guards the inbox, stopping_ and waiting_
  std::condition_variable wake_;
  std::vector<Submission> inbox_;
  std::vector<uint64_t> cancels_;
  bool stopping_ = false;
  int64_t waiting_ = 0;  // the engine's waiting requests after the last step
  uint64_t next_key_ = 1;

  // The scheduler thread's own.
  std::map<engine::RequestId, Live> live_;
  std::map<uint64_t, engine::RequestId> ids_;  // key -> engine id
  std::thread thread_;
};

}  // namespace moe::server
