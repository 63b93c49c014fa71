// The HTTP routes of moe::server::Server (cpp-httplib): authentication, the OpenAI endpoints over the
// scheduler, models, health and metrics, and OpenAI error objects for every failure httplib itself answers.
#include <fmt/core.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include "api_error.h"
#include "client_socket.h"
#include "metrics.h"
#include "moe/core/check.h"
#include "server/server.h"
#include "openai_request.h"
#include "openai_response.h"
#include "scheduler.h"
#include "engine/ep_serving.h"

namespace moe::server {

namespace {

using nlohmann::json;
using namespace std::chrono_literals;

void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& param = "") {
  res.status = status;
  res.set_content(dump(error_json(status, message, param)), "application/json");
}

// One streamed response's state, shared by the content provider and its releaser.
struct Stream {
  Scheduler::Ticket ticket{};
  ResponseHeader header{};
  LogprobWriter logprobs;
  bool want_logprobs = false;
  bool include_usage = false;
  bool first = true;
  bool done = false;  // the last event was written (or the request failed): nothing to cancel
  int64_t completion_tokens = 0;
};

}  // namespace

struct Server::Impl {
  Impl(engine::Engine& engine, ServerOptions options) : engine(engine), options(std::move(options)) {
    if (this->options.max_waiting == 0) this->options.max_waiting = engine.options().max_num_seqs;
    MOE_CHECK(this->options.max_waiting >= 1, "max_waiting must be >= 1, got {}", this->options.max_waiting);
    context = {.served_model_name = this->options.served_model_name,
               .tokenizer = engine.tokenizer(),
               .vocab_size = engine.info().vocab_size,
               .max_model_len = engine.max_model_len()};
    if (this->options.chat_template)
      context.render_chat = [&chat = *this->options.chat_template](const nlohmann::ordered_json& messages,
                                                                   const nlohmann::ordered_json& kwargs) {
        return chat.render(messages, /*add_generation_prompt=*/true, kwargs);
      };
    // NOTE: a transport failure ends the scheduler's loop from its own thread: the listener stops there (not
    // stop(), which joins that thread), and run() reports the failure.
    scheduler = std::make_unique<Scheduler>(engine, metrics, this->options.max_waiting, this->options.ep,
                                            [this] { http.stop(); });
    routes();
    if (this->options.ep) admin_routes();
  }

  void routes();
  void admin_routes();
  // Queues an admin action and answers with its result.
  void admin(httplib::Response& res, engine::StepPlan::Admin action, int scale_to = 0);
  void completion(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  void respond_whole(const httplib::Request& req, httplib::Response& res, const ApiRequest& api,
                     Scheduler::Ticket ticket);
  void respond_stream(httplib::Response& res, const ApiRequest& api, Scheduler::Ticket ticket);

  engine::Engine& engine;
  ServerOptions options;
  RequestContext context;
  Metrics metrics;
  std::unique_ptr<Scheduler> scheduler;
  httplib::Server http;
  int port = 0;
  std::atomic<bool> stopped{false};
  std::atomic<bool> listening{false};  // run() is past its stop check and about to listen
  std::atomic<int> open_streams{0};  // streamed responses not yet released
};

void Server::Impl::routes() {
  // Every waiting or running request holds an HTTP thread, and a few more answer health, metrics and
  // refusals (503) beside them.
  const auto threads =
      static_cast<size_t>(std::min<int64_t>(engine.options().max_num_seqs + options.max_waiting + 16, 1024));
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // NOTE: SO_REUSEADDR (a restart binds over TIME_WAIT) but not httplib's default SO_REUSEPORT, with which a
  // second server would share a port already in use instead of failing.
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  http.set_payload_max_length(kMaxBodyBytes);
  http.set_read_timeout(10, 0);
  http.set_write_timeout(10, 0);
  http.set_keep_alive_timeout(2);

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + options.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, 401,
               "missing or wrong API key: send the header 'Authorization: Bearer KEY' with the key "
               "the server was started with (--api-key)");
    return httplib::Server::HandlerResponse::Handled;
  });
  // What httplib answers itself (an unknown path, a body over the limit, a malformed request) as OpenAI
  // errors; handlers' own errors already have a body.
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string message =
            fmt::format("{} {}: the request failed with HTTP status {}", req.method, req.path, res.status);
        if (res.status == 404)
          message = fmt::format("there is no {} {} on this server", req.method, req.path);
        if (res.status == 413)
          message = fmt::format("the request body is larger than {} bytes", kMaxBodyBytes);
        send_error(res, res.status, message);
        return httplib::Server::HandlerResponse::Handled;
      }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string message = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      message = fmt::format("internal error: {}", e.what());
    } catch (...) {
    }
    send_error(res, 500, message);
  });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    if (req.path.starts_with("/v1/")) metrics.count_response(res.status);
  });

  http.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(), "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json model = {{"id", options.served_model_name},
                        {"object", "model"},
                        {"created", 0},
                        {"owned_by", "moe"},
                        {"max_model_len", engine.max_model_len()}};
    res.set_content(dump({{"object", "list"}, {"data", json::array({model})}}), "application/json");
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    completion(req, res, Endpoint::completions);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    completion(req, res, Endpoint::chat_completions);
  });
}

