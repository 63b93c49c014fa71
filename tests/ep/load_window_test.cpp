// The load window on one rank: counts per step, the ring dropping the oldest step, bad ids refused.
#include "ep/load_window.h"

#include <gtest/gtest.h>

#include "error_of.h"

namespace moe::ep {
namespace {

using Counts = std::vector<int64_t>;

TEST(LoadWindow, SumsTheLastWSteps) {
  LoadWindow w(2, 4, 3);
  const std::vector<std::vector<int32_t>> steps = {{0, 1}, {1, 1}, {2, 3}, {3, -1}};
  for (const auto& ids : steps) {
    const Counts before = w.local(0);
    w.record(0, ids);
    w.record(1, std::vector<int32_t>{0});
    EXPECT_EQ(w.local(0), before) << "an open step is not in the window yet";
    w.end_step();
  }
  EXPECT_EQ(w.steps(), 3);
  // The first step {0, 1} has left; {1, 1}, {2, 3} and {3} remain.
  EXPECT_EQ(w.local(0), (Counts{0, 2, 1, 2}));
  EXPECT_EQ(w.local(1), (Counts{3, 0, 0, 0}));
  for (int i = 0; i < 3; ++i) w.end_step();  // three empty steps push everything out
  EXPECT_EQ(w.local(0), Counts(4, 0));
  EXPECT_EQ(w.local(1), Counts(4, 0));
}

TEST(LoadWindow, SummedOverOneRankIsTheLocalWindow) {
  LoadWindow w(1, 3, 10);
  w.record(0, std::vector<int32_t>{2, 2, 0});
  w.end_step();
  const auto comm = make_self_communicator();
  EXPECT_EQ(w.summed(*comm), (std::vector<Counts>{{1, 0, 2}}));
}

TEST(LoadWindow, RefusesBadSizesLayersAndIds) {
  EXPECT_NE(test::error_of([] { LoadWindow(1, 4, 0); }).find("--eplb-window-steps"), std::string::npos);
  LoadWindow w(2, 4, 5);
  EXPECT_NE(test::error_of([&] { w.record(2, std::vector<int32_t>{0}); }).find("layer 2"), std::string::npos);
  EXPECT_NE(test::error_of([&] { w.record(0, std::vector<int32_t>{4}); }).find("expert 4 of 4"),
            std::string::npos);
}

}  // namespace
}  // namespace moe::ep
