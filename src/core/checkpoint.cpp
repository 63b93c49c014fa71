#include "moe/core/checkpoint.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>

#include "moe/core/check.h"
#include "core/text_file.h"

namespace moe {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Checkpoint::ShardCache {
  std::mutex mutex;
  // NOTE: std::map never moves its nodes, so references handed out stay valid while others are added.
  std::map<std::string, SafetensorsFile> files;
};

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";
// Names compared by edit distance for a "did you mean" hint; the rest are ranked by shared prefix/suffix only.
constexpr size_t kMaxHintCandidates = 2000;

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Characters `a` and `b` share at their start plus at their end (not counting any twice).
size_t shared_affix(std::string_view a, std::string_view b) {
  const size_t limit = std::min(a.size(), b.size());
  size_t prefix = 0;
  while (prefix < limit && a[prefix] == b[prefix]) ++prefix;
  size_t suffix = 0;
  while (prefix + suffix < limit && a[a.size() - 1 - suffix] == b[b.size() - 1 - suffix]) ++suffix;
  return prefix + suffix;
}

// The known name closest to `query` by edit distance, among those that share with it a prefix + suffix of
// at least two thirds of the shorter of the two (so "lm_head.weight" is offered for "model.lm_head.weight").
std::optional<std::string> closest_name(const std::string& query, const std::map<std::string, std::string>& names) {
  std::vector<std::pair<size_t, const std::string*>> candidates;  // (shared affix, name)
  for (const auto& [name, shard] : names) {
    const size_t shared = shared_affix(query, name);
    const size_t min_shared = std::max<size_t>(4, (2 * std::min(query.size(), name.size()) + 2) / 3);
    if (shared >= min_shared) candidates.emplace_back(shared, &name);
  }
  if (candidates.size() > kMaxHintCandidates) {
    std::partial_sort(candidates.begin(), candidates.begin() + kMaxHintCandidates, candidates.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first; });
    candidates.resize(kMaxHintCandidates);
  }
  const std::string* best = nullptr;
  size_t best_distance = 0;
  for (const auto& [shared, name] : candidates) {
    const size_t distance = edit_distance(query, *name);
    if (best == nullptr || distance < best_distance || (distance == best_distance && *name < *best)) {
      best = name;
      best_distance = distance;
    }
  }
  if (best == nullptr) return std::nullopt;
  return *best;
}

std::map<std::string, std::string> read_weight_map(const fs::path& index_path) {
  const std::string file = index_path.string();
  const json index = read_json_file(index_path, "index file");
  MOE_CHECK(index.is_object(), "index file '{}' is a JSON {}, expected an object with a \"weight_map\"", file,
            index.type_name());
  MOE_CHECK(index.contains("weight_map") && index["weight_map"].is_object(),
            "index file '{}' has no \"weight_map\" object mapping tensor names to shard files", file);
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    MOE_CHECK(shard.is_string() && !shard.get<std::string>().empty(),
              "index file '{}': weight_map entry '{}' is {}, expected a shard file name", file, name, shard.dump());
    // NOTE: a shard is a file of the checkpoint's directory: an index must not reach other files (an absolute
    // path, "..") on the machine that loads it.
    const fs::path shard_path(shard.get<std::string>());
    const bool inside = shard_path.is_relative() &&
                        std::none_of(shard_path.begin(), shard_path.end(), [](const fs::path& part) { return part == ".."; });
    MOE_CHECK(inside, "index file '{}': weight_map entry '{}' names shard '{}', outside the checkpoint directory: shard "
              "names must be relative paths without '..'", file, name, shard.get<std::string>());
    weight_map.emplace(name, shard.get<std::string>());
  }
  return weight_map;
}

}  // namespace

Checkpoint Checkpoint::open(const fs::path& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  MOE_CHECK(fs::exists(status), "checkpoint '{}' does not exist: pass a .safetensors file or a model directory",
            path.string());

  Checkpoint checkpoint;
  checkpoint.path_ = path;
  checkpoint.shards_ = std::make_shared<ShardCache>();

  fs::path single;
  if (!fs::is_directory(status)) {
    single = path;
  } else if (fs::exists(path / kIndexName, error)) {
    checkpoint.dir_ = path;
    checkpoint.source_ = path / kIndexName;
    checkpoint.weight_map_ = read_weight_map(checkpoint.source_);
    return checkpoint;
  } else if (fs::exists(path / kSingleName, error)) {
    single = path / kSingleName;
  } else {
    std::vector<std::string> found;
    for (const fs::directory_entry& entry : fs::directory_iterator(path, error))
      if (entry.path().extension() == ".safetensors" && entry.is_regular_file(error))
        found.push_back(entry.path().filename().string());
    std::sort(found.begin(), found.end());
    MOE_CHECK(found.size() == 1,
              "no checkpoint in directory '{}': looked for {}, then {}, then a single *.safetensors file (found {}{}{})",
              path.string(), kIndexName, kSingleName, found.size(), found.empty() ? "" : ": ",
              fmt::join(found, ", "));
    single = path / found.front();
  }

  // One file: every name maps to it, and it is opened now (its header is the list of names).
  checkpoint.dir_ = single.parent_path();
  checkpoint.source_ = single;
  const std::string key = single.filename().string();
  SafetensorsFile file = SafetensorsFile::open(single);
  for (const std::string& name : file.names()) checkpoint.weight_map_.emplace(name, key);
  checkpoint.shards_->files.emplace(key, std::move(file));
  return checkpoint;
}

