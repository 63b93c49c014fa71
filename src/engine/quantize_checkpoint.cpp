// moe quantize: the checkpoint rewrite (which tensors, in which format, written atomically) and the
// per-expert weight errors. The calibration run is in quantize_calibration.cpp.
#include "engine/quantize_checkpoint.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "moe/core/checkpoint.h"
#include "moe/layer/moe_config.h"
#include "quant/int4_awq.h"
#include "quantize_calibration.h"

namespace moe::engine {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// What a source tensor is to the quantiser, from its HF name.
struct TensorRole {
  enum Kind : uint8_t { other, routed, shared, router, fused_gate_up, fused_down } kind = other;
  int64_t layer = -1;   // model.layers.N
  int64_t expert = -1;  // routed experts
  std::string block;    // the name up to and including "experts." (fused tensors)
};

TensorRole role_of(const std::string& name, bool quantize_gate) {
  static const std::regex routed(R"(.*\.experts\.(\d+)\.(gate_proj|up_proj|down_proj|w1|w2|w3)\.weight)");
  static const std::regex shared(R"(.*\.shared_experts?\.(gate_proj|up_proj|down_proj)\.weight)");
  static const std::regex router(R"(.*\.(mlp|block_sparse_moe)\.gate\.weight)");
  static const std::regex fused(R"((.*\.experts\.)(gate_up_proj|down_proj))");
  static const std::regex layer(R"(layers\.(\d+)\.)");
  TensorRole r;
  std::smatch m;
  if (std::regex_match(name, m, routed)) {
    r.kind = TensorRole::routed;
    r.expert = std::stoll(m[1]);
  } else if (std::regex_match(name, m, shared)) {
    r.kind = TensorRole::shared;
  } else if (quantize_gate && std::regex_match(name, m, router)) {
    r.kind = TensorRole::router;
  } else if (std::regex_match(name, m, fused)) {
    r.kind = m[2] == "gate_up_proj" ? TensorRole::fused_gate_up : TensorRole::fused_down;
    r.block = m[1];
  } else {
    return r;
  }
  if (std::regex_search(name, m, layer)) r.layer = std::stoll(m[1]);
  return r;
}

// "<module>.weight" -> "<module>".
std::string module_of(const std::string& weight_name) {
  return weight_name.substr(0, weight_name.size() - std::string_view(".weight").size());
}

// The linear modules left in their dtype, as transformers' modules_to_not_convert matches them.
std::string module_pattern(const std::string& weight_name) {
  static const std::regex digits(R"(\d+)");
  return std::regex_replace(module_of(weight_name), digits, "*");
}

bool inside(const fs::path& path, const fs::path& dir) {
  auto p = path.begin();
  for (auto d = dir.begin(); d != dir.end(); ++d, ++p)
    if (p == path.end() || *p != *d) return false;
  return true;
}

json read_json(const fs::path& file) {
  std::ifstream in(file);
  MOE_CHECK(in.good(), "cannot read '{}'", file.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    MOE_FAIL("'{}' is not valid JSON: {}", file.string(), e.what());
  }
}

void write_text(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  MOE_CHECK(out.is_open(), "cannot create '{}'", file.string());
  out << text;
  out.close();
  MOE_CHECK(!out.fail(), "cannot write '{}'", file.string());
}

// Removes a directory on scope exit unless released (the partial output of a failed run).
class RemoveOnFailure {
 public:
  explicit RemoveOnFailure(fs::path dir) : dir_(std::move(dir)) {}
  ~RemoveOnFailure() {
    std::error_code ignored;
    if (!dir_.empty()) fs::remove_all(dir_, ignored);
  }
  void release() { dir_.clear(); }

 private:
  fs::path dir_;
};

// Sums of squares for one expert's relative error.
struct ErrorSums {
  double diff = 0, norm = 0;
};

class Writer {
 public:
  Writer(const quant::QuantScheme& scheme, QuantizeReport& report) : scheme_(scheme), report_(report) {}

  void carry(const std::string& name, const Tensor& t) {
    tensors_.emplace_back(name, t);
    ++report_.carried_tensors;
    if (t.dim() == 2 && dtype_is_float(t.dtype()) && name.ends_with(".weight")) not_converted_.insert(module_pattern(name));
  }

