#include "api_error.h"

namespace moe::server {

const char* error_type(int status) {
  switch (status) {
    case 400:
      return "BadRequestError";
    case 401:
      return "AuthenticationError";
    case 404:
      return "NotFoundError";
    case 405:
      return "MethodNotAllowedError";
    case 408:
      return "RequestTimeoutError";
    case 409:
      return "ConflictError";
    case 413:
      return "PayloadTooLargeError";
    case 429:
      return "RateLimitError";
    case 503:
      return "ServiceUnavailableError";
    default:
      return status >= 500 ? "InternalServerError" : "BadRequestError";
  }
}

nlohmann::json error_json(int status, const std::string& message, const std::string& param) {
  return {{"error",
           {{"message", message},
            {"type", error_type(status)},
            {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
            {"code", status}}}};
}

}  // namespace moe::server
