#pragma once
// An error the server answers with: an HTTP status and OpenAI's error object
// {"error": {"message", "type", "param", "code"}}, which the official clients turn into their exceptions
// (BadRequestError for 400, AuthenticationError 401, NotFoundError 404, ...).

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace moe::server {

struct ApiError : std::runtime_error {
  // `param`: the request field at fault, or empty.
  ApiError(int status, std::string message, std::string param = "")
      : std::runtime_error(message), status(status), param(std::move(param)) {}
  int status;
  std::string param;
};

// OpenAI's error type for an HTTP status ("BadRequestError", "NotFoundError", ...).
const char* error_type(int status);

// {"error": {"message": message, "type": error_type(status), "param": param or null, "code": status}}.
nlohmann::json error_json(int status, const std::string& message, const std::string& param = "");

}  // namespace moe::server