  // Quantises the [N, K] weight `name` ("<module>.weight") and adds its error to `sums`.
  void quantize(const std::string& name, const Tensor& w, ErrorSums& sums, bool routed) {
    MOE_CHECK(w.dim() == 2 && dtype_is_float(w.dtype()), "tensor '{}' is {} {}: moe quantize reads float weights "
              "(F32, BF16, F16)", name, dtype_name(w.dtype()), w.shape_string());
    Tensor back;  // [N, K] F32
    size_t bytes = 0;
    if (scheme_.method == quant::QuantMethod::fp8_block) {
      quant::Fp8BlockWeight q = quant::quantize_fp8_block(w, scheme_.fp8_block);
      back = quant::dequantize_fp8_block(q.values, q.scale_inv, scheme_.fp8_block, DType::F32, name);
      bytes = q.values.nbytes() + q.scale_inv.nbytes();
      tensors_.emplace_back(name, std::move(q.values));
      tensors_.emplace_back(name + "_scale_inv", std::move(q.scale_inv));
    } else {
      const std::string module = module_of(name);
      quant::AwqInt4Weight q;
      try {
        q = quant::quantize_awq_int4(w, scheme_.group_size);
      } catch (const Error& e) {
        MOE_FAIL("cannot quantise '{}' to int4: {}", name, e.what());
      }
      back = quant::dequantize_awq_int4(q, scheme_.group_size, DType::F32, module);
      bytes = q.qweight.nbytes() + q.qzeros.nbytes() + q.scales.nbytes();
      tensors_.emplace_back(module + ".qweight", std::move(q.qweight));
      tensors_.emplace_back(module + ".qzeros", std::move(q.qzeros));
      tensors_.emplace_back(module + ".scales", std::move(q.scales));
    }
    if (routed) report_.routed_expert_bytes += static_cast<int64_t>(bytes);
    const Tensor ref = w.to_f32();
    for (int64_t i = 0; i < ref.numel(); ++i) {
      const double a = ref.data_as<float>()[i], d = back.data_as<float>()[i] - a;
      sums.diff += d * d;
      sums.norm += a * a;
    }
  }

  std::vector<std::pair<std::string, Tensor>>& tensors() { return tensors_; }
  std::vector<std::string> not_converted() const { return {not_converted_.begin(), not_converted_.end()}; }

 private:
  const quant::QuantScheme& scheme_;
  QuantizeReport& report_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
  std::set<std::string> not_converted_;
};

void check_paths(const QuantizeOptions& o) {
  std::error_code error;
  MOE_CHECK(fs::is_directory(o.model, error) && fs::exists(o.model / "config.json", error),
            "model directory '{}' has no config.json: pass a HuggingFace checkpoint directory", o.model.string());
  MOE_CHECK(!o.out.empty(), "the output directory is empty: name a new directory");
  const fs::path model = fs::weakly_canonical(o.model), out = fs::weakly_canonical(o.out);
  MOE_CHECK(!inside(out, model), "output directory '{}' is {} the model directory '{}': write the quantised "
            "checkpoint elsewhere", o.out.string(), out == model ? "the same as" : "inside", o.model.string());
  MOE_CHECK(!inside(model, out), "output directory '{}' contains the model directory '{}': choose a new directory",
            o.out.string(), o.model.string());
  MOE_CHECK(!fs::exists(out, error) || (fs::is_directory(out, error) && fs::is_empty(out, error)),
            "output directory '{}' exists and is not empty: remove it or choose a new one", o.out.string());
  MOE_CHECK(o.scheme.method != quant::QuantMethod::none, "no target format: choose fp8 or int4");
}

}  // namespace

double QuantizeReport::flip_rate() const {
  int64_t decisions = 0, flips = 0;
  for (const LayerRouting& l : routing) decisions += l.decisions, flips += l.flips;
  return decisions > 0 ? static_cast<double>(flips) / static_cast<double>(decisions) : 0.0;
}

