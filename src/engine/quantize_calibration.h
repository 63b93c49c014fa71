#pragma once
// moe quantize's calibration run: the original and the quantised model on the same prompts (CPU, fast bf16
// experts, teacher-forced), compared by their routing and their greedy next tokens.

#include <filesystem>

#include "engine/quantize_checkpoint.h"

namespace moe::engine {

// Fills report.routing, greedy_*, calibration_* from options.model against `quantized` (a written
// checkpoint directory).
void calibrate(const QuantizeOptions& options, const std::filesystem::path& quantized, QuantizeReport& report);

}  // namespace moe::engine
