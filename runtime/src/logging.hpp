// dfgnn's own named spdlog logger ("dfgnn"); the application's default logger is never touched.
// Level from DFGNN_LOG_LEVEL (trace, debug, info, warn, error, critical, off; default warn).
#pragma once

#include <spdlog/spdlog.h>

namespace dfgnn {

spdlog::logger& log();

}  // namespace dfgnn
