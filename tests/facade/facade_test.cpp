// The public facade as an application uses it: only the umbrella headers, and only include/ on the path.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "moe/config.h"
#include "moe/engine.h"
#include "moe/error.h"
#include "moe/layer.h"
#include "moe/tensor.h"

namespace {

const std::filesystem::path kModels = std::filesystem::path(MOE_TEST_DATA) / "models";

TEST(Facade, AnEngineLoadsAModelAndGenerates) {
  auto engine = moe::engine::Engine::load(kModels / "qwen3_moe", {});
  moe::engine::Request request;
  request.prompt = {1, 2, 3};
  request.max_new_tokens = 3;
  const moe::engine::RequestId id = engine->submit(request);
  for (int steps = 0; engine->has_unfinished() && steps < 16; ++steps) engine->step();
  const moe::engine::RequestResult& result = engine->result(id);
  EXPECT_EQ(result.finish == moe::engine::FinishReason::none, false);
  EXPECT_GE(result.generated.size(), 1u);
  EXPECT_LE(result.generated.size(), 3u);
  for (int32_t token : result.generated) EXPECT_LT(token, engine->info().vocab_size);
}

TEST(Facade, ALayerRunsOnRandomWeightsOfAConfig) {
  const moe::MoeConfig config = moe::load_moe_config(kModels / "mixtral" / "config.json");
  moe::MoeLayer layer(config, moe::random_moe_weights(config, 7));
  std::vector<float> x(static_cast<size_t>(4 * config.hidden_size), 0.25f);
  const moe::LayerOutput out = layer.forward(moe::Tensor::from_f32({4, config.hidden_size}, x));
  ASSERT_EQ(out.hidden_states.shape(), (std::vector<int64_t>{4, config.hidden_size}));
  for (int64_t i = 0; i < out.hidden_states.numel(); ++i)
    EXPECT_TRUE(std::isfinite(out.hidden_states.data_as<float>()[i]));
}

TEST(Facade, BadInputIsAMoeError) {
  EXPECT_THROW(moe::engine::Engine::load(kModels / "no_such_model", {}), moe::Error);
  EXPECT_THROW(moe::load_moe_config(kModels / "no_such_model" / "config.json"), moe::Error);
}

}  // namespace
