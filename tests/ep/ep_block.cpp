#include "ep_block.h"

#include <fmt/core.h>
#include <unistd.h>

#include <filesystem>

#include "moe/core/checkpoint.h"
#include "moe/core/safetensors.h"

namespace moe::ep {

uint64_t shared_seed(Communicator& comm) {
  int64_t seed[1] = {comm.rank() == 0 ? static_cast<int64_t>(moe::test::fresh_seed() >> 1) : 0};
  comm.allreduce_sum(seed);
  return static_cast<uint64_t>(seed[0]);
}

Block make_block(const std::string& model_type, moe::test::TestRng& rng, moe::test::CaseOptions opt) {
  Block b{.c = moe::test::random_moe_case(model_type, rng, opt), .config = {}, .weights = {}};
  b.config = parse_moe_config(b.c.config);
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / fmt::format("moe_ep_block_{}.safetensors", ::getpid());
  write_safetensors(file, b.c.weights);
  b.weights = load_moe_weights(Checkpoint::open(file), "", b.config);  // the mapping keeps the data after removal
  std::filesystem::remove(file);
  return b;
}

}  // namespace moe::ep