void Server::Impl::admin_routes() {
  http.Post("/admin/rebalance", [this](const httplib::Request&, httplib::Response& res) {
    admin(res, engine::StepPlan::Admin::rebalance);
  });
  http.Get("/admin/placement", [this](const httplib::Request&, httplib::Response& res) {
    admin(res, engine::StepPlan::Admin::placement);
  });
  http.Post("/scale_elastic_ep", [this](const httplib::Request& req, httplib::Response& res) {
    const int world = options.ep->world_size();
    const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    const json* size = body.is_object() && body.contains("new_data_parallel_size") ? &body["new_data_parallel_size"]
                                                                                    : nullptr;
    if (!size || !size->is_number_integer() || size->get<int64_t>() < 1 || size->get<int64_t>() > world)
      return send_error(res, 400,
                        fmt::format("give {{\"new_data_parallel_size\": N}} with N from 1 to {} (the ranks "
                                    "launched), got {}", world, req.body.substr(0, 200)),
                        "new_data_parallel_size");
    admin(res, engine::StepPlan::Admin::scale, size->get<int>());
  });
}

void Server::Impl::admin(httplib::Response& res, engine::StepPlan::Admin action, int scale_to) {
  try {
    const engine::AdminAnswer answer = scheduler->admin(action, scale_to).get();
    if (answer.status != 200) return send_error(res, answer.status, answer.error);
    res.set_content(answer.body.dump(), "application/json");
  } catch (const ApiError& e) {
    send_error(res, e.status, e.what(), e.param);
  }
}

void Server::Impl::completion(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  const Clock::time_point arrival = Clock::now();
  try {
    const ApiRequest api = parse_request(req.body, endpoint, context);
    Scheduler::Ticket ticket = scheduler->submit(api.engine, arrival);
    if (api.stream)
      respond_stream(res, api, std::move(ticket));
    else
      respond_whole(req, res, api, std::move(ticket));
  } catch (const ApiError& e) {
    send_error(res, e.status, e.what(), e.param);
  }
}

void Server::Impl::respond_whole(const httplib::Request& req, httplib::Response& res, const ApiRequest& api,
                                 Scheduler::Ticket ticket) {
  const ClientSocket client(req.remote_addr, req.remote_port, req.local_port);
  std::string text;
  std::vector<engine::TokenLogprob> logprobs;
  int64_t completion_tokens = 0;
  while (true) {
    const std::vector<Event> events = ticket.channel->wait(100ms);
    // A client that has gone frees its sequence now, not when the whole completion is written to no one.
    // NOTE: 499, nginx's "client closed request", so that /metrics does not count the request as answered.
    if (client.closed()) {
      scheduler->cancel(ticket.key);
      return send_error(res, 499, "the client closed the connection before the response");
    }
    for (const Event& event : events) {
      if (event.error_status) return send_error(res, event.error_status, event.error);
      text += event.text;
      completion_tokens += static_cast<int64_t>(event.tokens.size());
      logprobs.insert(logprobs.end(), event.logprobs.begin(), event.logprobs.end());
      if (event.finish == engine::FinishReason::none) continue;
      LogprobWriter writer(api.endpoint, context.tokenizer);
      const json lp = api.engine.logprobs >= 0 ? writer.write(logprobs) : json(nullptr);
      const ResponseHeader header = new_header(api.endpoint, options.served_model_name);
      res.set_content(
          dump(full_response(header, text, event.finish, lp, event.prompt_tokens, completion_tokens)),
          "application/json");
      return;
    }
  }
}