Checkpoint Checkpoint::generated(std::string label, std::map<std::string, std::vector<int64_t>> shapes,
                                 Maker make) {
  MOE_CHECK(make != nullptr, "a generated checkpoint ({}) needs a maker", label);
  Checkpoint checkpoint;
  checkpoint.path_ = checkpoint.source_ = label;
  for (const auto& [name, shape] : shapes) checkpoint.weight_map_.emplace(name, "");
  checkpoint.generated_shapes_ =
      std::make_shared<const std::map<std::string, std::vector<int64_t>>>(std::move(shapes));
  checkpoint.make_ = std::move(make);
  checkpoint.shards_ = std::make_shared<ShardCache>();
  return checkpoint;
}

bool Checkpoint::contains(const std::string& name) const { return weight_map_.count(name) != 0; }

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> names;
  names.reserve(weight_map_.size());
  for (const auto& [name, shard] : weight_map_) names.push_back(name);
  return names;
}

const SafetensorsFile& Checkpoint::shard(const std::string& file, const std::string& tensor) const {
  // NOTE: the lock is held while a shard is mapped, so each shard is opened once however many threads ask.
  std::lock_guard lock(shards_->mutex);
  const auto it = shards_->files.find(file);
  if (it != shards_->files.end()) return it->second;
  const fs::path shard_path = dir_ / file;
  std::error_code error;
  MOE_CHECK(fs::exists(shard_path, error), "shard '{}' of tensor '{}' (listed in '{}') does not exist",
            shard_path.string(), tensor, source_.string());
  return shards_->files.emplace(file, SafetensorsFile::open(shard_path)).first->second;
}

Tensor Checkpoint::get(const std::string& name) const {
  const auto it = weight_map_.find(name);
  if (it == weight_map_.end()) {
    const std::optional<std::string> hint = closest_name(name, weight_map_);
    MOE_FAIL("tensor '{}' not found in {}{}", name, source_.string(),
             hint ? fmt::format(" (did you mean '{}'?)", *hint) : std::string());
  }
  if (generated_shapes_) return make_(name, generated_shapes_->at(name));
  const SafetensorsFile& file = shard(it->second, name);
  MOE_CHECK(file.contains(name), "'{}' maps tensor '{}' to '{}', but that shard has no such tensor",
            source_.string(), name, file.path().string());
  return file.get(name);
}

void write_sharded_checkpoint(const fs::path& dir, const std::vector<std::pair<std::string, Tensor>>& tensors,
                              uint64_t max_shard_bytes) {
  std::set<std::string_view> seen;
  for (const auto& [name, tensor] : tensors)
    MOE_CHECK(seen.insert(name).second, "cannot write checkpoint '{}': duplicate tensor name '{}'", dir.string(),
              name);

  // Greedy, in the given order (as save_pretrained does): a tensor larger than the limit gets a shard alone.
  std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
  uint64_t shard_bytes = 0;
  for (const auto& item : tensors) {
    const uint64_t bytes = item.second.nbytes();
    if (!shards.back().empty() && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(item);
    shard_bytes += bytes;
  }

  std::error_code error;
  fs::create_directories(dir, error);
  MOE_CHECK(!error, "cannot create checkpoint directory '{}': {}", dir.string(), error.message());

  json weight_map = json::object();
  uint64_t total_size = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    // "format": "pt" is what transformers checks for when it loads a shard.
    write_safetensors(dir / file, shards[i], {{"format", "pt"}});
    for (const auto& [name, tensor] : shards[i]) {
      weight_map[name] = file;
      total_size += tensor.nbytes();
    }
  }

  const json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  const fs::path index_path = dir / kIndexName;
  std::ofstream out(index_path, std::ios::binary | std::ios::trunc);
  MOE_CHECK(out.is_open(), "cannot create index file '{}': {}", index_path.string(), std::strerror(errno));
  out << index.dump(2) << '\n';
  out.close();
  MOE_CHECK(!out.fail(), "cannot write index file '{}'", index_path.string());
}

}  // namespace moe
