#include "core/knobs.h"

#include <charconv>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "moe/core/check.h"
#include "core/env.h"

namespace moe {

namespace {

// `name`'s text, or nullopt where it is unset or empty.
std::optional<std::string_view> env_text(const char* name) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return std::nullopt;
  return std::string_view(env);
}

// One of `choices` (their index), or nullopt where `name` is unset or empty.
template <size_t N>
std::optional<size_t> env_choice(const char* name, const std::string_view (&choices)[N], std::string_view takes,
                                 std::string_view meaning) {
  const std::optional<std::string_view> text = env_text(name);
  if (!text) return std::nullopt;
  for (size_t i = 0; i < N; ++i)
    if (*text == choices[i]) return i;
  MOE_FAIL("{}='{}': give {} ({})", name, *text, takes, meaning);
}

// A setting of one value for both GEMMs or two separated by a comma (<gate/up>,<down>); `parse` reads one
// value, or returns nullopt where it is not one the setting takes. `paired_only`: a single value is an error.
template <class T, class Parse>
PerGemm<T> env_per_gemm(const char* name, std::string_view takes, std::string_view meaning, const Parse& parse,
                        bool paired_only = false) {
  const std::optional<std::string_view> text = env_text(name);
  if (!text) return {};
  const size_t comma = text->find(',');
  const std::string_view first = text->substr(0, comma);
  const std::string_view second = comma == std::string_view::npos ? first : text->substr(comma + 1);
  const std::optional<T> a = parse(first), b = parse(second);
  MOE_CHECK(a && b && !(paired_only && comma == std::string_view::npos), "{}='{}': give {} ({})", name, *text,
            takes, meaning);
  return {.gate_up = a, .down = b};
}

std::optional<bool> on_off(std::string_view text) {
  if (text == "on" || text == "off") return text == "on";
  return std::nullopt;
}

std::optional<int> whole_number(std::string_view text, int min, int max) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < min || value > max) return std::nullopt;
  return value;
}

std::optional<Knobs::L2Hint> l2_hint(std::string_view text) {
  if (text == "normal") return Knobs::L2Hint::normal;
  if (text == "last") return Knobs::L2Hint::evict_last;
  if (text == "first") return Knobs::L2Hint::evict_first;
  return std::nullopt;
}

constexpr int64_t kMaxBytes = int64_t{1} << 30;

}  // namespace

Knobs Knobs::from_env() {
  Knobs k;
  k.num_threads = env_integer("MOE_NUM_THREADS", 1, 4096, "the number of CPU threads");
  k.pool_spin_us = env_integer("MOE_POOL_SPIN_US", 0, 1'000'000,
                               "the microseconds an idle worker polls before sleeping (0: never polls)");

  static constexpr std::string_view kIsas[] = {"avx2", "avx512", "amx"};
  if (const auto i = env_choice("MOE_CPU_ISA", kIsas, "avx2, avx512 or amx", "the fast CPU experts' instruction set"))
    k.cpu_isa = static_cast<CpuIsa>(*i);
  static constexpr std::string_view kPrefetches[] = {"software", "hardware"};
  if (const auto i = env_choice("MOE_CPU_STREAM_PREFETCH", kPrefetches, "software or hardware",
                                "how the fast CPU experts stream their weights"))
    k.cpu_stream_prefetch = static_cast<StreamPrefetch>(*i);

  k.router_rows_per_block = env_integer("MOE_ROUTER_ROWS_PER_BLOCK", 0, 8,
                                        "gate rows per block of the fused router (1, 2, 4 or 8; 0: by size)");
  k.permute_chunked_from = env_integer("MOE_PERMUTE_CHUNKED_FROM", 1, kPermuteChunkedFromMax,
                                       "the pair count from which the permute takes the chunked launches");
  k.decode_max_tokens = env_integer("MOE_DECODE_MAX_TOKENS", 0, kDecodeMaxTokensMax,
                                    "the largest batch the fused decode kernel takes (0: none)");
  k.decode_prefetch = env_integer(
      "MOE_DECODE_PREFETCH", 0, kMaxBytes,
      "the bytes of down weights the fused decode kernel prefetches into L2 before its second barrier");
  k.skinny_gemm_max_rows = env_integer("MOE_SKINNY_GEMM_MAX_ROWS", 0, 8,
                                       "the most rows the decoder's dense GEMMs take as GEMVs (0: none)");

  k.tile_rows = env_integer("MOE_TILE_ROWS", 0, 128,
                            "the grouped GEMMs' tile rows (16, 32, 48, 64 or 128; 0: by rows per expert)");
  k.decode_wide_k = env_integer("MOE_DECODE_WIDE_K", 0, kMaxBytes,
                                "the inner size from which 16-row GEMM tiles take k-steps of 128");
  static constexpr std::string_view kKernels[] = {"mma", "wgmma"};
  if (const auto i = env_choice("MOE_GROUPED_GEMM", kKernels, "mma or wgmma",
                                "the grouped GEMM kernel of prefill batches; wgmma keeps the policy"))
    k.grouped_gemm = static_cast<GroupedGemm>(*i);
  k.tuned_tiles = env_on_off("MOE_TUNED_TILES", "whether the layer takes the tuned grouped-GEMM table's tile choices");

  k.wgmma_tall = env_on_off("MOE_WGMMA_TALL", "whether an expert's last wgmma tile takes up to 32 more rows");
  k.wgmma_even_tiles =
      env_on_off("MOE_WGMMA_EVEN_TILES", "whether an expert's odd tile count gets an empty tile to pair");
  k.wgmma_half_tiles =
      env_on_off("MOE_WGMMA_HALF_TILES", "whether a tile of <= 64 rows runs on one consumer warpgroup");
  k.wgmma_claim =
      env_on_off("MOE_WGMMA_CLAIM", "whether blocks claim work units from a queue or walk a fixed stride");
  k.wgmma_pairs =
      env_on_off("MOE_WGMMA_PAIRS", "whether clusters of 2 blocks share weight tiles by TMA multicast");
  k.wgmma_sector_stores =
      env_on_off("MOE_WGMMA_SECTOR_STORES", "whether the wgmma epilogue stores 8 bytes a lane (a sector a quad)");
  k.wgmma_raster_rows = env_per_gemm<int>(
      "MOE_WGMMA_RASTER_ROWS", "N or <gate/up N>,<down N>, each a whole number from 1 to 64",
      "the row tiles of a wgmma raster group", [](std::string_view t) { return whole_number(t, 1, 64); });
  const PerGemm<L2Hint> l2 = env_per_gemm<L2Hint>(
      "MOE_WGMMA_L2", "<A hint>,<B hint>, each normal, last or first",
      "the L2 eviction priorities of the wgmma kernel's loads", l2_hint, /*paired_only=*/true);
  if (l2.gate_up) k.wgmma_l2 = L2Hints{.a = *l2.gate_up, .b = *l2.down};
  k.wgmma_staged_epilogue = env_per_gemm<bool>(
      "MOE_WGMMA_STAGED_EPILOGUE", "on, off or <gate/up>,<down> of those",
      "whether store warps write a unit's output while the next unit's k-loop runs", on_off);
  k.wgmma_column_pairs = env_per_gemm<bool>(
      "MOE_WGMMA_COLUMN_PAIRS", "on, off or <gate/up>,<down> of those",
      "whether clusters of 2 blocks on two column tiles share the A tile by TMA multicast", on_off);

  return k;
}

const Knobs& knobs() {
  static const Knobs parsed = Knobs::from_env();
  return parsed;
}

}  // namespace moe
