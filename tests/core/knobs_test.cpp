// Knobs::from_env: every MOE_* knob unset (nullopt), set to a value it takes (parsed into its field), and
// set to one it does not take (an error naming the variable and what it takes).
#include "core/knobs.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moe/core/check.h"
#include "scoped_env.h"

namespace moe {
namespace {

struct KnobCase {
  const char* name;
  const char* good;                                 // a value it takes
  std::function<bool(const Knobs&)> is_set;         // the field holds a value
  std::function<bool(const Knobs&)> holds_good;     // ... and it is `good`'s
  std::vector<const char*> bad;                     // values it does not take
  const char* takes;                                // in the error: what it takes
};

template <class T>
std::function<bool(const Knobs&)> set(std::optional<T> Knobs::*field) {
  return [field](const Knobs& k) { return (k.*field).has_value(); };
}
template <class T>
std::function<bool(const Knobs&)> set(PerGemm<T> Knobs::*field) {
  return [field](const Knobs& k) { return (k.*field).gate_up.has_value() || (k.*field).down.has_value(); };
}
template <class T>
std::function<bool(const Knobs&)> equals(std::optional<T> Knobs::*field, T want) {
  return [field, want](const Knobs& k) { return k.*field == want; };
}

const std::vector<KnobCase>& cases() {
  static const std::vector<KnobCase> all = {
      {"MOE_NUM_THREADS", "12", set(&Knobs::num_threads), equals<int64_t>(&Knobs::num_threads, 12),
       {"abc", "0", "4097", "-5", "12us", "0x10"}, "1 to 4096"},
      {"MOE_POOL_SPIN_US", "0", set(&Knobs::pool_spin_us), equals<int64_t>(&Knobs::pool_spin_us, 0),
       {"-1", "1000001", "5us"}, "0 to 1000000"},
      {"MOE_CPU_ISA", "amx", set(&Knobs::cpu_isa), equals(&Knobs::cpu_isa, Knobs::CpuIsa::amx),
       {"sse", "AVX2", "avx2 "}, "avx2, avx512 or amx"},
      {"MOE_CPU_STREAM_PREFETCH", "hardware", set(&Knobs::cpu_stream_prefetch),
       equals(&Knobs::cpu_stream_prefetch, Knobs::StreamPrefetch::hardware), {"auto", "on"},
       "software or hardware"},
      {"MOE_ROUTER_ROWS_PER_BLOCK", "4", set(&Knobs::router_rows_per_block),
       equals<int64_t>(&Knobs::router_rows_per_block, 4), {"9", "-1", "two"}, "0 to 8"},
      {"MOE_PERMUTE_CHUNKED_FROM", "16385", set(&Knobs::permute_chunked_from),
       equals<int64_t>(&Knobs::permute_chunked_from, 16385), {"0", "16386"}, "1 to 16385"},
      {"MOE_DECODE_MAX_TOKENS", "0", set(&Knobs::decode_max_tokens),
       equals<int64_t>(&Knobs::decode_max_tokens, 0), {"9", "-1"}, "0 to 8"},
      {"MOE_DECODE_PREFETCH", "196608", set(&Knobs::decode_prefetch),
       equals<int64_t>(&Knobs::decode_prefetch, 196608), {"1073741825", "192k"}, "0 to 1073741824"},
      {"MOE_SKINNY_GEMM_MAX_ROWS", "0", set(&Knobs::skinny_gemm_max_rows),
       equals<int64_t>(&Knobs::skinny_gemm_max_rows, 0), {"9", "-1"}, "0 to 8"},
      {"MOE_TILE_ROWS", "48", set(&Knobs::tile_rows), equals<int64_t>(&Knobs::tile_rows, 48), {"129", "x"},
       "0 to 128"},
      {"MOE_DECODE_WIDE_K", "2048", set(&Knobs::decode_wide_k), equals<int64_t>(&Knobs::decode_wide_k, 2048),
       {"-2048"}, "0 to 1073741824"},
      {"MOE_GROUPED_GEMM", "mma", set(&Knobs::grouped_gemm),
       equals(&Knobs::grouped_gemm, Knobs::GroupedGemm::mma), {"cublas", "MMA"}, "mma or wgmma"},
      {"MOE_TUNED_TILES", "off", set(&Knobs::tuned_tiles), equals(&Knobs::tuned_tiles, false), {"0", "no"},
       "on or off"},
      {"MOE_WGMMA_TALL", "off", set(&Knobs::wgmma_tall), equals(&Knobs::wgmma_tall, false), {"1"}, "on or off"},
      {"MOE_WGMMA_EVEN_TILES", "on", set(&Knobs::wgmma_even_tiles), equals(&Knobs::wgmma_even_tiles, true),
       {"yes"}, "on or off"},
      {"MOE_WGMMA_HALF_TILES", "on", set(&Knobs::wgmma_half_tiles), equals(&Knobs::wgmma_half_tiles, true),
       {"ON"}, "on or off"},
      {"MOE_WGMMA_CLAIM", "off", set(&Knobs::wgmma_claim), equals(&Knobs::wgmma_claim, false), {"of"},
       "on or off"},
      {"MOE_WGMMA_PAIRS", "on", set(&Knobs::wgmma_pairs), equals(&Knobs::wgmma_pairs, true), {"on,off"},
       "on or off"},
      {"MOE_WGMMA_SECTOR_STORES", "off", set(&Knobs::wgmma_sector_stores),
       equals(&Knobs::wgmma_sector_stores, false), {"true"}, "on or off"},
      {"MOE_WGMMA_RASTER_ROWS", "2,4", set(&Knobs::wgmma_raster_rows),
       [](const Knobs& k) { return k.wgmma_raster_rows.gate_up == 2 && k.wgmma_raster_rows.down == 4; },
       {"0", "65", "2,", ",4", "2,4,8", "x"}, "1 to 64"},
      {"MOE_WGMMA_L2", "last,first", set(&Knobs::wgmma_l2),
       [](const Knobs& k) {
         return k.wgmma_l2 && k.wgmma_l2->a == Knobs::L2Hint::evict_last &&
                k.wgmma_l2->b == Knobs::L2Hint::evict_first;
       },
       {"last", "last,", "evict_last,first", "normal,normal,normal"}, "normal, last or first"},
      {"MOE_WGMMA_STAGED_EPILOGUE", "on,off", set(&Knobs::wgmma_staged_epilogue),
       [](const Knobs& k) {
         return k.wgmma_staged_epilogue.gate_up == true && k.wgmma_staged_epilogue.down == false;
       },
       {"1", "on,", "on,of"}, "on, off or <gate/up>,<down>"},
      {"MOE_WGMMA_COLUMN_PAIRS", "off", set(&Knobs::wgmma_column_pairs),
       [](const Knobs& k) { return k.wgmma_column_pairs.gate_up == false && k.wgmma_column_pairs.down == false; },
       {"yes", "off,maybe"}, "on, off or <gate/up>,<down>"},
  };
  return all;
}

// The test's environment leaves every knob unset (the tests below set them one at a time).
class KnobsTest : public testing::Test {
 protected:
  void SetUp() override {
    for (const KnobCase& c : cases()) {
      saved_.emplace_back(std::make_unique<test::ScopedEnv>(c.name));
      saved_.back()->unset();
    }
  }
  std::vector<std::unique_ptr<test::ScopedEnv>> saved_;
};

TEST_F(KnobsTest, UnsetOrEmptyIsNotGiven) {
  const Knobs none = Knobs::from_env();
  for (const KnobCase& c : cases()) EXPECT_FALSE(c.is_set(none)) << c.name;
  for (const KnobCase& c : cases()) {
    const test::ScopedEnv var(c.name, "");
    EXPECT_FALSE(c.is_set(Knobs::from_env())) << c.name << " set to the empty string";
  }
}

TEST_F(KnobsTest, EachKnobReadsAValueItTakes) {
  for (const KnobCase& c : cases()) {
    const test::ScopedEnv var(c.name, c.good);
    const Knobs k = Knobs::from_env();
    EXPECT_TRUE(c.holds_good(k)) << c.name << "=" << c.good;
    // It sets its own field only.
    for (const KnobCase& other : cases()) {
      if (std::string(other.name) != c.name) EXPECT_FALSE(other.is_set(k)) << c.name << " set " << other.name;
    }
  }
}

TEST_F(KnobsTest, ABadValueIsAnErrorNamingTheKnobAndWhatItTakes) {
  for (const KnobCase& c : cases()) {
    for (const char* value : c.bad) {
      SCOPED_TRACE(std::string(c.name) + "=" + value);
      const test::ScopedEnv var(c.name, value);
      try {
        Knobs::from_env();
        ADD_FAILURE() << "expected moe::Error";
      } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(c.name), std::string::npos) << what;
        EXPECT_NE(what.find(c.takes), std::string::npos) << what;
        EXPECT_NE(what.find(value), std::string::npos) << what;
      }
    }
  }
}

