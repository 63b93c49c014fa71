// `mpirun -np R moe bench --dispatch --backend cuda`: expert-parallel dispatch and combine on GPUs
// (ep::CudaEpExchange over NCCL, one GPU per rank) without the expert compute, against NCCL's own
// equal-split all-to-all of the same bytes measured in the same run.
//   dispatch: route on the device (pairs -> ranks), pack rows (bf16 or fp8 + scales) and pairs, exchange the
//             counts (device -> host copy: the one synchronisation), all-to-all-v of rows and pairs, unpack
//   combine:  all-to-all-v of bf16 partial sums back to the source, add them there (the "experts" are the
//             identity: the partial of a copy is its received row)
// Each timed region starts after a barrier and ends when the rank's stream is idle; a region's time is the
// slowest rank's, the median over repeats.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "bench/bench.h"
#include "core/output_file.h"
#include "cuda/device_buffer.h"
#include "ep/cuda_ep_exchange.h"
#include "moe/layer/random_weights.h"

namespace moe::cli {

namespace {

double peer_alltoall_us(ep::DeviceCommunicator& comm, double bytes_per_rank, int repeats, cudaStream_t stream) {
  const int R = comm.size();
  const int64_t block = static_cast<int64_t>(std::ceil(bytes_per_rank / (R - 1)));
  cuda::DeviceBuffer<uint8_t> send(std::max<int64_t>(block * R, 1)), recv(std::max<int64_t>(block * R, 1));
  MOE_CUDA_CHECK(cudaMemset(send.get(), 1, send.size()));
  return median_slowest_us(comm.host(), repeats, [&] {
    comm.alltoall(send.get(), recv.get(), block, stream);
    MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  });
}

DispatchBenchRow run_one(ep::DeviceCommunicator& comm, const DispatchBenchArgs& a, int64_t T, ep::Transfer wire,
                         cudaStream_t stream) {
  ep::Communicator& host = comm.host();
  const int R = comm.size();
  DispatchBenchRow row{.ranks = R, .tokens = T, .hidden = a.hidden, .n_experts = a.n_experts, .top_k = a.top_k,
                       .wire = std::string(ep::transfer_name(wire))};
  {
    const Tensor x = random_tensor({T, a.hidden}, 1.0f, 700 + comm.rank(), DType::BF16);  // [T, H]
    const TopK topk = uniform_topk(T, a.n_experts, a.top_k, 900 + comm.rank());
    cuda::DeviceBuffer<uint16_t> d_x(T * a.hidden);
    d_x.upload(x.data_as<uint16_t>(), T * a.hidden);
    cuda::DeviceBuffer<int32_t> d_ids(T * a.top_k);
    d_ids.upload(topk.ids.data_as<int32_t>(), T * a.top_k);
    cuda::DeviceBuffer<float> d_weights(T * a.top_k), d_out(T * a.hidden);
    d_weights.upload(topk.weights.data_as<float>(), T * a.top_k);
    ep::CudaEpExchange exchange(comm, ep::contiguous_placement(a.n_experts, R), {.dispatch = wire}, a.top_k,
                                  a.hidden, T);
    const auto* xb = reinterpret_cast<const cuda::bf16*>(d_x.get());
    row.dispatch_us = median_slowest_us(host, a.repeats, [&] {
      exchange.dispatch(xb, d_ids.get(), d_weights.get(), T, stream);
      MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    });
    row.combine_us = median_slowest_us(host, a.repeats, [&] {
      exchange.combine(exchange.received_rows(), nullptr, nullptr, 0, d_out.get(), stream);
      MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    });
    row.copies_per_token = mean_over_ranks(host, exchange.stats().copies_sent) / static_cast<double>(T);
    row.dispatch_bytes_per_rank = mean_over_ranks(host, exchange.dispatch_bytes_sent());
    row.combine_bytes_per_rank = mean_over_ranks(host, exchange.combine_bytes_sent());
  }  // the exchange's buffers are freed before the peer's are made
  row.peer_dispatch_us = peer_alltoall_us(comm, row.dispatch_bytes_per_rank, a.repeats, stream);
  row.peer_combine_us = peer_alltoall_us(comm, row.combine_bytes_per_rank, a.repeats, stream);
  row.max_rss_mib = max_rss_mib(host);
  return row;
}

}  // namespace

void run_dispatch_bench_cuda_command(const DispatchBenchArgs& a) {
  const std::unique_ptr<ep::Communicator> host = ep::make_mpi_communicator();
  MOE_CHECK(host->size() >= 2, "moe bench --dispatch measures traffic between ranks: run it under mpirun -np R with "
            "R >= 2, one process per GPU (this run has {})", host->size());
  MOE_CHECK(a.hidden % 64 == 0 && a.top_k >= 1 && a.top_k <= a.n_experts,
            "moe bench --dispatch --backend cuda: hidden {} must be a multiple of 64, top-k {} of {} experts", a.hidden,
            a.top_k, a.n_experts);
  std::vector<DispatchBenchRow> rows;
  {
    const std::unique_ptr<ep::DeviceCommunicator> comm = ep::make_nccl_communicator(*host);
    cudaStream_t stream = nullptr;
    MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int64_t T : a.tokens)
      for (ep::Transfer wire : a.wires) rows.push_back(run_one(*comm, a, T, wire, stream));
    cudaStreamDestroy(stream);
  }  // NCCL is torn down before MPI
  if (host->rank() != 0) return;
  fmt::print("moe bench --dispatch --backend cuda: {} ranks, one GPU each, NCCL; combine sends bf16 partial sums\n",
             host->size());
  print_dispatch_rows(rows);
  fmt::print("GB/s: per GPU; xpeer: over NCCL's own equal-split all-to-all (grouped ncclSend/ncclRecv) of the same "
             "bytes in this run\n");
  if (a.json.empty()) return;
  nlohmann::json list = nlohmann::json::array();
  for (const DispatchBenchRow& r : rows) {
    nlohmann::json j = to_json(r);
    j["backend"] = "cuda";
    j["peer"]["name"] = "nccl_alltoall";
    list.push_back(j);
  }
  write_text_file(a.json, list.dump(2) + "\n", "--json");
}

}  // namespace moe::cli
