#include "family.h"

#include <fmt/ranges.h>

#include "families/families.h"

namespace moe::model {

namespace {

const Family* const kFamilies[] = {&kMixtral, &kQwen2Moe, &kQwen3Moe, &kOlmoe, &kDeepseekV2, &kDeepseekV3};

}  // namespace

std::string moe_block_in_mlp(const Checkpoint&, const std::string& layer_prefix) { return layer_prefix + "mlp."; }

std::span<const Family* const> families() { return kFamilies; }

const Family& find_family(const std::string& model_type) {
  for (const Family* f : kFamilies)
    if (model_type == f->model_type) return *f;
  std::vector<std::string> names;
  for (const Family* f : kFamilies) names.emplace_back(f->model_type);
  MOE_FAIL("unsupported model_type '{}': supported are {}", model_type, fmt::format("{}", fmt::join(names, ", ")));
}

}  // namespace moe::model