// A single value of a per-GEMM knob stands for both GEMMs.
TEST_F(KnobsTest, OneValueOfAPerGemmKnobIsBoth) {
  const test::ScopedEnv raster("MOE_WGMMA_RASTER_ROWS", "3");
  const test::ScopedEnv staged("MOE_WGMMA_STAGED_EPILOGUE", "on");
  const Knobs k = Knobs::from_env();
  EXPECT_EQ(k.wgmma_raster_rows.of(true), 3);
  EXPECT_EQ(k.wgmma_raster_rows.of(false), 3);
  EXPECT_EQ(k.wgmma_staged_epilogue.of(true), true);
  EXPECT_EQ(k.wgmma_staged_epilogue.of(false), true);
}

// knobs() is parsed once: a change after the first call does not reach it (Knobs::from_env() sees it).
TEST_F(KnobsTest, KnobsIsFixedAfterTheFirstCall) {
  const Knobs& first = knobs();
  const std::optional<int64_t> before = first.tile_rows;
  const test::ScopedEnv var("MOE_TILE_ROWS", before == 64 ? "32" : "64");
  EXPECT_EQ(&knobs(), &first);
  EXPECT_EQ(knobs().tile_rows, before);
  EXPECT_NE(Knobs::from_env().tile_rows, before);
}

}  // namespace
}  // namespace moe
