#include "logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <string>

namespace dfgnn {

std::optional<spdlog::level::level_enum> parse_log_level(std::string_view text) {
  std::string name(text);
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  const spdlog::level::level_enum level = spdlog::level::from_str(name);
  // from_str answers "off" for any name it does not know.
  if (level == spdlog::level::off && name != "off") return std::nullopt;
  return level;
}

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto existing = spdlog::get("dfgnn");  // the application may have configured one already
    if (existing) return existing;
    auto made = spdlog::stderr_color_mt("dfgnn");
    made->set_level(spdlog::level::warn);
    if (const char* text = std::getenv("DFGNN_LOG_LEVEL")) {
      if (const auto level = parse_log_level(text)) made->set_level(*level);
      else made->warn("DFGNN_LOG_LEVEL='{}' is not one of trace, debug, info, warn, error, critical, off (any case); "
                      "logging at warn", text);
    }
    return made;
  }();
  return *logger;
}

}  // namespace dfgnn