double QuantizeReport::flip_rate_gate_kept() const {
  int64_t decisions = 0, flips = 0;
  for (const LayerRouting& l : routing) {
    if (l.flips_gate_kept < 0) return -1;
    decisions += l.decisions, flips += l.flips_gate_kept;
  }
  return decisions > 0 ? static_cast<double>(flips) / static_cast<double>(decisions) : -1.0;
}

double QuantizeReport::greedy_agreement() const {
  return greedy_positions > 0 ? static_cast<double>(greedy_agree) / static_cast<double>(greedy_positions) : 0.0;
}

QuantizeReport quantize_checkpoint(const QuantizeOptions& o) {
  check_paths(o);
  json config = read_json(o.model / "config.json");
  MOE_CHECK(!config.contains("quantization_config") || config["quantization_config"].is_null(),
            "'{}' is quantised already (config.json has a quantization_config): quantise from a float checkpoint",
            o.model.string());
  const MoeConfig moe = parse_moe_config(config);
  // Checked before any work: the calibration needs the tokenizer.
  MOE_CHECK(fs::exists(o.model / "tokenizer.json"), "'{}' has no tokenizer.json: the calibration run needs it",
            o.model.string());

  QuantizeReport report;
  report.method = std::string(quant::quant_method_name(o.scheme.method));
  Writer writer(o.scheme, report);
  std::map<std::pair<int64_t, int64_t>, ErrorSums> sums;  // (layer, expert) -> sums
  const Checkpoint checkpoint = Checkpoint::open(o.model);
  const bool mixtral = moe.naming == ExpertNaming::w1_w3_w2;
  int64_t last_layer = -1;
  for (const std::string& name : checkpoint.names()) {
    const Tensor t = checkpoint.get(name);
    report.source_bytes += static_cast<int64_t>(t.nbytes());
    const TensorRole r = role_of(name, o.quantize_gate);
    if (r.layer != last_layer && r.layer >= 0 && o.progress && r.kind != TensorRole::other) {
      o.progress(fmt::format("quantising layer {}", r.layer));
      last_layer = r.layer;
    }
    switch (r.kind) {
      case TensorRole::other: writer.carry(name, t); break;
      case TensorRole::routed: writer.quantize(name, t, sums[{r.layer, r.expert}], true); break;
      case TensorRole::shared: writer.quantize(name, t, sums[{r.layer, -1}], false); break;
      case TensorRole::router: writer.quantize(name, t, sums[{r.layer, -2}], false); break;
      case TensorRole::fused_gate_up:
      case TensorRole::fused_down: {
        // Written back under the per-expert names, as transformers' save_pretrained does.
        MOE_CHECK(t.dim() == 3, "fused expert tensor '{}' has shape {}, expected [experts, rows, columns]", name,
                  t.shape_string());
        const int64_t I = moe.expert_intermediate_size;
        for (int64_t e = 0; e < t.size(0); ++e) {
          const std::string base = fmt::format("{}{}.", r.block, e);
          ErrorSums& s = sums[{r.layer, e}];
          if (r.kind == TensorRole::fused_down) {
            writer.quantize(base + (mixtral ? "w2" : "down_proj") + ".weight", t.select(e), s, true);
          } else {
            MOE_CHECK(t.size(1) == 2 * I, "fused tensor '{}' has shape {}: expected {} rows (gate then up) of "
                      "expert size {}", name, t.shape_string(), 2 * I, I);
            writer.quantize(base + (mixtral ? "w1" : "gate_proj") + ".weight", t.select(e).narrow(0, 0, I), s, true);
            writer.quantize(base + (mixtral ? "w3" : "up_proj") + ".weight", t.select(e).narrow(0, I, I), s, true);
          }
        }
        break;
      }
    }
    if (r.kind != TensorRole::other) ++report.quantized_tensors;
  }
  MOE_CHECK(report.quantized_tensors > 0, "'{}' has no expert weights to quantise (names like "
            "'model.layers.N.mlp.experts.E.gate_proj.weight')", o.model.string());
  for (const auto& [key, s] : sums)
    report.errors.push_back({.layer = key.first, .expert = key.second,
                             .rel_error = s.norm > 0 ? std::sqrt(s.diff / s.norm) : std::sqrt(s.diff)});
  for (const auto& [name, t] : writer.tensors()) report.written_bytes += static_cast<int64_t>(t.nbytes());

  // Written next to the destination and renamed into place once complete.
  const fs::path out = fs::weakly_canonical(o.out);
  fs::create_directories(out.parent_path());
  const fs::path partial = out.parent_path() / fmt::format(".{}.partial-{}", out.filename().string(), getpid());
  std::error_code error;
  fs::remove_all(partial, error);
  RemoveOnFailure cleanup(partial);
  if (o.progress) o.progress("writing " + out.string());
  write_sharded_checkpoint(partial, writer.tensors(), o.max_shard_bytes);
  quant::QuantScheme written = o.scheme;
  written.modules_to_not_convert = writer.not_converted();
  config["quantization_config"] = quant::quant_scheme_json(written);
  write_text(partial / "config.json", config.dump(2) + "\n");
  for (const fs::directory_entry& entry : fs::directory_iterator(o.model)) {
    const std::string file = entry.path().filename().string();
    if (!entry.is_regular_file() || file == "config.json" || file == "model.safetensors.index.json" ||
        entry.path().extension() == ".safetensors")
      continue;
    fs::copy_file(entry.path(), partial / file, error);
    MOE_CHECK(!error, "cannot copy '{}' to '{}': {}", entry.path().string(), (partial / file).string(), error.message());
  }
  if (fs::exists(out)) fs::remove(out);  // empty (checked above)
  fs::rename(partial, out, error);
  MOE_CHECK(!error, "cannot move the written checkpoint '{}' to '{}': {}", partial.string(), out.string(), error.message());
  cleanup.release();

  calibrate(o, out, report);
  return report;
}

