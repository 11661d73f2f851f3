// dfgnn's own named spdlog logger ("dfgnn"); the application's default logger is never touched.
// Level from DFGNN_LOG_LEVEL (trace, debug, info, warn, error, critical, off, in any case; default
// warn, also for an unknown name, which is logged as a warning naming the accepted ones).
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>
#include <string_view>

namespace dfgnn {

spdlog::logger& log();

// A DFGNN_LOG_LEVEL value, case-insensitive (spdlog's names, also "warning" and "err"); nullopt
// for an unknown one.
std::optional<spdlog::level::level_enum> parse_log_level(std::string_view text);

// Times one step of a call and logs "span NAME: N us" at debug level when it ends, so that a first
// call's milliseconds can be placed (bench/cold_start.py --breakdown reads these lines). Below
// debug it costs one level check. name: a string literal.
class Span {
 public:
  explicit Span(const char* name)
      : name_(name), on_(log().should_log(spdlog::level::debug)), start_(on_ ? Clock::now() : Clock::time_point{}) {}
  ~Span() {
    if (on_)
      log().debug("span {}: {} us", name_,
                  std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_).count());
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  using Clock = std::chrono::steady_clock;
  const char* name_;
  bool on_;
  Clock::time_point start_;
};

}  // namespace dfgnn
