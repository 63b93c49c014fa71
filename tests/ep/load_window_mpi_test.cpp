// The load window summed over the ranks under mpirun: each rank records routing of its own, the collective
// gives every rank the same sum over ranks and over the last W steps.
#include <gtest/gtest.h>

#include "ep/load_window.h"

namespace moe::ep {
namespace {

Communicator* g_comm = nullptr;

TEST(LoadWindowMpi, SummedAcrossRanksAndSteps) {
  const int R = g_comm->size(), me = g_comm->rank(), E = 5, W = 4;
  LoadWindow w(2, E, W);
  // Step s on rank r: layer 0 routes one pair to expert (r + s) mod E, layer 1 r + 1 pairs to expert 0.
  const int n_steps = 6;
  for (int s = 0; s < n_steps; ++s) {
    w.record(0, std::vector<int32_t>{(me + s) % E});
    w.record(1, std::vector<int32_t>(me + 1, 0));
    w.end_step();
  }
  std::vector<int64_t> want0(E, 0);
  for (int r = 0; r < R; ++r)
    for (int s = n_steps - W; s < n_steps; ++s) ++want0[(r + s) % E];
  const std::vector<std::vector<int64_t>> sum = w.summed(*g_comm);
  ASSERT_EQ(sum.size(), 2u);
  EXPECT_EQ(sum[0], want0);
  EXPECT_EQ(sum[1][0], int64_t{W} * R * (R + 1) / 2);
  // The local window is untouched by the collective.
  EXPECT_EQ(w.local(1)[0], int64_t{W} * (me + 1));
}

}  // namespace
}  // namespace moe::ep

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<moe::ep::Communicator> comm = moe::ep::make_mpi_communicator();
  moe::ep::g_comm = comm.get();
  if (comm->rank() != 0) delete ::testing::UnitTest::GetInstance()->listeners().Release(
      ::testing::UnitTest::GetInstance()->listeners().default_result_printer());
  return RUN_ALL_TESTS();
}
