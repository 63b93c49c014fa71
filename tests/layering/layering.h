#pragma once
// The layering check: reads every #include of the sources under a tree's src/, include/moe/ and bench/ and
// reports each that goes up the layers or across the backends (shared/DESIGN.md "Layers"; the table is in
// layering.cpp), and each MPI, NCCL or CUDA header outside the layers that may use them.

#include <filesystem>
#include <string>
#include <vector>

namespace moe::layering {

struct Violation {
  std::string file;  // relative to the tree's root, e.g. "src/cuda/moe_layer.cu"
  int line;          // 1-based
  std::string what;  // e.g. "includes moe/layer/moe_layer.h (cuda/ may not include layer/)"

  // "src/cuda/moe_layer.cu:12 includes moe/layer/moe_layer.h (cuda/ may not include layer/)".
  std::string message() const;
};

struct Report {
  int files = 0;                      // sources read
  int includes = 0;                   // #include lines among them
  std::vector<Violation> violations;  // in file order, then line order
};

// Checks the sources (.h .hpp .cuh .inc .c .cc .cpp .cu) under root/src, root/include/moe and root/bench.
Report check_tree(const std::filesystem::path& root);

}  // namespace moe::layering
