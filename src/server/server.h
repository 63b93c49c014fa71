#pragma once
// `moe serve`'s server: an OpenAI-compatible HTTP API over an Engine, with continuous batching.
//   POST /v1/completions, POST /v1/chat/completions   (stream: server-sent events)
//   GET /v1/models, GET /health, GET /metrics          (Prometheus text; src/server/metrics.h names the
//   series)
//   across ranks (ServerOptions::ep): POST /admin/rebalance, GET /admin/placement, POST /scale_elastic_ep
//   (409: a rebalance or scaling already under way, or a placement refused; 400: a size outside 1 .. ranks)
// Errors are OpenAI's error object with the status: 400 bad JSON or field, 404 unknown model or path, 401
// missing or wrong bearer token (with api_key set; every endpoint but /health), 413 a body over
// kMaxBodyBytes, 503 a full queue or a stopping server.
// Requests run on a pool of HTTP threads; one scheduler thread owns the engine (scheduler.h).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "moe/engine/engine.h"

namespace moe::engine {
class EpServing;  // engine/ep_serving.h
}
#include "text/chat_template.h"

namespace moe::server {

// The largest request body read.
inline constexpr size_t kMaxBodyBytes = size_t{4} << 20;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                // 0: any free port (port() says which)
  std::string served_model_name;  // what "model" must name and /v1/models lists
  std::string api_key;            // empty: no authentication
  // The chat template of /v1/chat/completions; none: it answers 400.
  std::optional<ChatTemplate> chat_template{};
  // The most requests waiting for a sequence before new ones are refused (503); 0: the engine's max_num_seqs.
  int64_t max_waiting = 0;
  // Rank 0 of the expert-parallel ranks (moe serve --enable-expert-parallel): every step is shared with the
  // other ranks, and the admin endpoints exist. Must outlive the server.
  engine::EpServing* ep = nullptr;
};

class Server {
 public:
  // `engine` must outlive the server, which steps it from its own thread from now on.
  Server(engine::Engine& engine, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Listens on host:port; throws moe::Error naming the address when it cannot.
  void bind();
  // The port bound (after bind()).
  int port() const;
  // Answers requests until stop(); blocks. Throws moe::Error when the expert-parallel ranks failed (the
  // server has stopped then).
  void run();
  // From any thread: unfinished requests are answered with an error (503), the listener closes, run()
  // returns.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe::server