StoredWeightBytes stored_weight_bytes(const fs::path& model) {
  // The names of stored expert tensors: "<module>.weight", its "_scale_inv", or the AWQ triple.
  static const std::regex stored(R"((.*\.experts\.\d+\.[a-z_0-9]+)\.(weight|weight_scale_inv|qweight|qzeros|scales))");
  static const std::regex fused(R"(.*\.experts\.(gate_up_proj|down_proj)(_scales?_inv)?)");
  const Checkpoint checkpoint = Checkpoint::open(model);
  StoredWeightBytes bytes;
  for (const std::string& name : checkpoint.names()) {
    const auto n = static_cast<int64_t>(checkpoint.get(name).nbytes());
    bytes.total += n;
    if (std::regex_match(name, stored) || std::regex_match(name, fused)) bytes.routed_experts += n;
  }
  return bytes;
}

json quantize_report_json(const QuantizeReport& r) {
  json errors = json::array();
  for (const ExpertError& e : r.errors) {
    json item = {{"layer", e.layer}, {"rel_error", e.rel_error}};
    if (e.expert >= 0) item["expert"] = e.expert;
    else item["expert"] = e.expert == -1 ? "shared" : "gate";
    errors.push_back(item);
  }
  json routing = json::array();
  for (const LayerRouting& l : r.routing) {
    json item = {{"layer", l.layer}, {"tokens", l.decisions}, {"flips", l.flips}};
    if (l.flips_gate_kept >= 0) item["flips_gate_kept"] = l.flips_gate_kept;
    routing.push_back(item);
  }
  json out = {{"method", r.method},
              {"quantized_tensors", r.quantized_tensors},
              {"carried_tensors", r.carried_tensors},
              {"source_bytes", r.source_bytes},
              {"written_bytes", r.written_bytes},
              {"routed_expert_bytes", r.routed_expert_bytes},
              {"weight_errors", errors},
              {"calibration", {{"prompts", r.calibration_prompts},
                               {"tokens", r.calibration_tokens},
                               {"topk_flip_rate", r.flip_rate()},
                               {"greedy_agreement", r.greedy_agreement()},
                               {"greedy_positions", r.greedy_positions},
                               {"layers", routing}}}};
  if (r.flip_rate_gate_kept() >= 0) out["calibration"]["topk_flip_rate_gate_kept"] = r.flip_rate_gate_kept();
  return out;
}

}  // namespace moe::engine
