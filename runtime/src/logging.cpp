#include "logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace dfgnn {

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto existing = spdlog::get("dfgnn");  // the application may have configured one already
    if (existing) return existing;
    auto made = spdlog::stderr_color_mt("dfgnn");
    const char* level = std::getenv("DFGNN_LOG_LEVEL");
    made->set_level(level != nullptr ? spdlog::level::from_str(level) : spdlog::level::warn);
    return made;
  }();
  return *logger;
}

}  // namespace dfgnn
