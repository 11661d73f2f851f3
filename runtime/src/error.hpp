// Errors inside dfgnn are exceptions carrying a status code; the C boundary (api_guard.hpp) turns
// them into status codes plus the thread-local last-error message.
#pragma once

#include <dfgnn/dfgnn.h>

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace dfgnn {

class Error : public std::runtime_error {
 public:
  Error(dfgnn_status_t status, const std::string& message) : std::runtime_error(message), status_(status) {}
  dfgnn_status_t status() const noexcept { return status_; }

 private:
  dfgnn_status_t status_;
};

template <typename... Args>
[[noreturn]] void fail(dfgnn_status_t status, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(status, fmt::format(format, std::forward<Args>(args)...));
}

// Checks an argument; the message names the problem.
template <typename... Args>
void require(bool condition, fmt::format_string<Args...> format, Args&&... args) {
  if (!condition) fail(DFGNN_STATUS_INVALID_ARGUMENT, format, std::forward<Args>(args)...);
}

}  // namespace dfgnn
