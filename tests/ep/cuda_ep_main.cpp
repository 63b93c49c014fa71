// The main of the GPU tests of expert parallelism: MPI for the ranks, then NCCL when every rank has a GPU of
// its own; otherwise every rank skips alike (a rank that ran alone would wait for the others in a
// collective). Rank 0 alone prints the results.
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <memory>

#include "cuda_ep_case.h"

namespace moe::ep {

Communicator* g_host = nullptr;
DeviceCommunicator* g_comm = nullptr;
std::string g_skip;

}  // namespace moe::ep

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<moe::ep::Communicator> host = moe::ep::make_mpi_communicator();
  moe::ep::g_host = host.get();
  // Every rank agrees on skipping: the ranks that lack a GPU count, and the sum decides.
  int n_gpus = 0;
  if (cudaGetDeviceCount(&n_gpus) != cudaSuccess) n_gpus = 0;
  int64_t short_of_gpu[1] = {n_gpus < host->size() ? 1 : 0};
  host->allreduce_sum(short_of_gpu);
  std::unique_ptr<moe::ep::DeviceCommunicator> comm;
  if (!moe::ep::nccl_available())
    moe::ep::g_skip = "this build has no NCCL";
  else if (short_of_gpu[0] > 0)
    moe::ep::g_skip = "needs one GPU per rank (" + std::to_string(host->size()) + " ranks, " +
                      std::to_string(n_gpus) + " GPUs)";
  else
    comm = moe::ep::make_nccl_communicator(*host);
  moe::ep::g_comm = comm.get();
  if (host->rank() != 0)
    delete ::testing::UnitTest::GetInstance()->listeners().Release(
        ::testing::UnitTest::GetInstance()->listeners().default_result_printer());
  const int status = RUN_ALL_TESTS();
  comm.reset();  // NCCL before MPI
  return status;
}