void Server::Impl::respond_stream(httplib::Response& res, const ApiRequest& api, Scheduler::Ticket ticket) {
  auto stream = std::make_shared<Stream>(Stream{.ticket = std::move(ticket),
                                                .header = new_header(api.endpoint, options.served_model_name),
                                                .logprobs = LogprobWriter(api.endpoint, context.tokenizer),
                                                .want_logprobs = api.engine.logprobs >= 0,
                                                .include_usage = api.include_usage});
  const auto provider = [stream](size_t, httplib::DataSink& sink) {
    const auto write = [&](const std::string& data) { return sink.write(data.data(), data.size()); };
    for (Event& event : stream->ticket.channel->wait(100ms)) {
      if (event.error_status) {
        stream->done = true;
        write(sse_event(error_json(event.error_status, event.error)));
        write(kSseDone);
        sink.done();
        return true;
      }
      if (!event.tokens.empty() || !event.text.empty()) {
        const json lp = stream->want_logprobs ? stream->logprobs.write(event.logprobs) : json(nullptr);
        const bool first = std::exchange(stream->first, false);
        stream->completion_tokens += static_cast<int64_t>(event.tokens.size());
        // NOTE: a failed write is a client that has gone: returning false ends the response, and the
        // releaser cancels the request.
        if (!write(sse_event(stream_chunk(stream->header, event.text, lp, std::nullopt, first))))
          return false;
      }
      if (event.finish == engine::FinishReason::none) continue;
      stream->done = true;
      bool ok = write(sse_event(stream_chunk(stream->header, "", nullptr, event.finish, stream->first)));
      if (stream->include_usage)
        ok = ok &&
             write(sse_event(usage_chunk(stream->header, event.prompt_tokens, stream->completion_tokens)));
      ok = ok && write(kSseDone);
      if (ok) sink.done();
      return ok;
    }
    return true;
  };
  Scheduler* scheduler_ptr = scheduler.get();
  ++open_streams;
  res.set_chunked_content_provider("text/event-stream", provider, [this, stream, scheduler_ptr](bool) {
    if (!stream->done) scheduler_ptr->cancel(stream->ticket.key);
    --open_streams;
  });
}

Server::Server(engine::Engine& engine, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(options))) {}

Server::~Server() {
  stop();
}

void Server::bind() {
  Impl& s = *impl_;
  s.port = s.options.port == 0                                   ? s.http.bind_to_any_port(s.options.host)
           : s.http.bind_to_port(s.options.host, s.options.port) ? s.options.port
                                                                 : -1;
  MOE_CHECK(s.port > 0, "cannot listen on {}:{} (in use, or not an address of this machine)", s.options.host,
            s.options.port);
}

int Server::port() const {
  return impl_->port;
}

void Server::run() {
  // NOTE: a client that closes its socket mid-response must not kill the process with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  // NOTE: httplib's stop() is a no-op until listen has started, so a stop() between here and there (a SIGTERM
  // right after the "serving" line) left listen running for good: stop() waits for listen once this is set,
  // and a stop() before it is seen here.
  impl_->listening = true;
  if (impl_->stopped) return;
  impl_->http.listen_after_bind();
  if (!impl_->scheduler->failed()) return;
  stop();
  impl_->scheduler->rethrow_fatal();
}

void Server::stop() {
  if (impl_->stopped.exchange(true)) return;
  impl_->scheduler->stop();  // every request in flight gets its error event
  // NOTE: httplib stops writing a chunked response once it shuts down, so a stream between two provider
  // calls would lose its error event and [DONE]: the streams drain first (bounded, for a client that reads
  // nothing).
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (impl_->open_streams.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  if (impl_->listening)
    while (!impl_->http.is_running() && std::chrono::steady_clock::now() < deadline + 5s)
      std::this_thread::sleep_for(1ms);
  impl_->http.stop();
}

}  // namespace moe::server
