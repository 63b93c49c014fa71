#pragma once
// The fuzz targets: one function per parser, `int fuzz_<name>(const uint8_t* data, size_t size)`.
// Contract: bad input is a moe::Error, which the targets catch; anything else (another exception, a crash,
// a sanitizer report, a failed MOE_FUZZ_ASSERT) is a finding. Under libFuzzer (MOE_LIBFUZZER, the
// MOE_FUZZ=ON build) each target's file also defines LLVMFuzzerTestOneInput; the normal build links them
// all into fuzz_replay_tests, which replays tests/fuzz/corpus and tests/fuzz/regressions through them.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "moe/core/check.h"

#ifdef MOE_LIBFUZZER
#define MOE_FUZZ_ENTRY(function)                                                      \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {           \
    return function(data, size);                                                      \
  }
#else
#define MOE_FUZZ_ENTRY(function)
#endif

// An invariant of the code under test that the input broke: reported as a crash, so that both libFuzzer
// and the replay test catch it.
#define MOE_FUZZ_ASSERT(cond, ...)                                                       \
  do {                                                                                   \
    if (!(cond)) ::moe::fuzz::invariant_failed(#cond, fmt::format(__VA_ARGS__));          \
  } while (0)

namespace moe::fuzz {

int fuzz_safetensors(const uint8_t* data, size_t size);
int fuzz_checkpoint_index(const uint8_t* data, size_t size);
int fuzz_moe_config(const uint8_t* data, size_t size);
int fuzz_model_config(const uint8_t* data, size_t size);
int fuzz_tokenizer_json(const uint8_t* data, size_t size);
int fuzz_tokenizer_text(const uint8_t* data, size_t size);
int fuzz_layer_input(const uint8_t* data, size_t size);
int fuzz_chat_template(const uint8_t* data, size_t size);

[[noreturn]] void invariant_failed(const char* condition, const std::string& message);

// A directory private to this process (under /dev/shm where it exists: the file parsers read real files),
// removed at exit.
const std::filesystem::path& scratch_dir();
void write_file(const std::filesystem::path& path, std::string_view bytes);

// Separator of the parts of a multi-file input (e.g. config, weights, hidden states for fuzz_layer_input).
inline constexpr std::string_view kPartSeparator = "\n#MOE-PART#\n";
std::vector<std::string_view> split_parts(std::string_view input);

// Runs `f`, swallowing moe::Error (the expected outcome of bad input); anything else propagates.
template <class F>
int expect_errors(F&& f) {
  try {
    f();
  } catch (const moe::Error&) {
  }
  return 0;
}

}  // namespace moe::fuzz
