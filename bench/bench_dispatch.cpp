// `mpirun -np R moe bench --dispatch`: expert-parallel dispatch and combine (ep::EpExchange) without the
// expert compute, against a plain all-to-all of the same bytes measured in the same run.
//   dispatch: route locally (pairs -> destination ranks), encode rows to the wire format, exchange counts,
//             all-to-all-v of rows and (slot, weight) pairs, decode to fp32, index the batch by local slot
//   combine:  all-to-all-v of fp32 partial sums back to the source, add them there (the "experts" are the
//             identity: the partial of a copy is its received row)
// Each timed region starts after a barrier; a region's time is the slowest rank's, the median over repeats.
#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>

#include "bench/bench.h"
#include "core/output_file.h"
#include "ep/dispatch_combine.h"
#include "moe/layer/random_weights.h"

namespace moe::cli {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

// Uniform random routing: k distinct experts per token, weights 1/k. Seeded by rank, so ranks differ.
TopK uniform_topk(int64_t n_tokens, int n_experts, int top_k, uint64_t seed) {
  TopK topk{.ids = Tensor::empty(DType::I32, {n_tokens, top_k}),       // [T, k]
            .weights = Tensor::empty(DType::F32, {n_tokens, top_k})};  // [T, k]
  std::mt19937_64 rng(seed);
  std::vector<int32_t> experts(n_experts);
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::iota(experts.begin(), experts.end(), 0);
    for (int j = 0; j < top_k; ++j) {  // partial Fisher-Yates: the first k of a random permutation
      std::swap(experts[j], experts[j + rng() % (n_experts - j)]);
      topk.ids.data_as<int32_t>()[t * top_k + j] = experts[j];
      topk.weights.data_as<float>()[t * top_k + j] = 1.0f / static_cast<float>(top_k);
    }
  }
  return topk;
}

// Times f on every rank `repeats` times (after one warm-up), a barrier before each; returns the median over
// repeats of the slowest rank's time, in µs.
double median_slowest_us(ep::Communicator& comm, int repeats, const std::function<void()>& f) {
  const int R = comm.size();
  std::vector<int64_t> ns(static_cast<size_t>(repeats) * R, 0);  // [repeats, R]; each rank fills its column
  for (int i = -1; i < repeats; ++i) {
    comm.barrier();
    const auto start = Clock::now();
    f();
    const int64_t elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
    if (i >= 0) ns[static_cast<size_t>(i) * R + comm.rank()] = elapsed;
  }
  comm.allreduce_sum(ns);
  std::vector<double> slowest(repeats);
  for (int i = 0; i < repeats; ++i) slowest[i] = *std::max_element(ns.begin() + i * R, ns.begin() + (i + 1) * R) * 1e-3;
  std::sort(slowest.begin(), slowest.end());
  return slowest[repeats / 2];
}

// Mean over ranks of a per-rank count.
double mean_over_ranks(ep::Communicator& comm, int64_t value) {
  std::vector<int64_t> v = {value};
  comm.allreduce_sum(v);
  return static_cast<double>(v[0]) / comm.size();
}

// Largest resident set of any rank so far, in MiB.
double max_rss_mib(ep::Communicator& comm) {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::vector<int64_t> kib(comm.size(), 0);
  kib[comm.rank()] = usage.ru_maxrss;
  comm.allreduce_sum(kib);
  return static_cast<double>(*std::max_element(kib.begin(), kib.end())) / 1024.0;
}

namespace {

double gbps(double bytes, double us) { return us > 0 ? bytes / (us * 1e-6) / 1e9 : 0.0; }

// The plain all-to-all of `bytes_per_rank` off-rank bytes per rank: (R - 1) blocks to the peers, plus the
// block each rank copies to itself (timed, not counted).
double peer_alltoall_us(ep::Communicator& comm, double bytes_per_rank, int repeats) {
  const int R = comm.size();
  const int64_t block = static_cast<int64_t>(std::ceil(bytes_per_rank / (R - 1)));
  std::vector<uint8_t> send(static_cast<size_t>(block) * R, 1), recv(static_cast<size_t>(block) * R, 0);  // [R, block]
  return median_slowest_us(comm, repeats, [&] { comm.alltoall(send.data(), recv.data(), block); });
}

DispatchBenchRow run_one(ep::Communicator& comm, const DispatchBenchArgs& a, int64_t T, ep::Transfer wire) {
  const int R = comm.size();
  DispatchBenchRow row{.ranks = R, .tokens = T, .hidden = a.hidden, .n_experts = a.n_experts, .top_k = a.top_k,
                       .wire = std::string(ep::transfer_name(wire))};
  {
    const Tensor x = random_tensor({T, a.hidden}, 1.0f, 700 + comm.rank());  // [T, H] F32
    const TopK topk = uniform_topk(T, a.n_experts, a.top_k, 900 + comm.rank());
    ep::EpExchange exchange(comm, ep::contiguous_placement(a.n_experts, R), wire, a.top_k);
    int64_t dispatch_bytes = 0, combine_bytes = 0;
    row.dispatch_us = median_slowest_us(comm, a.repeats, [&] {
      exchange.dispatch(x, topk, /*copy_rows=*/false);
      dispatch_bytes = exchange.stats().bytes_sent;
    });
    row.combine_us = median_slowest_us(comm, a.repeats, [&] {
      const int64_t before = exchange.stats().bytes_sent;  // NOTE: combine adds to the last dispatch's count
      Tensor out = Tensor::empty(DType::F32, {T, a.hidden});  // [T, H], made per combine as the layer's is
      exchange.combine(exchange.received_x(), out);
      combine_bytes = exchange.stats().bytes_sent - before;
    });
    row.copies_per_token = mean_over_ranks(comm, exchange.stats().copies_sent) / static_cast<double>(T);
    row.dispatch_bytes_per_rank = mean_over_ranks(comm, dispatch_bytes);
    row.combine_bytes_per_rank = mean_over_ranks(comm, combine_bytes);
  }  // the exchange's buffers are freed before the peer's are made
  row.peer_dispatch_us = peer_alltoall_us(comm, row.dispatch_bytes_per_rank, a.repeats);
  row.peer_combine_us = peer_alltoall_us(comm, row.combine_bytes_per_rank, a.repeats);
  row.max_rss_mib = max_rss_mib(comm);
  return row;
}

}  // namespace

