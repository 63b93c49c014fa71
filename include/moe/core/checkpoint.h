#pragma once
// A checkpoint: one safetensors file, or a HuggingFace directory holding either model.safetensors or a
// sharded set described by model.safetensors.index.json ({"metadata": {...}, "weight_map": {name: shard}}).
// Shards are mapped lazily, on first use of one of their tensors.

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "moe/core/safetensors.h"

namespace moe {

class Checkpoint {
 public:
  // `path` is a .safetensors file or a directory (index.json preferred, else model.safetensors, else the
  // single *.safetensors file in it). Errors name the missing or malformed file.
  static Checkpoint open(const std::filesystem::path& path);
  // Tensors made on demand instead of read from files (random weights of a model shape, with no file on
  // disk): `shapes` lists every name with its shape, and get(name) returns make(name, shape), a new tensor
  // each call (the caller keeps what it needs). `label` stands for the path in error messages.
  using Maker = std::function<Tensor(const std::string& name, const std::vector<int64_t>& shape)>;
  static Checkpoint generated(std::string label, std::map<std::string, std::vector<int64_t>> shapes,
                              Maker make);

  bool contains(const std::string& name) const;
  // Sorted tensor names across all shards.
  std::vector<std::string> names() const;
  // Zero-copy view; throws "tensor NAME not found in PATH" (with the closest names, if any) when missing,
  // and names the shard file when the index points at a missing shard.
  Tensor get(const std::string& name) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  struct ShardCache;

  std::filesystem::path path_;
  std::filesystem::path dir_;     // the shard files live here
  std::filesystem::path source_;  // the file that lists the names: the index, or the single file
  // name -> shard file (relative to dir_); a single-file checkpoint maps every name to that file.
  std::map<std::string, std::string> weight_map_;
  // A generated checkpoint's shapes (weight_map_ then maps each name to "") and maker.
  std::shared_ptr<const std::map<std::string, std::vector<int64_t>>> generated_shapes_;
  Maker make_;
  // Opened shards behind a mutex, shared by copies of this checkpoint.
  std::shared_ptr<ShardCache> shards_;
  const SafetensorsFile& shard(const std::string& file, const std::string& tensor) const;
};

// Writes `tensors` as a sharded checkpoint into `dir`: shards of at most `max_shard_bytes` named
// model-0000i-of-0000n.safetensors plus model.safetensors.index.json (as transformers' save_pretrained does).
void write_sharded_checkpoint(const std::filesystem::path& dir,
                              const std::vector<std::pair<std::string, Tensor>>& tensors, uint64_t max_shard_bytes);

}  // namespace moe
