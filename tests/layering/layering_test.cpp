// The layering check on a small tree written for the test (one bad include of each kind, and the allowed ones
// beside them), then on the project's own tree.
#include "layering.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <random>

namespace moe::layering {
namespace {

namespace fs = std::filesystem;

// A tree under the temporary directory, removed at the end.
class Tree {
 public:
  Tree()
      : root_(fs::temp_directory_path() /
              ("moe_layering_" + std::to_string(getpid()) + "_" + std::to_string(std::random_device()()))) {}
  ~Tree() { fs::remove_all(root_); }
  void write(const std::string& path, const std::string& text) const {
    fs::create_directories((root_ / path).parent_path());
    std::ofstream(root_ / path) << text;
  }
  const fs::path& root() const { return root_; }

 private:
  fs::path root_;
};

std::vector<std::string> messages(const Report& report) {
  std::vector<std::string> out;
  for (const Violation& v : report.violations) out.push_back(v.message());
  return out;
}

TEST(Layering, ReportsEachKindOfBadInclude) {
  Tree tree;
  // The allowed includes around the bad ones: same layer, downward, relative beside, system headers.
  tree.write("include/moe/core/tensor.h", "#pragma once\n#include <vector>\n");
  tree.write("include/moe/layer/moe_layer.h",
             "#include \"moe/core/tensor.h\"\n#include \"moe/cpu/experts.h\"\n");
  tree.write("include/moe/cpu/experts.h", "#include \"moe/core/tensor.h\"\n");
  tree.write("include/moe/cuda/experts.h", "#include <cuda_runtime.h>\n#include \"moe/layer/moe_layer.h\"\n");
  tree.write("src/cpu/permute.cpp",
             "#include \"moe/cpu/experts.h\"\n"
             "// #include \"moe/layer/moe_layer.h\" in a comment is no include\n"
             "#  include   \"moe/layer/moe_layer.h\"\n"
             "#include \"../layer/local_stages.h\"\n"
             "#include \"moe/cuda/experts.h\"\n");
  tree.write("src/cuda/permute.cu",
             "#include \"launch.h\"\n#include <cuda_bf16.h>\n#include <moe/model/causal_lm.h>\n"
             "#include \"moe/engine/engine.h\"\n#include \"moe/cpu/experts.h\"\n");
  tree.write("src/cuda/launch.h", "#pragma once\n");
  tree.write("src/layer/local_stages.h", "#include \"moe/cuda/experts.h\"\n#include <nccl.h>\n");
  tree.write(
      "src/model/moe_block.cpp",
      "#include \"moe/layer/moe_layer.h\"\n#include \"moe/cuda/experts.h\"\n#include <cuda_runtime.h>\n"
      "#include <mpi.h>\n#include \"missing.h\"\n#include \"moe/widgets/x.h\"\n");
  tree.write("src/ep/nccl_communicator.cpp",
             "#include <nccl.h>\n#include <mpi.h>\n#include \"moe/layer/moe_layer.h\"\n");
  tree.write("src/cli/main.cpp",
             "#include \"moe/ep/x.h\"\n#include \"moe/cuda/experts.h\"\n#include <mpi.h>\n");
  tree.write("src/widgets/gear.cpp", "#include \"moe/core/tensor.h\"\n");
  tree.write("bench/bench_layer.cpp", "#include \"moe/model/causal_lm.h\"\n#include <cuda_runtime.h>\n");
  tree.write("src/core/CMakeLists.txt", "#include \"moe/layer/moe_layer.h\"\n");  // not a source

  const Report report = check_tree(tree.root());
  EXPECT_EQ(report.files, 13);
  EXPECT_EQ(report.includes, 31);
  const std::vector<std::string> expected = {
      "include/moe/cuda/experts.h:2 includes moe/layer/moe_layer.h (cuda/ may not include layer/)",
      "src/cli/main.cpp:3 includes <mpi.h> (only ep/ may include MPI or NCCL headers)",
      "src/cpu/permute.cpp:3 includes moe/layer/moe_layer.h (cpu/ may not include layer/)",
      "src/cpu/permute.cpp:4 includes ../layer/local_stages.h (cpu/ may not include layer/)",
      "src/cpu/permute.cpp:5 includes moe/cuda/experts.h (cpu/ may not include cuda/)",
      "src/cuda/permute.cu:3 includes <moe/model/causal_lm.h> (cuda/ may not include model/)",
      "src/cuda/permute.cu:4 includes moe/engine/engine.h (cuda/ may not include engine/)",
      "src/cuda/permute.cu:5 includes moe/cpu/experts.h (cuda/ may not include cpu/)",
      "src/layer/local_stages.h:2 includes <nccl.h> (only ep/ may include MPI or NCCL headers)",
      "src/model/moe_block.cpp:2 includes moe/cuda/experts.h (model/ may not include cuda/)",
      "src/model/moe_block.cpp:3 includes <cuda_runtime.h> (model/ may not include CUDA headers, as it may "
      "not "
      "include cuda/)",
      "src/model/moe_block.cpp:4 includes <mpi.h> (only ep/ may include MPI or NCCL headers)",
      "src/model/moe_block.cpp:5 includes missing.h (neither moe/<layer>/..., <layer>/... under src/ nor a file "
      "beside it)",
      "src/model/moe_block.cpp:6 includes moe/widgets/x.h (widgets/ is not a layer)",
      "src/widgets/gear.cpp is in no layer (a layer is src/<layer>/, include/moe/<layer>/ or bench/; the "
      "layers are "
      "listed in tests/layering/layering.cpp)",
  };
  EXPECT_EQ(messages(report), expected);
}

TEST(Layering, AFileBesideTheIncluderResolvesToItsLayer) {
  Tree tree;
  tree.write("src/text/unicode_regex.h", "#pragma once\n");
  tree.write("src/text/tokenizer.cpp", "#include \"unicode_regex.h\"\n#include \"./unicode_regex.h\"\n");
  tree.write("src/model/causal_lm.cpp",
             "#include \"../text/unicode_regex.h\"\n#include \"../cuda/launch.h\"\n");
  tree.write("src/cuda/launch.h", "#pragma once\n");
  const std::vector<std::string> expected = {
      "src/model/causal_lm.cpp:2 includes ../cuda/launch.h (model/ may not include cuda/)"};
  EXPECT_EQ(messages(check_tree(tree.root())), expected);
}

// Private headers live in src/<layer>/ and are included as "<layer>/name.h" from anywhere in the tree, under
// the same table; a public header (include/) may include only public ones, and the umbrella headers
// include/moe/*.h are the facade over them.
TEST(Layering, PrivateHeadersResolveUnderSrcAndStayOutOfPublicOnes) {
  Tree tree;
  tree.write("src/cpu/fast_experts.h", "#pragma once\n");
  tree.write("src/layer/private_stage.h", "#pragma once\n");
  tree.write("include/moe/core/tensor.h", "#pragma once\n");
  tree.write("include/moe/layer/moe_layer.h", "#include \"moe/core/tensor.h\"\n#include \"cpu/fast_experts.h\"\n");
  tree.write("include/moe/layer.h", "#include \"moe/layer/moe_layer.h\"\n");
  tree.write("src/layer/cpu_stages.cpp", "#include \"cpu/fast_experts.h\"\n#include \"moe/layer.h\"\n");
  tree.write("src/cpu/router.cpp", "#include \"layer/private_stage.h\"\n");
  const std::vector<std::string> expected = {
      "include/moe/layer/moe_layer.h:2 includes cpu/fast_experts.h (a public header may include only public "
      "ones: src/cpu/fast_experts.h is private)",
      "src/cpu/router.cpp:1 includes layer/private_stage.h (cpu/ may not include layer/)",
      "src/layer/cpu_stages.cpp:2 includes moe/layer.h (layer/ may not include facade/)"};
  EXPECT_EQ(messages(check_tree(tree.root())), expected);
}

// The project's own sources. Each line printed is one include to remove or move (the fix is in the code, not
// in an exception list here).
TEST(Layering, TheTreeFollowsTheLayers) {
  const Report report = check_tree(MOE_SOURCE_DIR);
  ASSERT_GT(report.files, 100) << "read too few sources under " << MOE_SOURCE_DIR;
  ASSERT_GT(report.includes, 500);
  std::string listing;
  for (const std::string& m : messages(report)) listing += "\n  " + m;
  EXPECT_TRUE(report.violations.empty())
      << report.violations.size() << " includes break the layering"
      << " (shared/DESIGN.md, table in tests/layering/layering.cpp):" << listing;
}

}  // namespace
}  // namespace moe::layering