std::vector<DispatchBenchRow> run_dispatch_bench(ep::Communicator& comm, const DispatchBenchArgs& a) {
  MOE_CHECK(comm.size() >= 2, "moe bench --dispatch measures traffic between ranks: run it under mpirun -np R with "
            "R >= 2 (this run has {})", comm.size());
  MOE_CHECK(a.hidden >= 1 && a.top_k >= 1 && a.top_k <= a.n_experts && a.repeats >= 1,
            "moe bench --dispatch: hidden {}, top-k {} of {} experts, {} repeats", a.hidden, a.top_k, a.n_experts,
            a.repeats);
  std::vector<DispatchBenchRow> rows;
  for (int64_t T : a.tokens)
    for (ep::Transfer wire : a.wires) rows.push_back(run_one(comm, a, T, wire));
  return rows;
}

nlohmann::json to_json(const DispatchBenchRow& r) {
  return {{"ranks", r.ranks},
          {"tokens_per_rank", r.tokens},
          {"H", r.hidden},
          {"E", r.n_experts},
          {"k", r.top_k},
          {"wire", r.wire},
          {"routing", "uniform"},
          {"copies_per_token", r.copies_per_token},
          {"dispatch_us", r.dispatch_us},
          {"dispatch_bytes_per_rank", r.dispatch_bytes_per_rank},
          {"dispatch_gbps", r.dispatch_gbps()},
          {"combine_us", r.combine_us},
          {"combine_bytes_per_rank", r.combine_bytes_per_rank},
          {"combine_gbps", r.combine_gbps()},
          {"peer", {{"name", "alltoall"},
                    {"dispatch_us", r.peer_dispatch_us},
                    {"dispatch_gbps", r.peer_dispatch_gbps()},
                    {"combine_us", r.peer_combine_us},
                    {"combine_gbps", r.peer_combine_gbps()}}},
          {"dispatch_ratio_to_peer", r.dispatch_gbps() / r.peer_dispatch_gbps()},
          {"combine_ratio_to_peer", r.combine_gbps() / r.peer_combine_gbps()},
          {"max_rss_mib", r.max_rss_mib}};
}

double DispatchBenchRow::dispatch_gbps() const { return gbps(dispatch_bytes_per_rank, dispatch_us); }
double DispatchBenchRow::combine_gbps() const { return gbps(combine_bytes_per_rank, combine_us); }
double DispatchBenchRow::peer_dispatch_gbps() const { return gbps(dispatch_bytes_per_rank, peer_dispatch_us); }
double DispatchBenchRow::peer_combine_gbps() const { return gbps(combine_bytes_per_rank, peer_combine_us); }

void print_dispatch_rows(const std::vector<DispatchBenchRow>& rows) {
  fmt::print("{:>2} {:>6} {:>5} {:>6} | {:>10} {:>9} {:>7} {:>6} | {:>10} {:>9} {:>7} {:>6} | {:>7}\n", "R", "tokens",
             "wire", "copies", "dispatch us", "MB/rank", "GB/s", "xpeer", "combine us", "MB/rank", "GB/s", "xpeer",
             "RSS MiB");
  for (const DispatchBenchRow& r : rows)
    fmt::print("{:>2} {:>6} {:>5} {:>6.2f} | {:>10.0f} {:>9.1f} {:>7.2f} {:>6.2f} | {:>10.0f} {:>9.1f} {:>7.2f} {:>6.2f} | "
               "{:>7.0f}\n",
               r.ranks, r.tokens, r.wire, r.copies_per_token, r.dispatch_us, r.dispatch_bytes_per_rank / 1e6,
               r.dispatch_gbps(), r.dispatch_gbps() / r.peer_dispatch_gbps(), r.combine_us,
               r.combine_bytes_per_rank / 1e6, r.combine_gbps(), r.combine_gbps() / r.peer_combine_gbps(),
               r.max_rss_mib);
  fmt::print("times: slowest rank, median of repeats; bytes: sent to other ranks, mean per rank; xpeer: GB/s over "
             "a plain all-to-all of the same bytes in this run\n");
}

void run_dispatch_bench_command(const DispatchBenchArgs& args) {
  const std::unique_ptr<ep::Communicator> comm = ep::make_mpi_communicator();
  const std::vector<DispatchBenchRow> rows = run_dispatch_bench(*comm, args);
  if (comm->rank() != 0) return;
  print_dispatch_rows(rows);
  if (args.json.empty()) return;
  nlohmann::json list = nlohmann::json::array();
  for (const DispatchBenchRow& r : rows) list.push_back(to_json(r));
  write_text_file(args.json, list.dump(2) + "\n", "--json");
}

}  // namespace moe::cli
