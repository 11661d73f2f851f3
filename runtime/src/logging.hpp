// dfgnn's own named spdlog logger ("dfgnn"); the application's default logger is never touched.
// Level from DFGNN_LOG_LEVEL (trace, debug, info, warn, error, critical, off, in any case; default
// warn, also for an unknown name, which is logged as a warning naming the accepted ones).
#pragma once

#include <spdlog/spdlog.h>

#include <optional>
#include <string_view>

namespace dfgnn {

spdlog::logger& log();

// A DFGNN_LOG_LEVEL value, case-insensitive (spdlog's names, also "warning" and "err"); nullopt
// for an unknown one.
std::optional<spdlog::level::level_enum> parse_log_level(std::string_view text);

}  // namespace dfgnn
