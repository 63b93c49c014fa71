#include "moe/engine/request.h"

namespace moe::engine {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::none: return "none";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "abort";
  }
  return "unknown";
}

}  // namespace moe::engine
