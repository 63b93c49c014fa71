#pragma once
// `moe bench`: the whole MoE layer (router included) on named model shapes, timed against the floor
// max(flops / matmul rate, touched expert weight bytes / copy bandwidth), both rates measured in the same
// run on the same machine. Shared by the CPU and CUDA backends.

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ep/communicator.h"
#include "ep/transfer.h"
#include "moe/core/expert_batch.h"
#include "moe/layer/moe_config.h"
#include "moe/layer/moe_weights.h"

namespace moe::cli {

struct BenchShape {
  std::string name;  // qwen3-30b-a3b, deepseek-v3, mixtral-8x7b, olmoe-1b-7b, custom:H,I,E,k
  int64_t hidden, intermediate;
  int n_experts, top_k;
};

// A named shape or "custom:H,I,E,k"; throws moe::Error naming the known shapes otherwise.
BenchShape parse_bench_shape(const std::string& text);

// The routed-experts layer of the shape, with its family's router (no shared experts: the floor counts
// routed experts only).
MoeConfig bench_config(const BenchShape& shape);

enum class BenchRouting : uint8_t { balanced, zipf };

// Router weights that give the requested load: random rows (balanced), or a constant input feature whose
// gate column adds log(1/(rank+1)) to each expert's logit (Zipf, exponent 1). x must set column 0 to 1.
void shape_router_for_routing(MoeWeights& weights, BenchRouting routing, uint64_t seed);

struct BenchRow {
  BenchShape shape;
  int64_t tokens = 0;
  std::string backend, routing;
  double us_median = 0, us_min = 0;
  double tflops = 0, weight_tbps = 0, floor_us = 0, ratio_to_floor = 0;
  double experts_touched = 0;       // distinct experts per forward (CUDA: mean over the inputs; CPU: median over runs)
  double matmul_tflops = 0, copy_tbps = 0;  // the ceilings measured in this run
  std::string peer;                 // a peer measured side by side, if any
  double peer_us = 0;
  std::string weights = "bf16";     // expert weight format: bf16, int8 (CPU) or fp8 (CUDA); int8 and fp8 floors
                                    // count one byte a weight
  std::string path;                 // `--backend cuda`: what the layer ran (MoeLayer::describe_path)
  struct CpuDetails {               // `--backend cpu` only: written as extra JSON fields
    std::string isa;
    int threads = 0, layers = 0, reps = 0;
    int64_t distinct_experts = 0;  // physical experts per layer (expert e aliases e mod this one)
    double us_max = 0, router_prepare_us = 0, max_over_mean_load = 0;  // router_prepare_us: median over runs
    double read_gbps_before = 0, read_gbps_after = 0;      // the ceilings before and after the timed runs
    double peak_gflops_before = 0, peak_gflops_after = 0;  // (matmul_tflops, copy_tbps: the higher of each)
    // Paired floors: each timed run against the ceilings measured right before and after it (the higher
    // of each), so that a slow minute slows the run and its floor alike. Per run, in run order.
    std::vector<double> run_us, run_experts_touched, run_read_gbps, run_peak_gflops, run_ratio;
    double ratio_paired = 0;  // the median of run_ratio
  };
  std::optional<CpuDetails> cpu;
};

// The floor in µs: max(flops / peak, bytes / bandwidth) with flops = 2·T·k·3·H·I and bytes = experts_touched ·
// 3·H·I · (2 for bf16, 1 for int8 and fp8).
double floor_us(const BenchShape& shape, int64_t tokens, double experts_touched, const std::string& weights,
                double peak_flops, double read_bytes_per_s);

// Fills tflops, weight_tbps, floor (floor_us at the row's ceilings), ratio.
void finish_row(BenchRow& row);

nlohmann::json to_json(const BenchRow& row);
void print_rows(const std::vector<BenchRow>& rows);

// `--backend cpu` (bench_cpu.cpp). Cold weights: the runs rotate over `layers` copies of the layer;
// expert e aliases physical expert e mod P where all layers' packed experts would pass max_gib (the floor
// still counts every touched logical expert).
struct CpuBenchOptions {
  BenchRouting routing = BenchRouting::balanced;
  int repeats = 20;          // at least this many timed runs per token count ...
  double min_seconds = 0;    // ... and at least this long
  std::string weights = "bf16";  // bf16 or int8
  int layers = 0;            // 0: enough that the rotated weights exceed the last-level cache several times
  double max_gib = 8.0;      // bound on the packed expert weights of all layers
  uint64_t seed = 1;
};

// Each backend's runner: one row per token count.
std::vector<BenchRow> run_cpu_bench(const BenchShape& shape, const std::vector<int64_t>& tokens,
                                    const CpuBenchOptions& options);
// The device's ceilings, measured now (bench_cuda.cpp): device-to-device copy TB/s (bytes read and written)
// and cuBLAS bf16 GEMM TFLOP/s.
double device_copy_tbps();
double device_matmul_tflops();
// expert_weights "bf16", or "fp8" / "int4": then each token count has a second row, the same weights as fp8
// or int4 experts (config.quant fp8_block / awq_int4), with the bf16 row's time as its peer.
std::vector<BenchRow> run_cuda_bench(const BenchShape& shape, const std::vector<int64_t>& tokens,
                                     BenchRouting routing, int repeats, const std::string& expert_weights = "bf16");

// `moe bench --dispatch` (bench_dispatch.cpp): expert-parallel dispatch and combine over the ranks of
// mpirun, uniform random routing, contiguous placement (E must divide by R), no expert compute.
struct DispatchBenchArgs {
  std::vector<int64_t> tokens = {128, 4096};  // per rank
  std::vector<ep::Transfer> wires = {ep::Transfer::bf16, ep::Transfer::fp8};  // dispatch wire formats
  int64_t hidden = 7168;
  int n_experts = 256, top_k = 8;  // DeepSeek-V3
  int repeats = 20;
  std::string json;  // rank 0 writes the rows as a JSON list
};

struct DispatchBenchRow {
  int ranks = 0;
  int64_t tokens = 0, hidden = 0;
  int n_experts = 0, top_k = 0;
  std::string wire;
  double copies_per_token = 0;  // token copies dispatched per token (one per destination rank, self included)
  double dispatch_us = 0, combine_us = 0;                            // slowest rank, median of repeats
  double dispatch_bytes_per_rank = 0, combine_bytes_per_rank = 0;    // sent to other ranks, mean over ranks
  double peer_dispatch_us = 0, peer_combine_us = 0;                  // plain all-to-all of the same bytes
  double max_rss_mib = 0;                                            // largest resident set of any rank so far
  double dispatch_gbps() const;
  double combine_gbps() const;
  double peer_dispatch_gbps() const;
  double peer_combine_gbps() const;
};

// Helpers shared by the MPI and the GPU dispatch benches (bench_dispatch.cpp).
// Uniform random routing: k distinct experts per token, weights 1/k; ranks pass different seeds.
TopK uniform_topk(int64_t n_tokens, int n_experts, int top_k, uint64_t seed);
// f on every rank `repeats` times after one warm-up, a barrier before each: the median over repeats of the
// slowest rank's time, in µs.
double median_slowest_us(ep::Communicator& comm, int repeats, const std::function<void()>& f);
double mean_over_ranks(ep::Communicator& comm, int64_t value);
double max_rss_mib(ep::Communicator& comm);  // largest resident set of any rank so far

// Collective: every rank calls it and gets the same rows (one per token count and wire format).
std::vector<DispatchBenchRow> run_dispatch_bench(ep::Communicator& comm, const DispatchBenchArgs& args);
nlohmann::json to_json(const DispatchBenchRow& row);
void print_dispatch_rows(const std::vector<DispatchBenchRow>& rows);
// The command: the MPI world, the bench, and rank 0's table and JSON file.
void run_dispatch_bench_command(const DispatchBenchArgs& args);
// `moe bench --dispatch --backend cuda` (bench_dispatch_cuda.cpp, CUDA builds): the same rows over GPUs,
// one per rank, with NCCL; the peer is NCCL's own equal-split all-to-all of the same bytes.
void run_dispatch_bench_cuda_command(const DispatchBenchArgs& args);

}  // namespace moe::cli
